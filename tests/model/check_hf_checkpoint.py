#!/usr/bin/env python3
"""Checks a Hugging Face Llama checkpoint directory with the standard library only (a reader
written from the formats' descriptions, independent of strata's): config.json names a
LlamaForCausalLM; the weights are model.safetensors, or shards model-0000k-of-0000n.safetensors
with model.safetensors.index.json whose weight_map names every tensor once, in the file that holds
it, and whose metadata.total_size is the bytes of all values; every tensor Hugging Face's
LlamaForCausalLM loads is there with its shape (and no other); each file's header is
8-byte-aligned JSON with data offsets that tile the data from 0. Prints one line per problem and
exits 1 if there is any. Usage: check_hf_checkpoint.py DIR"""
import json
import os
import re
import struct
import sys

SIZES = {"F32": 4, "BF16": 2, "F16": 2}


def expected_tensors(cfg):
    C, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    NH = cfg["num_attention_heads"]
    NKV = cfg.get("num_key_value_heads", NH)
    HS = C // NH
    out = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C]}
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = [V, C]
    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        out[p + "self_attn.q_proj.weight"] = [NH * HS, C]
        out[p + "self_attn.k_proj.weight"] = [NKV * HS, C]
        out[p + "self_attn.v_proj.weight"] = [NKV * HS, C]
        out[p + "self_attn.o_proj.weight"] = [C, NH * HS]
        out[p + "mlp.gate_proj.weight"] = [I, C]
        out[p + "mlp.up_proj.weight"] = [I, C]
        out[p + "mlp.down_proj.weight"] = [C, I]
        out[p + "input_layernorm.weight"] = [C]
        out[p + "post_attention_layernorm.weight"] = [C]
    return out


def read_header(path, problems):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    if n % 8:
        problems.append("%s: header length %d is not a multiple of 8" % (path, n))
    header = json.loads(data[8:8 + n])
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    spans = sorted(tuple(t["data_offsets"]) for t in tensors.values())
    at = 0
    for b, e in spans:
        if b != at:
            problems.append("%s: data offsets leave a gap or overlap at %d" % (path, b))
        at = e
    if at != len(data) - 8 - n:
        problems.append("%s: data is %d bytes, offsets end at %d" % (path, len(data) - 8 - n, at))
    return tensors


def main():
    d = sys.argv[1]
    problems = []
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg.get("model_type") != "llama" or "LlamaForCausalLM" not in cfg.get("architectures", []):
        problems.append("config.json: not a LlamaForCausalLM")
    want = expected_tensors(cfg)
    found = {}  # name -> (file, header entry)
    index_path = os.path.join(d, "model.safetensors.index.json")
    single = os.path.join(d, "model.safetensors")
    if os.path.exists(single):
        if os.path.exists(index_path):
            problems.append("both model.safetensors and an index are there")
        for name, t in read_header(single, problems).items():
            found[name] = ("model.safetensors", t)
    else:
        index = json.load(open(index_path))
        files = sorted(set(index["weight_map"].values()))
        n = len(files)
        for k, f in enumerate(files):
            if f != "model-%05d-of-%05d.safetensors" % (k + 1, n):
                problems.append("shard %s is not named model-%05d-of-%05d.safetensors" % (f, k + 1, n))
        total = 0
        for f in files:
            for name, t in read_header(os.path.join(d, f), problems).items():
                if name in found:
                    problems.append("%s is in two files" % name)
                found[name] = (f, t)
                total += t["data_offsets"][1] - t["data_offsets"][0]
                if index["weight_map"].get(name) != f:
                    problems.append("index puts %s in %s, it is in %s"
                                    % (name, index["weight_map"].get(name), f))
        if set(index["weight_map"]) != set(found):
            problems.append("index names %d tensors, the shards hold %d"
                            % (len(index["weight_map"]), len(found)))
        if index.get("metadata", {}).get("total_size") != total:
            problems.append("metadata.total_size %s, the tensors hold %d bytes"
                            % (index.get("metadata", {}).get("total_size"), total))
        leftovers = [f for f in os.listdir(d) if re.fullmatch(r"model-\d{5}-of-\d{5}\.safetensors", f)
                     and f not in files]
        if leftovers:
            problems.append("shards the index does not name: %s" % leftovers)
    for name, shape in want.items():
        if name not in found:
            problems.append("missing %s" % name)
            continue
        t = found[name][1]
        if t["shape"] != shape:
            problems.append("%s has shape %s, Hugging Face expects %s" % (name, t["shape"], shape))
        size = 1
        for s in shape:
            size *= s
        if t["dtype"] not in SIZES or t["data_offsets"][1] - t["data_offsets"][0] != size * SIZES.get(t["dtype"], 0):
            problems.append("%s: dtype %s and %d bytes" % (name, t["dtype"], t["data_offsets"][1] - t["data_offsets"][0]))
    for name in found:
        if name not in want:
            problems.append("unexpected tensor %s" % name)
    for p in problems:
        print("check_hf_checkpoint: " + p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
