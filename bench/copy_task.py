"""Time to 100% exact match on the copy task: the median over seeds of `annotated-transformer train --task copy`.

Each run goes through the command line's own code path (its parser, `config_from_args`, `train`) in this process;
the time counts everything `train` does (model building, training, evaluations, checkpoint writing) but not starting
Python and importing torch, which is measured once separately. Usage:

    python bench/copy_task.py                      # seeds 0 1 2 on the CPU
    python bench/copy_task.py --seeds 0 1 2 3 4 --device cuda

It prints a table and writes JSON (default `bench/results/copy_task-<machine>.json`) with the machine described.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the command line first: it sets OMP_WAIT_POLICY before torch loads OpenMP, as it does for the real command
from annotated_transformer.cli import build_parser, config_from_args
from annotated_transformer.run import train

import torch


def machine() -> dict:
    "The CPU model (from /proc/cpuinfo where there is one), core count, torch threads and versions, and any GPU."
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def slug(m: dict, device: str) -> str:
    "A file-name-friendly machine name, e.g. `intel-r-xeon-r-processor-2-50ghz-2cores`."
    name = m["gpu"] if device == "cuda" and m["gpu"] else f"{m['cpu']}-{m['cores']}cores"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def load() -> float | None:
    "The 1-minute load average (other processes sharing the cores make timings pessimistic)."
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def import_seconds() -> float:
    "Seconds for a fresh Python to import the command line (torch included): what a user waits before training."
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import annotated_transformer.cli"], check=True)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    p.add_argument("--threads", type=int, help="passed to train --threads (default: torch's choice)")
    p.add_argument("--out", help="JSON file (default: bench/results/copy_task-<machine>.json)")
    args = p.parse_args(argv)

    m = machine()
    runs = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as d:
            cli_args = ["train", "--task", "copy", "--seed", str(seed), "--out", d, "--device", args.device,
                        "--no-progress"] + ([] if args.threads is None else ["--threads", str(args.threads)])
            cfg = config_from_args(build_parser().parse_args(cli_args))
            before = load()
            t0 = time.perf_counter()
            r = train(cfg)
            seconds = time.perf_counter() - t0
            runs.append({"seed": seed, "reached": r["reached"], "steps": r["steps"], "seconds": round(seconds, 2),
                         "exact_match": r["metrics"]["exact_match"], "load_before": before, "load_after": load(),
                         "argv": [a for a in cli_args if a not in ("--out", d)]})
            print(f"seed {seed}: {r['metrics']['exact_match']:.1%} after {r['steps']} steps, {seconds:.1f} s", flush=True)
    reached = [r["seconds"] for r in runs if r["reached"]]
    result = {
        "benchmark": "copy task: seconds until 100% exact match on 1,000 fresh sequences (confirmed on a second 1,000)",
        "machine": m, "device": args.device, "threads_used": torch.get_num_threads(), "runs": runs,
        "median_seconds": round(statistics.median(reached), 2) if len(reached) == len(runs) else None,
        "median_steps": statistics.median(r["steps"] for r in runs),
        "all_reached": len(reached) == len(runs),
        "import_seconds": round(import_seconds(), 2),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }
    print(f"\ncopy task, {m['cpu']} ({m['cores']} cores, torch {m['torch']}, {torch.get_num_threads()} threads), "
          f"device {args.device}\n")
    print("| seed | steps | seconds | exact match | load avg before/after |")
    print("|---:|---:|---:|---:|---|")
    for r in runs:
        print(f"| {r['seed']} | {r['steps']} | {r['seconds']:.1f} | {r['exact_match']:.1%} | "
              f"{r['load_before']} / {r['load_after']} |")
    median = "n/a (not every seed reached 100%)" if result["median_seconds"] is None else f"{result['median_seconds']:.1f} s"
    print(f"\nmedian time to 100%: {median}; starting Python and importing: {result['import_seconds']:.1f} s")
    suffix = "" if args.threads is None else f"-threads{args.threads}"
    if m["omp_wait_policy"] != "PASSIVE": suffix += f"-omp-{(m['omp_wait_policy'] or 'default').lower()}"
    out = Path(args.out or Path(__file__).parent / "results" / f"copy_task-{slug(m, args.device)}{suffix}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
