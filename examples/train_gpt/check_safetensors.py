#!/usr/bin/env python3
"""Checks a safetensors file against an llm.c GPT-2 model file of the same weights, with the
standard library only (an independent reader of both formats): every tensor of Hugging Face's
GPT-2 is there with its shape, the Conv1D weights transposed ([in, out]), wte without the padding
rows, and every value equal. Usage: check_safetensors.py MODEL.bin MODEL.safetensors"""
import json
import struct
import sys


def floats(raw, dtype):
    if dtype == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    halves = struct.unpack("<%dH" % (len(raw) // 2), raw)  # BF16: the top half of an fp32
    return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]


def read_llmc(path):
    data = open(path, "rb").read()
    h = struct.unpack("<256i", data[:1024])
    assert h[0] == 20240326, "magic %d" % h[0]
    assert h[1] in (3, 5), "version %d" % h[1]
    maxT, V, L, NH, C, Vp = h[2], h[3], h[4], h[5], h[6], h[7]
    values = floats(data[1024:], "F32" if h[1] == 3 else "BF16")
    sizes = [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C),
             ("qkvw", L * 3 * C * C), ("qkvb", L * 3 * C), ("attprojw", L * C * C),
             ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C), ("fcw", L * 4 * C * C),
             ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C),
             ("lnfw", C), ("lnfb", C)]
    out, at = {}, 0
    for name, n in sizes:
        out[name] = values[at:at + n]
        at += n
    assert at == len(values), "size %d values, shape needs %d" % (len(values), at)
    return (maxT, V, L, C, Vp), out


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        tensors[name] = (t["shape"], floats(data[base + b:base + e], t["dtype"]))
    return tensors


def main():
    (maxT, V, L, C, Vp), m = read_llmc(sys.argv[1])
    st = read_safetensors(sys.argv[2])

    def layer(name, l, n):
        return m[name][l * n:(l + 1) * n]

    def transpose(w, rows, cols):  # [rows, cols] row-major -> [cols, rows]
        return [w[r * cols + k] for k in range(cols) for r in range(rows)]

    want = {"wte.weight": ([V, C], m["wte"][:V * C]), "wpe.weight": ([maxT, C], m["wpe"]),
            "ln_f.weight": ([C], m["lnfw"]), "ln_f.bias": ([C], m["lnfb"])}
    for l in range(L):
        p = "h.%d." % l
        want[p + "ln_1.weight"] = ([C], layer("ln1w", l, C))
        want[p + "ln_1.bias"] = ([C], layer("ln1b", l, C))
        want[p + "attn.c_attn.weight"] = ([C, 3 * C],
                                          transpose(layer("qkvw", l, 3 * C * C), 3 * C, C))
        want[p + "attn.c_attn.bias"] = ([3 * C], layer("qkvb", l, 3 * C))
        want[p + "attn.c_proj.weight"] = ([C, C], transpose(layer("attprojw", l, C * C), C, C))
        want[p + "attn.c_proj.bias"] = ([C], layer("attprojb", l, C))
        want[p + "ln_2.weight"] = ([C], layer("ln2w", l, C))
        want[p + "ln_2.bias"] = ([C], layer("ln2b", l, C))
        want[p + "mlp.c_fc.weight"] = ([C, 4 * C], transpose(layer("fcw", l, 4 * C * C), 4 * C, C))
        want[p + "mlp.c_fc.bias"] = ([4 * C], layer("fcb", l, 4 * C))
        want[p + "mlp.c_proj.weight"] = ([4 * C, C],
                                         transpose(layer("fcprojw", l, 4 * C * C), C, 4 * C))
        want[p + "mlp.c_proj.bias"] = ([C], layer("fcprojb", l, C))
    if set(want) != set(st):
        sys.exit("tensor names differ: missing %s, extra %s" %
                 (sorted(set(want) - set(st)), sorted(set(st) - set(want))))
    for name, (shape, values) in want.items():
        got_shape, got = st[name]
        if got_shape != shape:
            sys.exit("%s: shape %s, want %s" % (name, got_shape, shape))
        if got != values:
            bad = next(i for i in range(len(got)) if got[i] != values[i])
            sys.exit("%s: element %d is %r, want %r" % (name, bad, got[bad], values[bad]))
    print("safetensors: %d tensors, shapes and values as the model file (L=%d C=%d V=%d)" %
          (len(want), L, C, V))


if __name__ == "__main__":
    main()
