#!/usr/bin/env python3
"""bench/torch_peer: the PyTorch peer a user would run instead of strata, on the same GPU.

GPT-2 from an llm.c model file (magic 20240326, version 3 fp32 or 5 bf16: the file strata's
--save-model writes and --init-from reads), trained on the first batches of an llm.c token file
in llm.c's sequential order (batch k: tokens [k*B*T, k*B*T + B*T + 1)), as strata's train_gpt
with --data-order sequential reads them: forward, backward and an AdamW update a step, the
update on the device. What PyTorch offers is taken where it is there: bf16 autocast on a GPU,
scaled_dot_product_attention (flash attention on Hopper), the fused AdamW, and torch.compile
with --compile. On the CPU (a test at a tiny size) it runs in fp32, so that its loss at step 1
can be compared with strata's on the same file and batch.

Prints a table and one final JSON line (the benches' convention): tokens/s of forward+backward
and of the whole step (medians after --warmup steps), and MFU against the GPU's datasheet dense
peak (llm.c's 6N + 6LCT FLOPs a token, as strata's model/flops.h and gpu/peak_flops.h), or
--peak-flops. Uses only torch and the standard library.
"""
import argparse
import contextlib
import json
import math
import statistics
import struct
import sys
import time

import torch
import torch.nn.functional as F

MODEL_MAGIC = 20240326
TOKENS_MAGIC = {20240520: (1, "H", 2), 20240801: (7, "I", 4)}  # magic: version, format, bytes


def read_model(path):
    """The llm.c model file: its shape and its parameters in llm.c's order, as fp32 tensors."""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] != MODEL_MAGIC or header[1] not in (3, 5):
            sys.exit(f"gpt2_torch: {path}: not an llm.c model file (magic {header[0]}, version "
                     f"{header[1]}; 20240326 with 3 or 5 is read)")
        max_t, vocab, layers, heads, channels, padded = header[2:8]
        data = f.read()
    shapes = parameter_shapes(padded, max_t, layers, channels)
    count = sum(math.prod(s) for s in shapes)
    if header[1] == 3:
        values = torch.frombuffer(bytearray(data[:4 * count]), dtype=torch.float32)
    else:
        raw = torch.frombuffer(bytearray(data[:2 * count]), dtype=torch.int16).to(torch.int32)
        values = (raw << 16).view(torch.float32)  # bf16 bits in the high half
    if values.numel() != count:
        sys.exit(f"gpt2_torch: {path}: {values.numel()} values, the shape needs {count}")
    params, at = [], 0
    for s in shapes:
        n = math.prod(s)
        params.append(values[at:at + n].reshape(s).clone())
        at += n
    shape = dict(max_t=max_t, vocab=vocab, layers=layers, heads=heads, channels=channels,
                 padded=padded)
    return shape, params


def parameter_shapes(vp, max_t, layers, c):
    """llm.c's 16 tensors: wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b,
    fcw, fcb, fcprojw, fcprojb, lnfw, lnfb (weights (out, in), as torch's Linear)."""
    L = layers
    return [(vp, c), (max_t, c), (L, c), (L, c), (L, 3 * c, c), (L, 3 * c), (L, c, c), (L, c),
            (L, c), (L, c), (L, 4 * c, c), (L, 4 * c), (L, c, 4 * c), (L, c), (c,), (c,)]


