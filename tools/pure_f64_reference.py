#!/usr/bin/env python3
"""Recompute a fixture's reference with transformers in float64 *everywhere*.

transformers runs some parts of a float64 model in float32 (RMSNorm casts to float32, the gated
DeltaNet torch kernels cast q/k/v/g/beta to float32, RoPE angles are formed in float32). Where a
model is ill-conditioned those float32 islands put float32 noise into the reference. This script
patches the casts away (a float64 tensor stays float64 under .float() / .to(torch.float32)), reruns
the reference prompts and writes the same format as the fixture's reference.safetensors, and
reports how far the shipped reference is from the pure-float64 one.

    python3 tools/pure_f64_reference.py FIXTURE_DIR OUT.safetensors
"""
import sys, torch, transformers
from safetensors.torch import load_file, save_file

def patch_float32_islands():
    orig_float, orig_to = torch.Tensor.float, torch.Tensor.to
    def keep_f64_float(self, *a, **k):
        return self if self.dtype == torch.float64 else orig_float(self, *a, **k)
    def keep_f64_to(self, *a, **k):
        dtype = k.get("dtype")
        for x in a:
            if isinstance(x, torch.dtype):
                dtype = x
        if self.dtype == torch.float64 and dtype == torch.float32:
            k2 = {key: v for key, v in k.items() if key != "dtype"}
            a2 = [x for x in a if not isinstance(x, torch.dtype)]
            return orig_to(self, *a2, **k2) if (a2 or k2) else self
        return orig_to(self, *a, **k)
    torch.Tensor.float, torch.Tensor.to = keep_f64_float, keep_f64_to

def run(d, patched):
    cfg = transformers.AutoConfig.from_pretrained(d)
    cls = transformers.AutoModelForImageTextToText if hasattr(cfg, "text_config") else transformers.AutoModelForCausalLM
    try:  # eager experts, as the fixtures' references were made (MoE models)
        m = cls.from_pretrained(d, dtype=torch.float64, attn_implementation="eager",
                                experts_implementation="eager").eval()
    except (TypeError, ValueError):
        m = cls.from_pretrained(d, dtype=torch.float64, attn_implementation="eager").eval()
    ref = load_file(f"{d}/reference.safetensors")
    out = {}
    for i in range(5):
        ids = ref[f"p{i}.ids"].long()[None]
        with torch.no_grad():
            o = m(input_ids=ids, use_cache=False, output_hidden_states=(i in (0, 2)))
            out[f"p{i}.ids"] = ref[f"p{i}.ids"]
            out[f"p{i}.logits"] = o.logits[0].float()
            for L, h in enumerate(o.hidden_states or []):
                out[f"p{i}.hidden{L}"] = h[0].float()
            r = m(input_ids=ids, use_cache=True)
            past, last = r.past_key_values, r.logits[0, -1]
            toks, steps = [], []
            for _ in range(16):
                t = int(torch.argmax(last)); toks.append(t); steps.append(last.float())
                r = m(input_ids=torch.tensor([[t]]), past_key_values=past, use_cache=True)
                past, last = r.past_key_values, r.logits[0, -1]
        out[f"p{i}.greedy"] = torch.tensor(toks, dtype=torch.int32)
        out[f"p{i}.step_logits"] = torch.stack(steps)
    return out, ref

def main():
    d, dst = sys.argv[1], sys.argv[2]
    plain, ref = run(d, False)
    for i in range(5):
        diff = (plain[f"p{i}.logits"] - ref[f"p{i}.logits"]).abs().max().item()
        print(f"unpatched rerun vs shipped reference, prompt {i}: max abs {diff:.3e}")
    patch_float32_islands()
    pure, _ = run(d, True)
    for i in range(5):
        r = ref[f"p{i}.logits"]
        diff = (pure[f"p{i}.logits"] - r).abs().max().item()
        rms = r.pow(2).mean().sqrt().item()
        print(f"pure float64 vs shipped reference, prompt {i}: max abs {diff:.3e} ({diff / rms:.3e} of RMS)"
              f" greedy equal {torch.equal(pure[f'p{i}.greedy'], ref[f'p{i}.greedy'])}")
    # .float() is patched to keep float64; .type() is not.
    save_file({k: (v.type(torch.float32) if v.dtype == torch.float64 else v).contiguous() for k, v in pure.items()}, dst)

if __name__ == "__main__":
    main()
