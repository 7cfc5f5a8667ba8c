#!/usr/bin/env python3
"""Reference vectors for risk-gpu's INT4 / INT8 formats, written independently of the Rust
code with numpy only (no torch, no AutoAWQ install needed).

INT4: AutoAWQ's zero-point quantizer (`pseudo_quantize_tensor`): per output row and group
of `g` inputs, s = max(max - min, 1e-5) / 15 (rounded to float16, then used as float32),
z = clamp(-round(min / s), 0, 15), q = clamp(round(w / s) + z, 0, 15), round half to even
(torch.round). Packed in AutoAWQ's GEMM layout (`WQLinear_GEMM`): qweight int32
[in, out/8] where nibble k of word c holds column 8c + ORDER[k], ORDER = 0,2,4,6,1,3,5,7;
qzeros int32 [in/g, out/8] the same way; scales float16 [in/g, out].
INT8: per output row s = max|w| / 127 (1 if zero), q = clamp(round(w / s), -127, 127).

Writes testdata/quant/awq_reference.safetensors (safetensors written by hand: 8-byte
little-endian header length, JSON header, raw little-endian data).

    python3 tools/awq_reference.py
"""
import json
import pathlib
import struct

import numpy as np

ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
F32 = np.float32


def quantize_int4(w, g):
    out, inp = w.shape
    groups = inp // g
    q = np.zeros((out, inp), dtype=np.int64)
    z = np.zeros((out, groups), dtype=np.int64)
    s = np.zeros((out, groups), dtype=np.float16)
    for r in range(out):
        for k in range(groups):
            v = w[r, k * g:(k + 1) * g].astype(F32)
            lo, hi = F32(v.min()), F32(v.max())
            scale = np.float16(max(F32(hi - lo), F32(1e-5)) / F32(15.0))
            sf = F32(scale)
            zero = int(np.clip(-np.rint(F32(lo / sf)), 0, 15))
            s[r, k] = scale
            z[r, k] = zero
            q[r, k * g:(k + 1) * g] = np.clip(np.rint((v / sf).astype(F32)) + zero, 0, 15)
    return q, z, s


def dequantize_int4(q, z, s, g):
    out, inp = q.shape
    d = np.zeros((out, inp), dtype=F32)
    for c in range(inp):
        d[:, c] = (q[:, c] - z[:, c // g]).astype(F32) * s[:, c // g].astype(F32)
    return d


def pack_columns(m):
    """[rows, cols] of 4-bit values -> int32 [rows, cols/8] in AutoAWQ's nibble order."""
    rows, cols = m.shape
    words = np.zeros((rows, cols // 8), dtype=np.uint32)
    for c in range(cols // 8):
        for k, o in enumerate(ORDER):
            words[:, c] |= (m[:, 8 * c + o].astype(np.uint32) & 15) << np.uint32(4 * k)
    return words.view(np.int32)


def quantize_int8(w):
    m = np.abs(w).max(axis=1).astype(F32)
    s = np.where(m > 0, m / F32(127.0), F32(1.0)).astype(F32)
    q = np.clip(np.rint((w / s[:, None]).astype(F32)), -127, 127).astype(np.int16)
    return q, s, (q.astype(F32) * s[:, None]).astype(F32)


def matrix(rng, out, inp):
    w = (rng.standard_normal((out, inp)) * 0.05).astype(F32)
    w[0, 3] = F32(0.9)  # an outlier
    w[1, :] = F32(0.25)  # a constant row: range 0, scale clamped to 1e-5 / 15
    w[2, 5:9] = F32(0.0)
    return w


def main():
    rng = np.random.default_rng(20261129)
    tensors = {}
    for name, (out, inp, g) in {"a": (16, 64, 32), "b": (24, 128, 64), "c": (8, 256, 128)}.items():
        w = matrix(rng, out, inp)
        q, z, s = quantize_int4(w, g)
        tensors[f"{name}.w"] = w
        tensors[f"{name}.qweight"] = pack_columns(q.T.copy())  # [in, out/8]
        tensors[f"{name}.qzeros"] = pack_columns(z.T.copy())  # [in/g, out/8]
        tensors[f"{name}.scales"] = s.T.copy()  # [in/g, out]
        tensors[f"{name}.dequant"] = dequantize_int4(q, z, s, g)
        q8, s8, d8 = quantize_int8(w)
        tensors[f"{name}.int8_q"] = q8
        tensors[f"{name}.int8_scales"] = s8
        tensors[f"{name}.int8_dequant"] = d8
    dtypes = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32",
              np.dtype(np.float16): "F16", np.dtype(np.int16): "I16"}
    header, blobs, off = {"__metadata__": {"group_sizes": "a=32,b=64,c=128"}}, [], 0
    for k in sorted(tensors):
        b = np.ascontiguousarray(tensors[k]).astype(tensors[k].dtype.newbyteorder("<")).tobytes()
        header[k] = {"dtype": dtypes[tensors[k].dtype], "shape": list(tensors[k].shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    path = pathlib.Path(__file__).resolve().parent.parent / "testdata/quant/awq_reference.safetensors"
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    print(f"wrote {path} ({path.stat().st_size} bytes, {len(tensors)} tensors)")


if __name__ == "__main__":
    main()