class Gpt2(torch.nn.Module):
    """llm.c's GPT-2: pre-LayerNorm (eps 1e-5), tanh GELU, tied embedding, logits over the padded
    vocabulary and the loss over the real one."""

    def __init__(self, shape, params):
        super().__init__()
        self.shape = shape
        self.p = torch.nn.ParameterList([torch.nn.Parameter(t) for t in params])

    def forward(self, idx, targets):
        s = self.shape
        (wte, wpe, ln1w, ln1b, qkvw, qkvb, attw, attb, ln2w, ln2b, fcw, fcb, fcpw, fcpb, lnfw,
         lnfb) = self.p
        B, T = idx.shape
        C, NH = s["channels"], s["heads"]
        x = wte[idx] + wpe[:T]
        for l in range(s["layers"]):
            h = F.layer_norm(x, (C,), ln1w[l], ln1b[l], 1e-5)
            q, k, v = F.linear(h, qkvw[l], qkvb[l]).split(C, dim=2)
            q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            if hasattr(F, "scaled_dot_product_attention"):
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # torch < 2.0
                att = (q @ k.transpose(-2, -1)) / math.sqrt(C // NH)
                mask = torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()
                y = att.masked_fill(~mask, float("-inf")).softmax(-1) @ v
            y = y.transpose(1, 2).reshape(B, T, C)
            x = x + F.linear(y, attw[l], attb[l])
            h = F.layer_norm(x, (C,), ln2w[l], ln2b[l], 1e-5)
            h = F.gelu(F.linear(h, fcw[l], fcb[l]), approximate="tanh")
            x = x + F.linear(h, fcpw[l], fcpb[l])
        x = F.layer_norm(x, (C,), lnfw, lnfb, 1e-5)
        logits = F.linear(x, wte)[:, :, :s["vocab"]]
        return F.cross_entropy(logits.float().reshape(B * T, -1), targets.reshape(-1))


def read_tokens(path, need):
    """The first `need` tokens of an llm.c token file (GPT-2's uint16 or llama-3's uint32)."""
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        if header[0] not in TOKENS_MAGIC or TOKENS_MAGIC[header[0]][0] != header[1]:
            sys.exit(f"gpt2_torch: {path}: not an llm.c token file (magic {header[0]})")
        _, fmt, size = TOKENS_MAGIC[header[0]]
        if header[2] < need:
            sys.exit(f"gpt2_torch: {path}: {header[2]} tokens, {need} needed")
        return list(struct.unpack(f"<{need}{fmt}", f.read(need * size)))


def datasheet_peak(name):
    """gpu/peak_flops.h's table: dense bf16/fp16 FLOP/s by device name, 0 when unknown."""
    if "H100" in name and "PCIe" in name:
        return 756e12
    if "H100" in name or "H200" in name:
        return 989e12
    if "A100" in name:
        return 312e12
    return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="llm.c model file (strata's --save-model)")
    ap.add_argument("--data", required=True, help="llm.c token file")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=0, help="T (0: the model's context)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps after the warm-up")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--peak-flops", type=float, default=0.0,
                    help="peak FLOP/s for MFU (0: the GPU's datasheet dense bf16 peak)")
    ap.add_argument("--quick", action="store_true", help="2 timed steps after 1 warm-up")
    ap.add_argument("--losses", action="store_true", help="print every step's loss (%.9g)")
    a = ap.parse_args()
    if a.quick:
        a.steps, a.warmup = 2, 1
    dev = torch.device("cuda" if a.device == "cuda" or
                       (a.device == "auto" and torch.cuda.is_available()) else "cpu")
    gpu = dev.type == "cuda"
    torch.manual_seed(0)
    shape, params = read_model(a.model)
    T = a.seq or shape["max_t"]
    B = a.batch
    steps = a.warmup + a.steps
    tokens = torch.tensor(read_tokens(a.data, steps * B * T + 1), dtype=torch.long)
    model = Gpt2(shape, params).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = True
    forward = torch.compile(model) if a.compile and hasattr(torch, "compile") else model
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0, fused=gpu)
    except (TypeError, RuntimeError):  # torch < 2.0: no fused AdamW
        opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0)
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    fb_s, step_s, losses = [], [], []
    for k in range(steps):
        chunk = tokens[k * B * T:k * B * T + B * T + 1].to(dev)
        x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with (torch.autocast(device_type="cuda", dtype=torch.bfloat16) if gpu
              else contextlib.nullcontext()):
            loss = forward(x, y)
        loss.backward()
        sync()
        t1 = time.perf_counter()
        opt.step()
        sync()
        t2 = time.perf_counter()
        losses.append(loss.item())
        if k >= a.warmup:
            fb_s.append(t1 - t0)
            step_s.append(t2 - t0)
        if a.losses:
            print(f"step {k + 1} loss {losses[-1]:.9g}")
    flops_token = 6.0 * n_params + 6.0 * shape["layers"] * shape["channels"] * T
    name = torch.cuda.get_device_name(dev) if gpu else "cpu"
    peak = a.peak_flops or (datasheet_peak(name) if gpu else 0.0)
    fb, st = statistics.median(fb_s), statistics.median(step_s)
    tps_fb, tps = B * T / fb, B * T / st
    mfu = tps * flops_token / peak if peak > 0 else None
    print(f"device            {name}, torch {torch.__version__}"
          f"{', compiled' if forward is not model else ''}")
    print(f"model             L={shape['layers']} C={shape['channels']} NH={shape['heads']} "
          f"V={shape['vocab']} (Vp={shape['padded']}), {n_params / 1e6:.2f}M params, "
          f"B={B} T={T}, {'bf16 autocast' if gpu else 'fp32'}")
    print(f"fwd+bwd           {fb * 1e3:.2f} ms, {tps_fb:.0f} tok/s (median of {a.steps})")
    print(f"step              {st * 1e3:.2f} ms, {tps:.0f} tok/s (with the AdamW update)")
    print(f"FLOPs/token       {flops_token:.4g} (6N + 6LCT)")
    print("MFU               " + (f"{mfu:.3f} against {peak:.4g} FLOP/s" if mfu is not None
                                  else "n/a (no peak: the CPU, or give --peak-flops)"))
    print(f"loss              step 1 {losses[0]:.6f}, step {steps} {losses[-1]:.6f}")
    print(json.dumps({"bench": "torch_peer", "device": name, "torch": torch.__version__,
                      "compiled": forward is not model, "layers": shape["layers"],
                      "channels": shape["channels"], "heads": shape["heads"],
                      "vocab": shape["vocab"], "params": n_params, "batch": B, "seq": T,
                      "quick": a.quick, "fwd_bwd_ms": fb * 1e3, "step_ms": st * 1e3,
                      "tokens_per_s_fwd_bwd": tps_fb, "tokens_per_s": tps,
                      "flops_per_token": flops_token, "peak_flops_per_s": peak, "mfu": mfu,
                      "loss_step1": losses[0]}))


if __name__ == "__main__":
    main()
