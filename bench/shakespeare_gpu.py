"""Chapter 11's character model on a GPU, against nanoGPT's tiny-shakespeare figure (validation loss 1.4697 after
about 3 minutes on one A100, its README): the command line's own `train` with the `gpu` preset (nanoGPT's sizes),
bf16 autocast and `torch.compile`, stopped at `--target`; then the curve (validation loss against training wall time)
and the time to each 0.05 nats, read from the run's metrics.jsonl.

    python bench/shakespeare_gpu.py --data-dir DIR --max-steps 8000 --max-seconds 240   # on a GPU: stop at 1.47
    python bench/shakespeare_gpu.py --data-dir DIR --device cpu --preset tiny   # a dry run on the CPU (< 1 minute)

DIR holds tiny-shakespeare's input.txt. Writes bench/results/shakespeare_gpu-<machine>.json.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from annotated_transformer.checkpoint import atomic_write

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug  # noqa: E402

NANOGPT = {"val_loss": 1.4697, "minutes": 3, "gpu": "one A100",
           "source": "github.com/karpathy/nanoGPT README, 'quick start' (baby GPT on shakespeare_char)"}


def summarise(run: Path, target: float) -> dict:
    "The validation curve of a run folder, the compile time, and the first time the loss reached each 0.05 nats."
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [{"step": r["step"], "loss": r["loss"], "elapsed_s": r["elapsed_s"]} for r in rows if "eval" in r]
    train = [{"step": r["step"], "loss": r["loss"], "elapsed_s": r["elapsed_s"], "tokens_per_s": r["tokens_per_s"]}
             for r in rows if "eval" not in r]
    levels = [round(x * 0.05, 2) for x in range(math.ceil(target / 0.05), 60)]       # target .. 2.95
    first = {}
    for lv in levels:
        hit = next((e for e in evals if e["loss"] <= lv + 1e-12), None)
        first[f"{lv:.2f}"] = None if hit is None else {"step": hit["step"], "elapsed_s": hit["elapsed_s"]}
    best = min(evals, key=lambda e: e["loss"]) if evals else None
    reached = next((e for e in evals if e["loss"] <= target), None)
    return dict(evals=evals, train=train, first_at_or_below=first, best=best, target=target,
                reached=reached is not None, reached_at=reached)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="gpu")
    p.add_argument("--target", type=float, default=1.47)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None, help="default: the preset's (a dry run on a small machine: 8)")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop the run (SIGTERM: it saves and exits) after this many seconds of the process")
    p.add_argument("--precision", default=None, help="default: bf16 on a GPU, fp32 on the CPU")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--run", default="/tmp/shakespeare-gpu", help="the run folder (replaced)")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    m = machine()
    out = Path(a.out or ROOT / "bench" / "results" / f"shakespeare_gpu-{slug(m, a.device)}.json")
    precision = a.precision or ("bf16" if a.device == "cuda" else "fp32")
    cmd = [sys.executable, "-m", "annotated_transformer", "train", "--task", "shakespeare", "--preset", a.preset,
           "--data-dir", a.data_dir, "--device", a.device, "--precision", precision, "--clip-norm", "1.0",
           "--target", str(a.target), "--out", a.run, "--overwrite", "--no-progress"] \
        + ([] if a.no_compile else ["--compile"]) + ([] if a.max_steps is None else ["--max-steps", str(a.max_steps)]) \
        + ([] if a.batch_size is None else ["--batch-size", str(a.batch_size)])
    print(" ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stderr=subprocess.PIPE,
                            text=True)
    log: list[str] = []
    def echo():                                            # the run's lines, printed and kept
        for line in proc.stderr: print(line, end="", file=sys.stderr, flush=True); log.append(line)
    reader = threading.Thread(target=echo, daemon=True); reader.start()
    stopped = False
    try: proc.wait(timeout=a.max_seconds)
    except subprocess.TimeoutExpired:                      # out of time: the run saves its step and exits 143
        stopped = True; proc.send_signal(signal.SIGTERM)
        try: proc.wait(timeout=60)
        except subprocess.TimeoutExpired: proc.kill(); proc.wait()
    wall = time.perf_counter() - t0
    reader.join(timeout=5)
    first = next((l for l in log if l.startswith("torch.compile: first step")), None)
    doc = dict(machine=m, command=" ".join(cmd[1:]), rc=proc.returncode, process_wall_s=round(wall, 1),
               stopped_at_max_seconds=stopped, max_seconds=a.max_seconds, log_tail=log[-30:],
               compile_first_step_s=float(first.split()[-2]) if first else None,
               precision=precision, compile=not a.no_compile, nanogpt=NANOGPT, torch=torch.__version__)
    try:
        doc.update(summarise(Path(a.run), a.target))
        doc["train_config"] = json.loads((Path(a.run) / "train_config.json").read_text())
    except (OSError, ValueError, KeyError) as e:
        doc["error"] = f"{type(e).__name__}: {e}"
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, lambda p: p.write_text(json.dumps(doc, indent=1) + "\n"))
    b = doc.get("best")
    print(f"rc {proc.returncode}, {wall:.0f} s in all; best validation loss "
          + (f"{b['loss']:.4f} at step {b['step']} ({b['elapsed_s']:.0f} s of training)" if b else "none")
          + (f"; {a.target} reached at step {doc['reached_at']['step']}, {doc['reached_at']['elapsed_s']:.0f} s"
             if doc.get("reached") else f"; {a.target} not reached") + f" -> {out}", flush=True)
    for lv, hit in doc.get("first_at_or_below", {}).items():
        if hit: print(f"  <= {lv}: step {hit['step']:>5}, {hit['elapsed_s']:6.1f} s")
    return 0 if stopped else proc.returncode


if __name__ == "__main__":
    sys.exit(main())
