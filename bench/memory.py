"""Peak GPU memory of one training step against sequence length: fused attention, with and without activation
checkpointing, and the explicit formula.

The paper's base model (N 6, d_model 512, 8 heads, d_ff 2048, vocabulary 8000), batch `--batch`, source and target
of the same length t, bf16 autocast, Adam. For each t and variant it runs warm-up steps, then reads
`torch.cuda.max_memory_allocated()` over one step (forward, loss, backward, Adam) and times `--steps` steps.
Weights, gradients and Adam's two moments (fp32) are part of every figure; the JSON also keeps their size alone.

    python bench/memory.py                    # prints a table, writes bench/results/memory-<gpu>.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug  # noqa: E402
from train_throughput import make_variant  # noqa: E402

from annotated_transformer.attention import MultiHeadedAttention  # noqa: E402

VARIANTS = {"fused": "ours-bf16", "fused + checkpointing": "ours-bf16-ckpt", "explicit": "ours-bf16"}


def measure(variant: str, t: int, batch: int, steps: int) -> dict:
    c = dict(vocab=8000, d_model=512, h=8, d_ff=2048, N=6, batch=batch, src_len=t, tgt_len=t, dropout=0.1)
    torch.cuda.empty_cache()
    try:
        step, model = make_variant(VARIANTS[variant], c, "cuda", fused=True)
        if variant == "explicit":
            for m in model.modules():
                if isinstance(m, MultiHeadedAttention): m.keep_weights = True
        step(); step(); torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()                     # weights, gradients (freed), Adam's moments
        step(); torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter(); step(); torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
        r = dict(peak_mib=peak / 2 ** 20, resident_mib=base / 2 ** 20, step_ms=statistics.median(times) * 1e3)
    except torch.OutOfMemoryError:
        r = dict(peak_mib=None, resident_mib=None, step_ms=None, oom=True)
    finally:
        step = model = None
        torch.cuda.empty_cache()
    return r


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lengths", default="128,256,512,1024,2048")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available(): p.error("this benchmark needs a GPU (torch.cuda.is_available() is False)")
    lengths = [int(x) for x in args.lengths.split(",")]
    res = {v: {} for v in VARIANTS}
    for t in lengths:
        for v in VARIANTS:
            r = res[v][t] = measure(v, t, args.batch, args.steps)
            print(f"t={t:5d} {v:22s} " + ("out of memory" if r.get("oom") else
                  f"peak {r['peak_mib']:9.0f} MiB, step {r['step_ms']:8.1f} ms"), flush=True)
    m = machine()
    out = Path(args.out or Path(__file__).parent / "results" / f"memory-{slug(m, 'cuda')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "memory", "machine": m, "batch": args.batch, "precision": "bf16",
                               "model": dict(vocab=8000, d_model=512, h=8, d_ff=2048, N=6), "results": res}, indent=1))
    print(f"\n{'t':>5s} " + " ".join(f"{v + ' MiB':>26s}" for v in VARIANTS))
    for t in lengths:
        print(f"{t:5d} " + " ".join(f"{'OOM' if res[v][t].get('oom') else format(res[v][t]['peak_mib'], '.0f'):>26s}"
                                    for v in VARIANTS))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
