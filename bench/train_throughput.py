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
    python bench/train_throughput.py --device cuda --preset base-fill --variants ours-bf16 ours-bf16-compile \
        --repeats 3 --steps 10 --profile-steps 3 --budget 120 # the base model on the paper's ~25k-token batches, with
                                                              # each variant's kernels per step and top kernels profiled

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

After the timing (and after the JSON is first written) with `--profile-steps N`, each variant runs N more steps under
`torch.profiler` (CPU and, on a GPU, CUDA activity): the CUDA kernels launched per step (memory copies and sets
counted apart), the GPU's busy time per step (the sum of its kernels' times) against the step's wall time, the aten
calls per step, and the `--top-kernels` kernels with the most time; the JSON is then written again with these in each
variant's `profile`. A profiler failure is recorded there and loses nothing else. `--budget SECONDS` stops the timing
rounds (after the first) and skips the profiling when they would run past it; the JSON is rewritten after every round,
so a run killed from outside still leaves the rounds it finished. A preset other than the device's default writes
`train_throughput-<preset>-<machine>.json`.
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
    # a batch that fills a GPU: the paper's base model on its ~25k source + ~25k target tokens per batch (192 x 128 =
    # 24,576 each) and WMT14 En-De's 37k shared BPE vocabulary; 9.6 model TFLOP per step. With bf16 autocast a step
    # holds ~95 MB of activations per sentence (measured on the CPU, batches of 2 and 4), ~18 GB for 192, plus ~1.5 GB
    # of weights, gradients and Adam state: well inside an 80 GB GPU
    "base-fill": dict(vocab=37000, d_model=512, h=8, d_ff=2048, N=6, batch=192, src_len=128, tgt_len=128, dropout=0.1),
    # a toy size for dry runs of the script's code paths on a CPU (seconds a step, compile included)
    "tiny": dict(vocab=500, d_model=64, h=4, d_ff=128, N=2, batch=4, src_len=16, tgt_len=16, dropout=0.1),
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


def _device_us(e) -> float:
    "An averaged profiler event's own device time in microseconds, under the attribute names of old and new torch."
    for a in ("self_device_time_total", "self_cuda_time_total", "device_time_total", "cuda_time_total"):
        try:
            v = getattr(e, a, None)
        except Exception:                    # a deprecated attribute that raises instead of warning
            v = None
        if v: return float(v)
    return 0.0


def profile_kernels(step, device: str, steps: int, top: int = 5) -> dict:
    """`steps` more training steps under `torch.profiler`: the CUDA kernels launched per step (memory copies and sets
    counted apart), the GPU's busy time per step (the sum of the kernels' own times: one stream, no overlap), the aten
    calls per step, the wall time per step under the profiler, and the `top` kernels with the most time."""
    from torch.profiler import ProfilerActivity, profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    sync(device)
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(steps): step()
        sync(device)
        wall = (time.perf_counter() - t0) / steps
    events = list(prof.key_averages())
    gpu = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")]
    copies = [e for e in gpu if e.key.startswith(("Memcpy", "Memset"))]
    kernels = [e for e in gpu if not e.key.startswith(("Memcpy", "Memset"))]
    kernel_ms = sum(_device_us(e) for e in kernels) / steps / 1e3
    busy_ms = kernel_ms + sum(_device_us(e) for e in copies) / steps / 1e3
    rows = [{"kernel": e.key, "ms_per_step": _device_us(e) / steps / 1e3, "calls_per_step": e.count / steps}
            for e in sorted(kernels, key=_device_us, reverse=True)[:top]]
    return {"steps": steps, "activities": [str(a) for a in acts], "kernels_per_step": sum(e.count for e in kernels) / steps,
            "memcpy_memset_per_step": sum(e.count for e in copies) / steps,
            "aten_calls_per_step": sum(e.count for e in events if e.key.startswith("aten::")) / steps,
            "kernel_ms_per_step": kernel_ms, "gpu_busy_ms_per_step": busy_ms,
            "wall_ms_per_step_under_profiler": wall * 1e3, "gpu_busy_share_under_profiler": busy_ms / (wall * 1e3),
            "top_kernels": rows}


