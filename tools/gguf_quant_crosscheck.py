#!/usr/bin/env python3
"""Cross-check kestrel's GGUF files and block quantizers against the reference implementations.

Needs numpy and llama.cpp's `gguf` python package (gguf-py, `pip install gguf`); optionally a
built libggml (llama.cpp's `libggml-base.so`, passed with --libggml or $LIBGGML) for the K-quant
and MXFP4 reference quantizers. Runs on any machine with those; kestrel's own tests do not need it.

What it checks, for Gaussian, Student-t and outlier-laden matrices:
  1. gguf-py's GGUFReader parses the files kestrel writes (metadata, shapes, types, offsets).
  2. Q8_0, Q5_0, Q5_1, F16 and BF16 bytes equal gguf-py's numpy quantizers (gguf.quants.quantize,
     where it implements the type).
  3. For every type, gguf-py's independent dequantizer (gguf.quants.dequantize) gives exactly the
     values kestrel's dequantizer gives (`kestrel quantize --type f32` of the quantized file).
  4. With libggml: every block type's bytes equal ggml_quantize_chunk(type, ..., imatrix=NULL),
     which runs llama.cpp's quantize_row_*_ref. (Bit-identity holds when libggml was compiled
     without fused multiply-add contraction of ggml-quants.c; see docs/gguf.md.)

Usage: tools/gguf_quant_crosscheck.py --kestrel build/kestrel [--libggml /path/libggml-base.so]
Exit status 0 when every check that could run passed.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as QT
except ImportError:
    sys.exit("needs llama.cpp's gguf python package (pip install gguf)")

TYPES = {  # kestrel --type name -> ggml type
    "q8_0": QT.Q8_0, "q5_0": QT.Q5_0, "q5_1": QT.Q5_1, "q4_k": QT.Q4_K, "q5_k": QT.Q5_K, "q6_k": QT.Q6_K,
    "f16": QT.F16, "bf16": QT.BF16,
}
if hasattr(QT, "MXFP4"):
    TYPES["mxfp4"] = QT.MXFP4


def matrices(seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    out["gauss.weight"] = (rng.standard_normal((16, 512)) * 0.02).astype(np.float32)
    out["student_t.weight"] = (rng.standard_t(3, (16, 512)) * 0.02).astype(np.float32)
    x = rng.standard_normal((16, 512)) * 0.02
    x[rng.random(x.shape) < 0.002] *= 100
    out["outliers.weight"] = x.astype(np.float32)
    out["ramp.weight"] = np.linspace(-1, 3, 8 * 256, dtype=np.float32).reshape(8, 256)
    out["const.weight"] = np.full((2, 256), 0.5, dtype=np.float32)
    out["zeros.weight"] = np.zeros((2, 256), dtype=np.float32)
    return out


def write_f32(path, tensors):
    w = gguf.GGUFWriter(path, "test")
    w.add_uint32("test.block_count", 1)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read(path):
    r = gguf.GGUFReader(path)
    return {t.name: t for t in r.tensors}


def kestrel(binary, *args):
    subprocess.run([binary, *args], check=True, stdout=subprocess.DEVNULL)


class Ggml:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        f = self.lib.ggml_quantize_chunk
        f.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_int64,
                      ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_float)]
        f.restype = ctypes.c_size_t

    def quantize(self, arr, qtype):
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        rows, n = arr.shape
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        out = np.zeros(rows * (n // block) * size, dtype=np.uint8)
        self.lib.ggml_quantize_chunk(int(qtype), arr.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                     out.ctypes.data, 0, rows, n, None)
        return out.tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kestrel", default="build/kestrel")
    ap.add_argument("--libggml", default=os.environ.get("LIBGGML"))
    args = ap.parse_args()
    ggml = Ggml(args.libggml) if args.libggml else None
    failures, checks = [], 0

    def check(ok, what):
        nonlocal checks
        checks += 1
        print(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            failures.append(what)

    src = matrices()
    with tempfile.TemporaryDirectory() as tmp:
        f32 = os.path.join(tmp, "f32.gguf")
        write_f32(f32, src)
        for name, qtype in TYPES.items():
            qpath, back = os.path.join(tmp, name + ".gguf"), os.path.join(tmp, name + "-f32.gguf")
            kestrel(args.kestrel, "quantize", "-i", f32, "-o", qpath, "--type", name)
            kestrel(args.kestrel, "quantize", "-i", qpath, "-o", back, "--type", "f32")
            ours, ours_f32 = read(qpath), read(back)
            for tname, arr in src.items():
                t = ours[tname]
                what = f"{name:5s} {tname}"
                check(t.tensor_type == qtype and list(t.shape) == list(arr.shape[::-1]), what + ": gguf-py reads type and shape")
                got = np.asarray(t.data).tobytes()
                try:
                    ref = np.asarray(gguf.quants.quantize(arr, qtype)).tobytes()
                    check(got == ref, what + ": bytes equal gguf-py's quantizer")
                except NotImplementedError:
                    pass
                deq = np.asarray(gguf.quants.dequantize(np.asarray(t.data), qtype), dtype=np.float32).reshape(arr.shape)
                mine = np.asarray(ours_f32[tname].data, dtype=np.float32).reshape(arr.shape)
                check(np.array_equal(deq, mine), what + ": gguf-py dequantizes to kestrel's values")
                if ggml is not None and qtype not in (QT.F16, QT.BF16):
                    check(got == ggml.quantize(arr, qtype), what + ": bytes equal libggml's reference quantizer")
    print(f"{checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
