#!/usr/bin/env python3
"""An independent float64 reference of Hugging Face's Llama (LlamaForCausalLM) and of the
training strata runs, written with numpy from the published descriptions only (the model card
formulas, safetensors' and llm.c's file formats, AdamW) -- it shares no code with strata.

Subcommands:
  make DIR DATA --config-json J [--dtype F32|BF16] [--shards N] [--seed S] [--tokens N]
        [--token-bytes 2|4]
      writes a Hugging Face checkpoint directory DIR (config.json from J, weights drawn as
      Hugging Face initialises them: normal(0, 0.02), norms 1) and an llm.c token file DATA whose
      tokens follow a random sparse Markov chain (so that a model can learn it).
  check-gradients
      finite differences of the reference's backward on a tiny model (GQA and multi-head, tied and
      untied, llama3 rope scaling): every gradient to 1e-6 relative.
  train DIR DATA --metrics M --rows R --seq T --steps N [optimizer and schedule flags] [--rtol]
      trains from DIR on DATA as strata's train_gpt does (llm.c's sequential order: the batch of
      R rows is the R*T+1 tokens from k*R*T; the loss is the token mean; the gradient's global L2
      norm clipped to --grad-clip; AdamW with PyTorch's bias-corrected form and decoupled decay on
      the tensors --weight-decay-on selects; the learning rate warmed up linearly over --warmup
      steps, then constant or cosine-decayed to --lr-min at the last step) and compares every
      step's loss and gradient norm (before clipping) with the JSON Lines metrics file M written
      by strata (--metrics): relative difference at most --rtol, else exit 1.

Hugging Face semantics followed: RMSNorm y = w * x / sqrt(mean(x^2) + eps); rotary embeddings in
the rotate-half layout, inv_freq = 1 / theta^(2i/d) with rope_scaling type llama3; key/value head
j serves query heads j*G .. j*G+G-1 (repeat_kv); causal softmax(q k^T / sqrt(d)); the MLP
down(silu(gate(x)) * up(x)); no biases; lm_head or the tied embedding.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np


# ---------------------------------------------------------------------------------------------
# Files: safetensors (8-byte little-endian header length, JSON header, raw little-endian data)
# and llm.c token files (256 int32 header: magic, version, token count; then the tokens).

def _to_f64(raw, dtype, shape):
    if dtype == "F32":
        a = np.frombuffer(raw, dtype="<f4").astype(np.float64)
    elif dtype == "F16":
        a = np.frombuffer(raw, dtype="<f2").astype(np.float64)
    elif dtype == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        a = bits.view(np.float32).astype(np.float64)
    else:
        raise SystemExit(f"reference: dtype {dtype} not read")
    return a.reshape(shape)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out[name] = _to_f64(data[base + b:base + e], t["dtype"], t["shape"])
    return out


def read_checkpoint(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(d, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        for name in files:
            tensors.update(read_safetensors(os.path.join(d, name)))
    else:
        tensors = read_safetensors(os.path.join(d, "model.safetensors"))
    return cfg, tensors


def _encode(a, dtype):
    a32 = np.ascontiguousarray(a, dtype="<f4")
    if dtype == "F32":
        return a32.tobytes()
    if dtype == "BF16":
        bits = a32.view(np.uint32)
        # round to nearest even (the values are finite)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return rounded.astype("<u2").tobytes()
    raise SystemExit(f"reference: dtype {dtype} not written")


def write_safetensors(path, tensors, dtype):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        raw = _encode(a, dtype)
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for raw in blobs:
            f.write(raw)
    return off


def read_tokens(path):
    with open(path, "rb") as f:
        head = np.frombuffer(f.read(1024), dtype="<i4")
        magic, version, count = int(head[0]), int(head[1]), int(head[2])
        if (magic, version) == (20240520, 1):
            t = np.frombuffer(f.read(count * 2), dtype="<u2")
        elif (magic, version) == (20240801, 7):
            t = np.frombuffer(f.read(count * 4), dtype="<u4")
        else:
            raise SystemExit(f"reference: {path}: not an llm.c token file")
    if len(t) != count:
        raise SystemExit(f"reference: {path}: truncated")
    return t.astype(np.int64)


def write_tokens(path, tokens, token_bytes):
    head = np.zeros(256, dtype="<i4")
    head[0], head[1] = (20240520, 1) if token_bytes == 2 else (20240801, 7)
    head[2] = len(tokens)
    with open(path, "wb") as f:
        f.write(head.tobytes())
        f.write(np.asarray(tokens, dtype="<u2" if token_bytes == 2 else "<u4").tobytes())


# ---------------------------------------------------------------------------------------------
# The model: shapes and parameters as Hugging Face names them.

class Shape:
    def __init__(self, cfg):
        self.V = cfg["vocab_size"]
        self.C = cfg["hidden_size"]
        self.I = cfg["intermediate_size"]
        self.L = cfg["num_hidden_layers"]
        self.NH = cfg["num_attention_heads"]
        self.NKV = cfg.get("num_key_value_heads") or self.NH
        self.HS = self.C // self.NH
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.scaling = cfg.get("rope_scaling")
        self.tied = bool(cfg.get("tie_word_embeddings", False))

    def inv_freq(self):
        d = self.HS
        f = 1.0 / self.theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
        s = self.scaling
        if s and (s.get("rope_type") or s.get("type")) == "llama3":
            factor, lo, hi = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
            old = s["original_max_position_embeddings"]
            wavelen = 2 * math.pi / f
            scaled = np.where(wavelen > old / lo, f / factor, f)
            smooth = (old / wavelen - lo) / (hi - lo)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
            f = np.where(medium, smoothed, scaled)
        return f

    def names(self):
        n = ["model.embed_tokens.weight"]
        for l in range(self.L):
            p = f"model.layers.{l}."
            n += [p + "input_layernorm.weight", p + "self_attn.q_proj.weight",
                  p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight",
                  p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight",
                  p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"]
        n.append("model.norm.weight")
        if not self.tied:
            n.append("lm_head.weight")
        return n

    def shapes(self):
        C, I, V, q, kv = self.C, self.I, self.V, self.NH * self.HS, self.NKV * self.HS
        out = {}
        for name in self.names():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                out[name] = (C,)
            elif name.endswith("q_proj.weight"):
                out[name] = (q, C)
            elif name.endswith(("k_proj.weight", "v_proj.weight")):
                out[name] = (kv, C)
            elif name.endswith("o_proj.weight"):
                out[name] = (C, q)
            elif name.endswith(("gate_proj.weight", "up_proj.weight")):
                out[name] = (I, C)
            elif name.endswith("down_proj.weight"):
                out[name] = (C, I)
            else:
                out[name] = (V, C)
        return out


def rms_forward(x, w, eps):
    s = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xn = x * s
    return xn * w, (xn, s)


def rms_backward(dy, w, cache):
    xn, s = cache
    dw = np.sum(dy * xn, axis=tuple(range(dy.ndim - 1)))
    dxn = dy * w
    dx = s * (dxn - xn * np.mean(dxn * xn, axis=-1, keepdims=True))
    return dx, dw


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward_backward(sh, P, tokens, targets, want_grads=True):
    """Mean cross-entropy over the B*T tokens and, if asked, the gradient of every parameter."""
    B, T = tokens.shape
    C, NH, NKV, HS = sh.C, sh.NH, sh.NKV, sh.HS
    G = NH // NKV
    ang = np.arange(T, dtype=np.float64)[:, None] * sh.inv_freq()[None, :]
    ang = np.concatenate([ang, ang], axis=-1)  # [T, HS]
    cos, sin = np.cos(ang), np.sin(ang)
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    E = P["model.embed_tokens.weight"]
    h = E[tokens]
    caches = []
    for l in range(sh.L):
        p = f"model.layers.{l}."
        a, c1 = rms_forward(h, P[p + "input_layernorm.weight"], sh.eps)
        q = (a @ P[p + "self_attn.q_proj.weight"].T).reshape(B, T, NH, HS).transpose(0, 2, 1, 3)
        k = (a @ P[p + "self_attn.k_proj.weight"].T).reshape(B, T, NKV, HS).transpose(0, 2, 1, 3)
        v = (a @ P[p + "self_attn.v_proj.weight"].T).reshape(B, T, NKV, HS).transpose(0, 2, 1, 3)
        qr = q * cos + rotate_half(q) * sin
        kr = k * cos + rotate_half(k) * sin
        ke, ve = np.repeat(kr, G, axis=1), np.repeat(v, G, axis=1)  # key/value head of each query
        S = qr @ ke.transpose(0, 1, 3, 2) / math.sqrt(HS)
        S = np.where(mask, -np.inf, S)
        S = S - S.max(axis=-1, keepdims=True)
        Pr = np.exp(S)
        Pr /= Pr.sum(axis=-1, keepdims=True)
        O = (Pr @ ve).transpose(0, 2, 1, 3).reshape(B, T, NH * HS)
        h1 = h + O @ P[p + "self_attn.o_proj.weight"].T
        b, c2 = rms_forward(h1, P[p + "post_attention_layernorm.weight"], sh.eps)
        g = b @ P[p + "mlp.gate_proj.weight"].T
        u = b @ P[p + "mlp.up_proj.weight"].T
        m = silu(g) * u
        h2 = h1 + m @ P[p + "mlp.down_proj.weight"].T
        caches.append((a, c1, qr, ke, ve, Pr, O, b, c2, g, u, m))
        h = h2
    f, cf = rms_forward(h, P["model.norm.weight"], sh.eps)
    head = E if sh.tied else P["lm_head.weight"]
    logits = f @ head.T
    logits -= logits.max(axis=-1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=-1, keepdims=True)
    N = B * T
    loss = -np.mean(np.log(probs.reshape(N, -1)[np.arange(N), targets.reshape(N)]))
    if not want_grads:
        return loss, None
    grads = {n: np.zeros_like(P[n]) for n in sh.names()}
    dlog = probs.reshape(N, -1).copy()
    dlog[np.arange(N), targets.reshape(N)] -= 1.0
    dlog = (dlog / N).reshape(B, T, -1)
    dhead = np.einsum("btv,btc->vc", dlog, f)
    if sh.tied:
        grads["model.embed_tokens.weight"] += dhead
    else:
        grads["lm_head.weight"] = dhead
    dh, grads["model.norm.weight"] = rms_backward(dlog @ head, P["model.norm.weight"], cf)
    for l in reversed(range(sh.L)):
        p = f"model.layers.{l}."
        a, c1, qr, ke, ve, Pr, O, b, c2, g, u, m = caches[l]
        # MLP
        Wd, Wg, Wu = (P[p + "mlp.down_proj.weight"], P[p + "mlp.gate_proj.weight"],
                      P[p + "mlp.up_proj.weight"])
        grads[p + "mlp.down_proj.weight"] = np.einsum("btc,bti->ic", dh, m).T
        dm = dh @ Wd
        sig = 1.0 / (1.0 + np.exp(-g))
        dg = dm * u * sig * (1.0 + g * (1.0 - sig))
        du = dm * silu(g)
        grads[p + "mlp.gate_proj.weight"] = np.einsum("bti,btc->ic", dg, b)
        grads[p + "mlp.up_proj.weight"] = np.einsum("bti,btc->ic", du, b)
        dx, grads[p + "post_attention_layernorm.weight"] = rms_backward(
            dg @ Wg + du @ Wu, P[p + "post_attention_layernorm.weight"], c2)
        dh = dh + dx
        # attention
        Wo = P[p + "self_attn.o_proj.weight"]
        grads[p + "self_attn.o_proj.weight"] = np.einsum("btc,btj->cj", dh, O)
        dO = (dh @ Wo).reshape(B, T, NH, HS).transpose(0, 2, 1, 3)
        dP = dO @ ve.transpose(0, 1, 3, 2)
        dve = Pr.transpose(0, 1, 3, 2) @ dO
        dS = Pr * (dP - np.sum(dP * Pr, axis=-1, keepdims=True)) / math.sqrt(HS)
        dqr = dS @ ke
        dke = dS.transpose(0, 1, 3, 2) @ qr
        G = NH // NKV
        dkr = dke.reshape(B, NKV, G, T, HS).sum(axis=2)
        dv = dve.reshape(B, NKV, G, T, HS).sum(axis=2)
        # rotary: y = x cos + R x sin with R^T = -R, so dx = dy cos - R (dy sin)
        dq = dqr * cos - rotate_half(dqr * sin)
        dk = dkr * cos - rotate_half(dkr * sin)
        dq = dq.transpose(0, 2, 1, 3).reshape(B, T, NH * HS)
        dk = dk.transpose(0, 2, 1, 3).reshape(B, T, NKV * HS)
        dv = dv.transpose(0, 2, 1, 3).reshape(B, T, NKV * HS)
        Wq, Wk, Wv = (P[p + "self_attn.q_proj.weight"], P[p + "self_attn.k_proj.weight"],
                      P[p + "self_attn.v_proj.weight"])
        grads[p + "self_attn.q_proj.weight"] = np.einsum("btj,btc->jc", dq, a)
        grads[p + "self_attn.k_proj.weight"] = np.einsum("btj,btc->jc", dk, a)
        grads[p + "self_attn.v_proj.weight"] = np.einsum("btj,btc->jc", dv, a)
        dx, grads[p + "input_layernorm.weight"] = rms_backward(
            dq @ Wq + dk @ Wk + dv @ Wv, P[p + "input_layernorm.weight"], c1)
        dh = dh + dx
    np.add.at(grads["model.embed_tokens.weight"], tokens.reshape(-1), dh.reshape(-1, C))
    return loss, grads


# ---------------------------------------------------------------------------------------------
# Subcommands.

def cmd_make(args):
    with open(args.config_json) as f:
        cfg = json.load(f)
    cfg.setdefault("architectures", ["LlamaForCausalLM"])
    cfg.setdefault("model_type", "llama")
    sh = Shape(cfg)
    rng = np.random.default_rng(args.seed)
    tensors = {}
    for name, shape in sh.shapes().items():
        if "norm" in name:  # Hugging Face initialises RMSNorm weights to 1; perturbed to test them
            tensors[name] = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            tensors[name] = 0.02 * rng.standard_normal(shape)
    os.makedirs(args.dir, exist_ok=True)
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    names = list(tensors)
    if args.shards == 1:
        write_safetensors(os.path.join(args.dir, "model.safetensors"), tensors, args.dtype)
    else:
        per = -(-len(names) // args.shards)
        weight_map, total = {}, 0
        for s in range(args.shards):
            part = names[s * per:(s + 1) * per]
            file = f"model-{s + 1:05d}-of-{args.shards:05d}.safetensors"
            total += write_safetensors(os.path.join(args.dir, file),
                                       {n: tensors[n] for n in part}, args.dtype)
            weight_map.update({n: file for n in part})
        with open(os.path.join(args.dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    # Tokens: a Markov chain in which each token is followed by one of 3 successors.
    succ = rng.integers(0, sh.V, size=(sh.V, 3))
    toks = np.empty(args.tokens, dtype=np.int64)
    toks[0] = 0
    choice = rng.integers(0, 3, size=args.tokens)
    for i in range(1, args.tokens):
        toks[i] = succ[toks[i - 1], choice[i]]
    write_tokens(args.data, toks, args.token_bytes)


def cmd_check_gradients(_args):
    worst = 0.0
    cases = [
        dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
        dict(num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True,
             rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                           "high_freq_factor": 4.0, "original_max_position_embeddings": 8}),
        dict(num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=False),
    ]
    for i, extra in enumerate(cases):
        cfg = dict(vocab_size=11, hidden_size=8, intermediate_size=12, num_hidden_layers=2,
                   rms_norm_eps=1e-5, rope_theta=100.0, **extra)
        sh = Shape(cfg)
        rng = np.random.default_rng(i)
        P = {n: (1.0 if "norm" in n else 0.0) + 0.3 * rng.standard_normal(s)
             for n, s in sh.shapes().items()}
        tokens = rng.integers(0, sh.V, size=(2, 5))
        targets = rng.integers(0, sh.V, size=(2, 5))
        _, grads = forward_backward(sh, P, tokens, targets)
        for name in sh.names():
            flat = P[name].reshape(-1)
            for j in rng.choice(flat.size, size=min(6, flat.size), replace=False):
                old, step = flat[j], 1e-5
                flat[j] = old + step
                lp, _ = forward_backward(sh, P, tokens, targets, False)
                flat[j] = old - step
                lm, _ = forward_backward(sh, P, tokens, targets, False)
                flat[j] = old
                fd = (lp - lm) / (2 * step)
                an = grads[name].reshape(-1)[j]
                err = abs(fd - an) / max(abs(fd), 1e-4)
                worst = max(worst, err)
                if err > 1e-6:
                    raise SystemExit(f"reference: case {i} {name}[{j}]: backward {an:.10g}, "
                                     f"finite difference {fd:.10g}")
    print(f"reference: every gradient agrees with its finite difference (worst {worst:.2e})")


def lr_at(args, step):
    if step <= args.warmup:
        return args.lr * step / args.warmup
    if args.lr_schedule == "constant":
        return args.lr
    progress = min(max((step - 1 - args.warmup) / (args.steps - args.warmup), 0.0), 1.0)
    return args.lr_min + (args.lr - args.lr_min) * 0.5 * (1 + math.cos(math.pi * progress))


def decayed(name, rule):
    if rule == "all":
        return True
    return not name.endswith("norm.weight")  # Llama's 1-D tensors; it has no biases


def cmd_train(args):
    cfg, P = read_checkpoint(args.dir)
    sh = Shape(cfg)
    missing = set(sh.names()) - set(P)
    if missing:
        raise SystemExit(f"reference: {args.dir} lacks {sorted(missing)}")
    tokens = read_tokens(args.data)
    R, T = args.rows, args.seq
    m = {n: np.zeros_like(P[n]) for n in sh.names()}
    v = {n: np.zeros_like(P[n]) for n in sh.names()}
    strata = {}
    with open(args.metrics) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec:
                strata[rec["step"]] = rec
    worst = worst_norm = 0.0
    for step in range(1, args.steps + 1):
        start = (step - 1) * R * T
        window = tokens[start:start + R * T + 1]
        x, y = window[:-1].reshape(R, T), window[1:].reshape(R, T)
        loss, grads = forward_backward(sh, P, x, y)
        norm = math.sqrt(sum(float(np.sum(g * g)) for g in grads.values()))
        coef = args.grad_clip / norm if args.grad_clip > 0 and norm > args.grad_clip else 1.0
        lr = lr_at(args, step)
        bc1, bc2 = 1 - args.beta1 ** step, 1 - args.beta2 ** step
        for n in sh.names():
            g = grads[n] * coef
            m[n] = args.beta1 * m[n] + (1 - args.beta1) * g
            v[n] = args.beta2 * v[n] + (1 - args.beta2) * g * g
            wd = args.weight_decay if decayed(n, args.weight_decay_on) else 0.0
            P[n] = P[n] - lr * (m[n] / bc1 / (np.sqrt(v[n] / bc2) + args.eps) + wd * P[n])
        if step not in strata:
            raise SystemExit(f"reference: {args.metrics} has no loss for step {step}")
        got, got_norm = strata[step]["loss"], strata[step]["norm"]
        rel, rel_norm = abs(got - loss) / abs(loss), abs(got_norm - norm) / norm
        worst, worst_norm = max(worst, rel), max(worst_norm, rel_norm)
        print(f"step {step:3d} | reference loss {loss:.9f} norm {norm:.7f} | strata loss "
              f"{got:.9f} norm {got_norm:.7f} | relative {rel:.2e}, {rel_norm:.2e}")
        for what, a, b, r in (("loss", got, loss, rel), ("gradient norm", got_norm, norm, rel_norm)):
            if r > args.rtol:
                raise SystemExit(f"reference: step {step}: strata's {what} {a!r} differs from the "
                                 f"float64 reference's {b!r} by {r:.2e} relative "
                                 f"(more than {args.rtol:g})")
    print(f"reference: {args.steps} steps agree (worst relative difference: loss {worst:.2e}, "
          f"gradient norm {worst_norm:.2e})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make")
    mk.add_argument("dir")
    mk.add_argument("data")
    mk.add_argument("--config-json", required=True)
    mk.add_argument("--dtype", default="F32", choices=["F32", "BF16"])
    mk.add_argument("--shards", type=int, default=1)
    mk.add_argument("--seed", type=int, default=1)
    mk.add_argument("--tokens", type=int, default=8192)
    mk.add_argument("--token-bytes", type=int, default=4, choices=[2, 4])
    sub.add_parser("check-gradients")
    tr = sub.add_parser("train")
    tr.add_argument("dir")
    tr.add_argument("data")
    tr.add_argument("--metrics", required=True)
    tr.add_argument("--rows", type=int, required=True)
    tr.add_argument("--seq", type=int, required=True)
    tr.add_argument("--steps", type=int, required=True)
    tr.add_argument("--lr", type=float, default=3e-3)
    tr.add_argument("--lr-min", type=float, default=0.0)
    tr.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine"])
    tr.add_argument("--warmup", type=int, default=0)
    tr.add_argument("--beta1", type=float, default=0.9)
    tr.add_argument("--beta2", type=float, default=0.999)
    tr.add_argument("--eps", type=float, default=1e-8)
    tr.add_argument("--weight-decay", type=float, default=0.0)
    tr.add_argument("--weight-decay-on", default="all", choices=["all", "matrices", "no-bias-norm"])
    tr.add_argument("--grad-clip", type=float, default=1.0)
    tr.add_argument("--rtol", type=float, default=1e-5)
    args = ap.parse_args()
    {"make": cmd_make, "check-gradients": cmd_check_gradients, "train": cmd_train}[args.cmd](args)


if __name__ == "__main__":
    main()
