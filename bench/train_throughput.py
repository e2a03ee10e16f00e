"""Training throughput: this package's model against the same sizes built from `torch.nn.Transformer`.

One training step = forward pass, loss, backward pass, Adam step. Our variants time the library's own step, the
one `run.train` takes: a `Batch` built on the CPU (target tokens counted there, ids checked), moved to the device,
and `training.train_step` with label smoothing 0.1. The `torch` variants build the same sizes from
`torch.nn.Transformer` with the same embeddings (scaled by sqrt(d_model)), sinusoidal positions with dropout, a
linear output with log-softmax, `F.cross_entropy` with label smoothing 0.1 summed and divided by the target tokens,
and the same Adam (fused where torch offers it).
The variants run interleaved (one timing block of each, repeated), and the median per step is reported, with the
machine's load average before and after. Usage:

    python bench/train_throughput.py                          # the CPU configuration (vocab 8000, d_model 256, N 3)
    python bench/train_throughput.py --device cuda            # the base model on a GPU, Multi30k-sized batches:
                                                              # fp32, TF32, bf16, fp16 + GradScaler, each also compiled

A variant's name says what it runs: `ours` or `torch` (the model), the precision (`fp32` = strict fp32 matrix
products, `tf32` = fp32 with TensorFloat-32 matrix products, `bf16`/`fp16` = autocast), then `-ckpt` (activation
checkpointing), `-compile` (`torch.compile` of the model), `-dropout16` (our model opted into `dropout16.use_dropout16`,
a 16-bit random mask; every other variant, ours and torch's, uses `nn.Dropout`). The JSON names each variant's
dropout (`dropout` field), and the printed table says it too.

It prints a table and writes JSON (default `bench/results/train_throughput-<machine>.json`) with the machine named.
Model FLOPs are counted analytically (matrix products and attention, times 3 for forward + backward). Divided by
the step time they give the model's achieved FLOP/s; divided again by the rate of a large `torch.mm` measured on the
same machine they give a share of the *measured* matrix-multiply rate (not MFU, whose denominator is the hardware's
datasheet peak): `share_of_mm_rate` uses the rate in the variant's own dtype (bf16's for bf16/fp16, fp32's or
tf32's otherwise), `share_of_bf16_mm_rate` the bf16 rate for every variant (the fastest the machine multiplies
matrices, so one scale for all variants; files written before the rename call them `mfu` and `mfu_bf16`). The JSON
keeps both rates and every timing block.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug  # noqa: E402  (the same machine description as the other benchmarks)

from annotated_transformer.model import make_model  # noqa: E402
from annotated_transformer.dropout16 import use_dropout16  # noqa: E402
from annotated_transformer.positional import sinusoid_table  # noqa: E402
from annotated_transformer.attention import subsequent_mask  # noqa: E402
from annotated_transformer.training import Batch, FusedLabelSmoothing  # noqa: E402
from annotated_transformer.run import autocast_context, train_step  # noqa: E402  (the runner's step: precision, scaler)

PRESETS = {
    "cpu": dict(vocab=8000, d_model=256, h=8, d_ff=1024, N=3, batch=32, src_len=32, tgt_len=32, dropout=0.1),
    # the paper's base model on Multi30k-sized batches: the 8000-token shared vocabulary, 32-token sentences,
    # 256 x 32 = 8192 target tokens per step (a GPU batch; the CPU presets of chapter 9 take 4096 tokens)
    "base": dict(vocab=8000, d_model=512, h=8, d_ff=2048, N=6, batch=256, src_len=32, tgt_len=32, dropout=0.1),
    # the same model on long sequences and the paper's 32k vocabulary
    "base-long": dict(vocab=32000, d_model=512, h=8, d_ff=2048, N=6, batch=64, src_len=128, tgt_len=128, dropout=0.1),
}
GPU_VARIANTS = ["ours-fp32", "ours-tf32", "ours-bf16", "ours-fp16", "torch-fp32", "torch-tf32", "torch-bf16",
                "ours-bf16-ckpt", "ours-fp32-compile", "ours-tf32-compile", "ours-bf16-compile", "ours-fp16-compile"]
CPU_VARIANTS = ["ours-fp32", "torch-fp32", "ours-bf16", "torch-bf16", "ours-fp32-ckpt", "ours-fp32-dropout16"]


def precision_of(name: str) -> str:
    "The precision a variant's name asks for: fp32, tf32, bf16 or fp16."
    return next((p for p in ("tf32", "bf16", "fp16") if p in name.split("-")), "fp32")


def set_tf32(on: bool) -> None:
    "TensorFloat-32 matrix products (and convolutions) for fp32 tensors on or off; a global switch of torch's."
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


class TorchTransformer(nn.Module):
    "The same sizes from `nn.Transformer`: scaled embeddings, sinusoids + dropout, a linear output + log-softmax."
    def __init__(self, vocab: int, d_model: int, h: int, d_ff: int, N: int, dropout: float, max_len: int = 5000):
        super().__init__()
        self.d_model = d_model
        self.src_embed, self.tgt_embed = nn.Embedding(vocab, d_model), nn.Embedding(vocab, d_model)
        self.register_buffer("pe", sinusoid_table(max_len, d_model), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.transformer = nn.Transformer(d_model, h, N, N, d_ff, dropout, batch_first=True)
        self.proj = nn.Linear(d_model, vocab)

    def embed(self, lut: nn.Embedding, x):
        return self.drop(lut(x) * math.sqrt(self.d_model) + self.pe[: x.size(1)])     # (b, t, d_model)

    def forward(self, src, tgt):
        t = tgt.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(t, device=tgt.device)
        out = self.transformer(self.embed(self.src_embed, src), self.embed(self.tgt_embed, tgt), tgt_mask=causal,
                               tgt_is_causal=True)                                      # (b, t, d_model)
        return F.log_softmax(self.proj(out), dim=-1)                                    # (b, t, vocab)


def model_flops(c: dict) -> float:
    "Matrix-multiply FLOPs of one training step (forward x 3): linear layers, attention scores and mixing, output."
    b, s, t, d, f, n, v = c["batch"], c["src_len"], c["tgt_len"], c["d_model"], c["d_ff"], c["N"], c["vocab"]
    enc = n * (b * s * (4 * d * d + 2 * d * f) * 2 + 2 * 2 * b * s * s * d)            # QKVO + FFN, QK^T and AV
    dec = n * (b * t * (4 * d * d + 2 * d * f) * 2 + 2 * 2 * b * t * t * d               # self-attention + FFN
               + 2 * (b * t * 2 * d * d + b * s * 2 * d * d) + 2 * 2 * b * t * s * d)     # cross: Q,O on t; K,V on s
    out = 2 * b * t * d * v
    return 3.0 * (enc + dec + out)


def matmul_peak(device: str, dtype: torch.dtype, n: int | None = None, reps: int = 5, tf32: bool = False) -> float:
    "FLOP/s of a large square `torch.mm` in `dtype` on random data (the best of `reps`); n = 2048 (CPU), 8192 (GPU)."
    n = n or (8192 if device == "cuda" else 2048)
    if device == "cuda": set_tf32(tf32)
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        sync(device); t0 = time.perf_counter(); torch.mm(a, b); sync(device)
        best = min(best, time.perf_counter() - t0)
    if device == "cuda": set_tf32(False)
    return 2 * n ** 3 / best


def sync(device: str):
    if device == "cuda": torch.cuda.synchronize()


def dropout_of(name: str) -> str:
    "Which dropout a variant runs: the opt-in 16-bit mask for `-dropout16`, torch's nn.Dropout otherwise."
    return "dropout16 (opt-in)" if "dropout16" in name.split("-") else "nn.Dropout"


def make_variant(name: str, c: dict, device: str, fused: bool):
    "A (step function, model) pair; the step runs forward, loss, backward and Adam."
    torch.manual_seed(0)
    ours = not name.startswith("torch")
    if ours:
        model = make_model(c["vocab"], c["vocab"], N=c["N"], d_model=c["d_model"], d_ff=c["d_ff"], h=c["h"],
                           dropout=c["dropout"], checkpoint_activations="ckpt" in name)
        if "dropout16" in name.split("-"): use_dropout16(model)    # the opt-in 16-bit dropout mask (chapter 8)
    else:
        model = TorchTransformer(c["vocab"], c["d_model"], c["h"], c["d_ff"], c["N"], c["dropout"])
    model.to(device).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=fused)
    precision = precision_of(name)
    tf32 = precision == "tf32"
    if tf32: precision = "fp32"                     # fp32 tensors, TF32 matrix products
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None
    g = torch.Generator().manual_seed(1)
    src = torch.randint(1, c["vocab"], (c["batch"], c["src_len"]), generator=g).to(device)
    tgt = torch.randint(1, c["vocab"], (c["batch"], c["tgt_len"] + 1), generator=g).to(device)
    tgt_in, tgt_y = tgt[:, :-1], tgt[:, 1:]
    src_mask = (src != 0).unsqueeze(-2)                                           # (b, 1, s)
    tgt_mask = (tgt_in != 0).unsqueeze(-2) & subsequent_mask(c["tgt_len"], device=device)   # (b, t, t)
    ntokens = tgt_y.numel()

    if ours:   # the library's own step, as `run.train` takes it: a CPU batch counted, checked and moved, then train_step
        for m in model.modules():
            if hasattr(m, "check_ids"): m.check_ids = False          # the loop checks ids on the CPU instead
        crit = FusedLabelSmoothing(c["vocab"], 0, 0.1)
        src_cpu, tgt_cpu = src.cpu(), tgt.cpu()
        train_model = torch.compile(model) if "compile" in name.split("-") else model

        def step():
            if device == "cuda": set_tf32(tf32)
            b = Batch(src_cpu, tgt_cpu, 0).check(c["vocab"], c["vocab"]).to(device)
            train_step(train_model, [b], crit, opt, precision=precision, scaler=scaler)
        return step, model

    def run(src, tgt_in, src_mask, tgt_mask):
        return model(src, tgt_in)
    if "compile" in name.split("-"): run = torch.compile(run)    # model and output layer in one compiled graph

    def step():
        if device == "cuda": set_tf32(tf32)
        with autocast_context(device, precision):
            logp = run(src, tgt_in, src_mask, tgt_mask)
            lp = logp.float().reshape(-1, c["vocab"])                      # smoothed NLL, 0.1 spread uniformly
            nll = lp.gather(1, tgt_y.reshape(-1, 1)).squeeze(1)
            loss = -(0.9 * nll + 0.1 * lp.mean(-1)).sum() / ntokens
        if scaler is not None:
            scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
        else:
            loss.backward(); opt.step()
        opt.zero_grad(set_to_none=True)
    return step, model


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--preset", default=None, choices=list(PRESETS), help="default: cpu on the CPU, base on a GPU")
    p.add_argument("--variants", nargs="+", default=None)
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--steps", type=int, default=None, help="steps per timing block (default 3 on the CPU, 10 on a GPU)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    device = args.device
    args.steps = args.steps or (10 if device == "cuda" else 3)
    c = PRESETS[args.preset or ("base" if device == "cuda" else "cpu")]
    variants = args.variants or (GPU_VARIANTS if device == "cuda" else CPU_VARIANTS)
    fused = True
    try: torch.optim.Adam([nn.Parameter(torch.zeros(1, device=device))], fused=True)
    except (RuntimeError, ValueError): fused = False
    if device == "cuda" and not torch.cuda.is_available(): p.error("--device cuda, but no GPU is available")
    load_before = os.getloadavg()[0]
    peak = {"fp32": matmul_peak(device, torch.float32), "bf16": matmul_peak(device, torch.bfloat16)}
    if device == "cuda": peak["tf32"] = matmul_peak(device, torch.float32, tf32=True)
    runs, mem, warmup_s = {}, {}, {}
    for v in variants:                       # build and warm up one at a time: peak memory is the variant's own
        if device == "cuda": torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
        resident = torch.cuda.memory_allocated() if device == "cuda" else 0   # the variants built before this one
        runs[v] = make_variant(v, c, device, fused)
        t0 = time.perf_counter()
        runs[v][0](); runs[v][0](); sync(device)          # the first steps compile (`-compile`) and allocate
        warmup_s[v] = time.perf_counter() - t0
        if device == "cuda": mem[v] = (torch.cuda.max_memory_allocated() - resident) / 2 ** 20   # this variant's own
        print(f"  {v}: warm-up (2 steps, compile included) {warmup_s[v]:.1f} s" + (f", peak {mem[v]:.0f} MiB" if mem else ""),
              flush=True)
    times = {v: [] for v in variants}
    for _ in range(args.repeats):            # interleaved: every variant sees the same background load
        for v, (step, _) in runs.items():
            sync(device); t0 = time.perf_counter()
            for _ in range(args.steps): step()
            sync(device); times[v].append((time.perf_counter() - t0) / args.steps)
    load_after = os.getloadavg()[0]
    tokens = c["batch"] * (c["src_len"] + c["tgt_len"])
    flops = model_flops(c)
    rows = {}
    for v in variants:
        med = statistics.median(times[v])
        prec = precision_of(v)
        own = peak["bf16" if prec in ("bf16", "fp16") else prec if prec in peak else "fp32"]
        rows[v] = {"step_s": med, "tokens_per_s": tokens / med, "target_tokens_per_s": c["batch"] * c["tgt_len"] / med,
                   "tflops": flops / med / 1e12,
                   "share_of_mm_rate": flops / med / own, "share_of_bf16_mm_rate": flops / med / peak["bf16"],
                   "mfu": flops / med / own, "mfu_bf16": flops / med / peak["bf16"],   # older files' names
                   "step_s_all": times[v], "peak_mem_mib": mem.get(v), "warmup_s": warmup_s[v], "dropout": dropout_of(v)}
    ratios = {}
    if "ours-fp32" in rows:
        base = rows["ours-fp32"]["tokens_per_s"]
        for k, v in [("ours_fp32_over_torch_fp32", "torch-fp32"), ("ours_bf16_over_ours_fp32", "ours-bf16"),
                     ("ours_fp32_dropout16_over_ours_fp32", "ours-fp32-dropout16")]:
            if v in rows: ratios[k] = base / rows[v]["tokens_per_s"] if "over_ours" not in k else rows[v]["tokens_per_s"] / base
        if "ours-fp32-ckpt" in rows: ratios["ckpt_step_time_over_fp32"] = rows["ours-fp32-ckpt"]["step_s"] / rows["ours-fp32"]["step_s"]
        if device == "cuda":                  # every variant's speed-up over strict fp32
            for v in rows:
                if v != "ours-fp32": ratios[f"{v}_over_ours_fp32"] = rows[v]["tokens_per_s"] / base
    if "ours-bf16-ckpt" in rows and "ours-bf16" in rows:
        ratios["bf16_ckpt_step_time_over_bf16"] = rows["ours-bf16-ckpt"]["step_s"] / rows["ours-bf16"]["step_s"]
    m = machine()
    result = {"benchmark": "train_throughput", "device": device, "machine": m, "config": c, "tokens_per_step": tokens,
              "model_flops_per_step": flops, "matmul_peak_flops": peak, "adam_fused": fused,
              "repeats": args.repeats, "steps_per_block": args.steps, "load_before": load_before,
              "load_after": load_after, "variants": rows, "ratios": ratios}
    where = m["gpu"] if device == "cuda" else f"{m['cpu']} ({m['cores']} cores, {m['torch_threads']} threads)"
    print(f"{where}; load {load_before:.2f} -> {load_after:.2f}; matmul peak fp32 {peak['fp32'] / 1e9:.0f} GFLOP/s, "
          f"bf16 {peak['bf16'] / 1e9:.0f} GFLOP/s" + (f", tf32 {peak['tf32'] / 1e9:.0f} GFLOP/s" if "tf32" in peak else "")
          + f"; {flops / 1e9:.1f} GFLOP per step; tokens/s counts source + target tokens")
    print(f"{'variant':24s} {'dropout':>19s} {'step ms':>9s} {'tokens/s':>10s} {'TFLOP/s':>8s} {'of mm':>7s} {'of bf16 mm':>10s}"
          + ("  peak MiB" if mem else ""))
    for v, r in rows.items():
        print(f"{v:24s} {r['dropout']:>19s} {r['step_s'] * 1e3:9.2f} {r['tokens_per_s']:10.0f} {r['tflops']:8.1f} {r['mfu']:7.1%} "
              f"{r['mfu_bf16']:10.1%}" + (f"  {r['peak_mem_mib']:8.0f}" if mem else ""))
    for k, v in ratios.items(): print(f"{k}: {v:.2f}")
    out = Path(args.out or Path(__file__).parent / "results" / f"train_throughput-{slug(m, device)}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
