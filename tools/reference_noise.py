"""How much float32 noise a fixture's reference carries.

transformers computes the fixtures' references in float64, except where a model casts to float32
on purpose: Gemma 4's RMSNorm (`hidden_states.float()`), eager attention's softmax
(`dtype=torch.float32`) and RoPE's cos/sin. This script reruns a Gemma 4 fixture both ways (as the
reference did, and with the RMSNorm and softmax casts removed; RoPE's cos/sin stay float32, as an
fp32 engine forms them too) and prints, per prompt, max |difference| / RMS of the logits, and
saves the float64 logits for comparing an engine against them. Run on a machine with torch and transformers (the fixtures' version, 5.17):

    python3 tools/reference_noise.py tests/data/fixtures/gemma4_text [out.safetensors]
"""
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def rel(a, b):
    return ((a - b).abs().max() / b.pow(2).mean().sqrt()).item()


def main(fixture, out=None):
    ref = load_file(f"{fixture}/reference.safetensors")
    model = AutoModelForCausalLM.from_pretrained(
        fixture, dtype=torch.float64, attn_implementation="eager", experts_implementation="eager"
    ).cuda().eval()
    prompts = sorted({k.split(".")[0] for k in ref if k.endswith(".ids")}, key=lambda p: int(p[1:]))

    def logits(ids):
        with torch.no_grad():
            return model(torch.tensor([ids.tolist()]).cuda(), use_cache=False).logits[0].float().cpu()

    as_reference = {p: logits(ref[f"{p}.ids"]) for p in prompts}

    # Remove the float32 casts: RMSNorm and softmax in float64.
    module = sys.modules[type(model.model).__module__]
    for name in dir(module):
        cls = getattr(module, name)
        if isinstance(cls, type) and name.startswith("Gemma4") and name.endswith("RMSNorm"):
            def forward(self, x):
                y = self._norm(x)
                return y * self.weight if self.with_scale else y
            cls.forward = forward
    softmax = torch.nn.functional.softmax
    torch.nn.functional.softmax = lambda x, dim=None, dtype=None, **kw: softmax(
        x, dim=dim, dtype=x.dtype if x.dtype == torch.float64 else dtype, **kw)

    saved = {}
    for p in prompts:
        pure = logits(ref[f"{p}.ids"])
        saved[f"{p}.ids"] = ref[f"{p}.ids"]
        saved[f"{p}.logits"] = pure.contiguous()
        print(f"{p} len {len(ref[f'{p}.ids'])}: rerun vs fixture {rel(as_reference[p], ref[f'{p}.logits']):.1e}, "
              f"fixture vs pure float64 {rel(ref[f'{p}.logits'], pure):.1e}")
    if out:
        save_file(saved, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
