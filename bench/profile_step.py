"""Where a training step's time goes: `torch.profiler` on the variants of `bench/train_throughput.py`.

    python bench/profile_step.py                      # ours-fp32 and torch-fp32, the CPU configuration
    python bench/profile_step.py --variants ours-fp32 ours-fp32-dropout16 --threads 2   # nn.Dropout vs the opt-in
    python bench/profile_step.py --device cuda --variants ours-tf32 ours-bf16 ours-bf16-compile   # GPU vs wall time

For each variant it runs a few warm-up steps, profiles `--steps` steps, and prints the operators with the most
self time (CPU time spent in the operator itself, not in the operators it calls), as milliseconds per step and
as a share of the step. The JSON (default `bench/results/profile_step-<machine>.json`) keeps the top operators
of every variant and the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import load, machine, slug  # noqa: E402
from train_throughput import PRESETS, dropout_of, make_variant  # noqa: E402


def profile_variant(name: str, c: dict, steps: int, top: int) -> dict:
    "Self CPU time per operator over `steps` training steps of variant `name`, the `top` largest."
    step, _ = make_variant(name, c, "cpu", fused=True)
    for _ in range(3): step()                                     # warm-up: allocator, Adam state, kernels chosen
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps): step()
    wall = (time.perf_counter() - t0) / steps
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) / steps / 1e3   # ms per step, all operators
    rows = [{"op": e.key, "self_ms_per_step": e.self_cpu_time_total / steps / 1e3,
             "share": e.self_cpu_time_total / steps / 1e3 / total, "calls_per_step": e.count / steps}
            for e in events[:top]]
    return {"variant": name, "dropout": dropout_of(name), "profiled_ms_per_step": total, "wall_ms_per_step_under_profiler": wall * 1e3,
            "top": rows}


def profile_gpu(name: str, c: dict, steps: int, top: int) -> dict:
    """On a GPU: wall time per step against the time the GPU spends in kernels, the number of kernels and of operator
    calls per step, and the kernels with the most time. GPU time far below wall time means the step waits on the
    CPU (Python, the dispatcher, kernel launches) rather than on arithmetic."""
    step, _ = make_variant(name, c, "cuda", fused=True)
    for _ in range(3): step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps): step()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) / steps
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps): step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    gpu = [e for e in events if str(e.device_type).endswith("CUDA")]
    cpu_ops = [e for e in events if e.key.startswith("aten::")]
    kern_us = sum(e.self_device_time_total for e in gpu) / steps
    rows = [{"kernel": e.key, "gpu_ms_per_step": e.self_device_time_total / steps / 1e3, "calls_per_step": e.count / steps}
            for e in sorted(gpu, key=lambda e: e.self_device_time_total, reverse=True)[:top]]
    return {"variant": name, "wall_ms_per_step": wall * 1e3, "gpu_kernel_ms_per_step": kern_us / 1e3,
            "kernels_per_step": sum(e.count for e in gpu) / steps,
            "aten_calls_per_step": sum(e.count for e in cpu_ops) / steps, "top_kernels": rows}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", default=["ours-fp32", "torch-fp32"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1: steadier on a shared machine)")
    p.add_argument("--out", help="JSON file (default: bench/results/profile_step-<machine>.json)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--preset", default=None, choices=list(PRESETS), help="default: cpu on the CPU, base on a GPU")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    c = PRESETS[args.preset or ("base" if args.device == "cuda" else "cpu")]
    if args.device == "cuda":
        m = machine()
        res = {"benchmark": "GPU kernel time against wall time, one training step", "config": c, "machine": m,
               "variants": [profile_gpu(v, c, args.steps, args.top) for v in args.variants]}
        for r in res["variants"]:
            print(f"\n{r['variant']}: wall {r['wall_ms_per_step']:.1f} ms/step, GPU kernels {r['gpu_kernel_ms_per_step']:.1f} "
                  f"ms/step ({r['gpu_kernel_ms_per_step'] / r['wall_ms_per_step']:.0%} busy), "
                  f"{r['kernels_per_step']:.0f} kernels and {r['aten_calls_per_step']:.0f} aten calls per step")
            for row in r["top_kernels"][:6]:
                print(f"  {row['kernel'][:70]:<72}{row['gpu_ms_per_step']:>8.2f} ms{row['calls_per_step']:>6.0f}x")
        out = Path(args.out or Path(__file__).parent / "results" / f"profile_step-{slug(m, 'cuda')}.json")
        out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {out}")
        return
    result = {"benchmark": "torch.profiler self CPU time per operator, one training step (forward, loss, backward, "
                           "Adam)", "config": c, "machine": machine(), "load_before": load(), "variants": []}
    for name in args.variants:
        r = profile_variant(name, c, args.steps, args.top)
        result["variants"].append(r)
        print(f"\n{name} ({r['dropout']}): {r['profiled_ms_per_step']:.1f} ms of operator self time per step")
        print(f"{'operator':<44}{'ms/step':>9}{'share':>8}{'calls':>7}")
        for row in r["top"]:
            print(f"{row['op'][:43]:<44}{row['self_ms_per_step']:>9.2f}{row['share']:>8.1%}{row['calls_per_step']:>7.0f}")
    result["load_after"] = load()
    out = Path(args.out or Path(__file__).parent / "results" / f"profile_step-{slug(result['machine'], 'cpu')}.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nload average {result['load_before']} -> {result['load_after']}; wrote {out}")


if __name__ == "__main__":
    main()