def main(argv=None):
    t_start = time.perf_counter()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--preset", default=None, choices=list(PRESETS), help="default: cpu on the CPU, base on a GPU")
    p.add_argument("--variants", nargs="+", default=None)
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds (default 5)")
    p.add_argument("--steps", type=int, default=None, help="steps per timing block (default 3 on the CPU, 10 on a GPU)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per variant before timing (compile included; "
                   "a compiled variant takes at least 3)")
    p.add_argument("--profile-steps", type=int, default=0, help="steps profiled per variant after the timing "
                   "(default 0: no profiling)")
    p.add_argument("--top-kernels", type=int, default=5, help="kernels with the most time kept per variant")
    p.add_argument("--budget", type=float, default=None, help="seconds: no further timing round or profiling that "
                   "would end past this (at least one round always runs)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    device = args.device
    if device == "cuda" and not torch.cuda.is_available(): p.error("--device cuda, but no GPU is available")
    args.steps = args.steps or (10 if device == "cuda" else 3)
    if min(args.steps, args.repeats) < 1 or args.warmup < 1: p.error("--steps, --repeats and --warmup must be positive")
    default_preset = "base" if device == "cuda" else "cpu"
    preset = args.preset or default_preset
    c = PRESETS[preset]
    variants = args.variants or (GPU_VARIANTS if device == "cuda" else CPU_VARIANTS)
    elapsed = lambda: time.perf_counter() - t_start
    m = machine()
    tag = "" if preset == default_preset else f"{preset}-"
    out = Path(args.out or Path(__file__).parent / "results" / f"train_throughput-{tag}{slug(m, device)}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    fused = True
    try: torch.optim.Adam([nn.Parameter(torch.zeros(1, device=device))], fused=True)
    except (RuntimeError, ValueError): fused = False
    load_before = os.getloadavg()[0]
    peak = {"fp32": matmul_peak(device, torch.float32), "bf16": matmul_peak(device, torch.bfloat16)}
    if device == "cuda": peak["tf32"] = matmul_peak(device, torch.float32, tf32=True)
    runs, mem, mem_total, warmup_s, errors, skipped = {}, {}, {}, {}, {}, []
    for v in variants:                       # build and warm up one at a time: peak memory is the variant's own
        if args.budget is not None and runs and elapsed() > args.budget:
            skipped.append(v); print(f"  {v}: skipped, {elapsed():.0f} s of the {args.budget:.0f} s budget gone", flush=True)
            continue
        try:
            if device == "cuda": torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
            resident = torch.cuda.memory_allocated() if device == "cuda" else 0   # the variants built before this one
            runs[v] = make_variant(v, c, device, fused)
            n_warm = max(args.warmup, 3 if "compile" in v.split("-") else 1)
            t0 = time.perf_counter()
            for _ in range(n_warm): runs[v][0]()                # the first steps compile (`-compile`) and allocate
            sync(device)
            warmup_s[v] = time.perf_counter() - t0
        except Exception as e:               # a variant that cannot run (compile failing, out of memory) is recorded
            runs.pop(v, None); errors[v] = f"{type(e).__name__}: {str(e)[:500]}"
            print(f"  {v}: FAILED in warm-up: {errors[v]}", flush=True)
            if device == "cuda": torch.cuda.empty_cache()
            continue
        if device == "cuda":
            mem[v] = (torch.cuda.max_memory_allocated() - resident) / 2 ** 20   # this variant's own
            mem_total[v] = torch.cuda.max_memory_allocated() / 2 ** 20          # everything allocated, at the peak
        print(f"  {v}: warm-up ({n_warm} steps, compile included) {warmup_s[v]:.1f} s"
              + (f", peak {mem[v]:.0f} MiB (all allocated: {mem_total[v]:.0f} MiB)" if v in mem else "")
              + f" [{elapsed():.0f} s]", flush=True)
    tokens = c["batch"] * (c["src_len"] + c["tgt_len"])
    flops = model_flops(c)
    times = {v: [] for v in runs}
    rows, ratios, profiles = {}, {}, {}
    result = {}

    def summarise(stage: str) -> dict:
        "The rows, ratios and whole result from the timing blocks so far (every variant with at least one block)."
        rows.clear(); ratios.clear()
        for v in runs:
            if not times[v]: continue
            med = statistics.median(times[v])
            prec = precision_of(v)
            own = peak["bf16" if prec in ("bf16", "fp16") else prec if prec in peak else "fp32"]
            rows[v] = {"step_s": med, "tokens_per_s": tokens / med, "target_tokens_per_s": c["batch"] * c["tgt_len"] / med,
                       "tflops": flops / med / 1e12,
                       "share_of_mm_rate": flops / med / own, "share_of_bf16_mm_rate": flops / med / peak["bf16"],
                       "mfu": flops / med / own, "mfu_bf16": flops / med / peak["bf16"],   # older files' names
                       "step_s_all": times[v], "peak_mem_mib": mem.get(v), "peak_mem_all_mib": mem_total.get(v),
                       "warmup_s": warmup_s[v], "dropout": dropout_of(v)}
            if v in profiles: rows[v]["profile"] = profiles[v]
        if "ours-fp32" in rows:
            base = rows["ours-fp32"]["tokens_per_s"]
            for k, v in [("ours_fp32_over_torch_fp32", "torch-fp32"), ("ours_bf16_over_ours_fp32", "ours-bf16"),
                         ("ours_fp32_dropout16_over_ours_fp32", "ours-fp32-dropout16")]:
                if v in rows: ratios[k] = base / rows[v]["tokens_per_s"] if "over_ours" not in k else rows[v]["tokens_per_s"] / base
            if "ours-fp32-ckpt" in rows: ratios["ckpt_step_time_over_fp32"] = rows["ours-fp32-ckpt"]["step_s"] / rows["ours-fp32"]["step_s"]
            if device == "cuda":              # every variant's speed-up over strict fp32
                for v in rows:
                    if v != "ours-fp32": ratios[f"{v}_over_ours_fp32"] = rows[v]["tokens_per_s"] / base
        if "ours-bf16-ckpt" in rows and "ours-bf16" in rows:
            ratios["bf16_ckpt_step_time_over_bf16"] = rows["ours-bf16-ckpt"]["step_s"] / rows["ours-bf16"]["step_s"]
        if "ours-bf16-compile" in rows and "ours-bf16" in rows:
            ratios["ours_bf16_compile_over_ours_bf16"] = rows["ours-bf16-compile"]["tokens_per_s"] / rows["ours-bf16"]["tokens_per_s"]
        result.update({"benchmark": "train_throughput", "device": device, "machine": m, "preset": preset, "config": c,
                       "tokens_per_step": tokens, "model_flops_per_step": flops, "matmul_peak_flops": peak,
                       "adam_fused": fused, "repeats": args.repeats, "rounds_done": min(map(len, times.values()), default=0),
                       "steps_per_block": args.steps, "budget_s": args.budget, "load_before": load_before,
                       "load_after": os.getloadavg()[0], "variants": rows, "ratios": ratios, "errors": errors,
                       "skipped": skipped, "stage": stage, "elapsed_s": round(elapsed(), 1)})
        out.write_text(json.dumps(result, indent=1))
        return result

    summarise("warmed up, not yet timed")
    for i in range(args.repeats):            # interleaved: every variant sees the same background load
        t_round = time.perf_counter()
        for v, (step, _) in list(runs.items()):
            try:
                sync(device); t0 = time.perf_counter()
                for _ in range(args.steps): step()
                sync(device); times[v].append((time.perf_counter() - t0) / args.steps)
            except Exception as e:
                errors[v] = f"{type(e).__name__} in timing: {str(e)[:500]}"; print(f"  {v}: FAILED: {errors[v]}", flush=True)
                del runs[v]; times.pop(v, None)
        summarise(f"timed {i + 1} of {args.repeats} rounds")
        round_s = time.perf_counter() - t_round
        if args.budget is not None and i + 1 < args.repeats and elapsed() + round_s > args.budget:
            print(f"  budget: stopping after {i + 1} of {args.repeats} rounds ({elapsed():.0f} s gone)", flush=True)
            break
    summarise("timed")
    load_after = result["load_after"]
    where = m["gpu"] if device == "cuda" else f"{m['cpu']} ({m['cores']} cores, {m['torch_threads']} threads)"
    print(f"{where}; preset {preset}; load {load_before:.2f} -> {load_after:.2f}; matmul peak fp32 {peak['fp32'] / 1e9:.0f} GFLOP/s, "
          f"bf16 {peak['bf16'] / 1e9:.0f} GFLOP/s" + (f", tf32 {peak['tf32'] / 1e9:.0f} GFLOP/s" if "tf32" in peak else "")
          + f"; {flops / 1e9:.1f} GFLOP per step; tokens/s counts source + target tokens ({tokens} per step); "
          f"{result['rounds_done']} rounds of {args.steps} steps")
    print(f"{'variant':24s} {'dropout':>19s} {'step ms':>9s} {'tokens/s':>10s} {'TFLOP/s':>8s} {'of mm':>7s} {'of bf16 mm':>10s}"
          + ("  peak MiB" if mem else ""))
    for v, r in rows.items():
        print(f"{v:24s} {r['dropout']:>19s} {r['step_s'] * 1e3:9.2f} {r['tokens_per_s']:10.0f} {r['tflops']:8.1f} {r['mfu']:7.1%} "
              f"{r['mfu_bf16']:10.1%}" + (f"  {r['peak_mem_mib'] or 0:8.0f}" if mem else ""))
    for k, v in ratios.items(): print(f"{k}: {v:.2f}")
    for v, e in errors.items(): print(f"{v}: FAILED: {e}")
    print(f"wrote {out} [{elapsed():.0f} s]", flush=True)

    if args.profile_steps > 0:               # where the step's time goes; the timings above are already on disk
        for v, (step, _) in list(runs.items()):
            if v not in rows: continue
            est = 3 * args.profile_steps * rows[v]["step_s"] + 5
            if args.budget is not None and elapsed() + est > args.budget:
                profiles[v] = {"skipped": f"budget: {elapsed():.0f} s gone, ~{est:.0f} s more needed"}
                print(f"  {v}: profile skipped ({profiles[v]['skipped']})", flush=True)
                continue
            try:
                pr = profile_kernels(step, device, args.profile_steps, args.top_kernels)
                pr["gpu_busy_share_of_timed_step"] = pr["gpu_busy_ms_per_step"] / (rows[v]["step_s"] * 1e3)
                profiles[v] = pr
            except Exception as e:
                profiles[v] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
                print(f"  {v}: profiler FAILED: {profiles[v]['error']}", flush=True)
            summarise("profiling")
        summarise("timed and profiled")
        print(f"\n{'variant':24s} {'kernels/step':>12s} {'copies/step':>11s} {'aten/step':>9s} {'GPU busy ms':>11s} "
              f"{'timed ms':>9s} {'busy share':>10s}")
        for v, r in rows.items():
            pr = r.get("profile") or {}
            if "kernels_per_step" not in pr:
                print(f"{v:24s} {pr.get('error') or pr.get('skipped') or 'not profiled'}"); continue
            print(f"{v:24s} {pr['kernels_per_step']:12.0f} {pr['memcpy_memset_per_step']:11.0f} {pr['aten_calls_per_step']:9.0f} "
                  f"{pr['gpu_busy_ms_per_step']:11.2f} {r['step_s'] * 1e3:9.2f} {pr['gpu_busy_share_of_timed_step']:10.1%}")
            for k in pr["top_kernels"]:
                print(f"    {k['kernel'][:80]:<82}{k['ms_per_step']:8.2f} ms/step {k['calls_per_step']:6.0f}x")
        print(f"wrote {out} [{elapsed():.0f} s]", flush=True)
    return result


if __name__ == "__main__":
    main()
