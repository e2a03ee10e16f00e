"""Every notebook's tests on this machine, their `cuda` cells included (the `slow` ones not), one `nbdev-test` process
per notebook, several at once, each with its own time limit; pass/fail, time and the end of a failure's output go to
JSON after each notebook, so a call stopped early keeps what finished.

    python bench/gpu_notebooks.py                       # on a GPU machine: --flags cuda, 12 at a time
    python bench/gpu_notebooks.py --flags "" --jobs 2 --only 01_embeddings 96_utils   # a dry run on the CPU

Writes bench/results/notebooks-<machine>.json (the GPU's name on a GPU machine).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from annotated_transformer.checkpoint import atomic_write

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug  # noqa: E402

# the notebooks that took longest on the CPU go first, so that the slowest one does not start last
FIRST = ["92_run", "08_sharding", "93_cli", "9h_language_model_runs", "06_training", "08_going_big", "11_language_model",
         "10_classification", "9d_going_big_measured", "9j_wmt14", "9a_attention_kernels", "9b_fast_decoding"]


def notebooks(only: list[str] | None) -> list[Path]:
    "The notebooks nbdev-test would run (not `_*`), the slow ones first; only those named in `only` when given."
    nbs = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if not p.name.startswith(("_", ".")))
    if only: nbs = [p for p in nbs if p.stem in only]
    rank = {s: i for i, s in enumerate(FIRST)}
    return sorted(nbs, key=lambda p: rank.get(p.stem, len(FIRST)))


def run_one(nb: Path, flags: str, timeout: float) -> dict:
    "nbdev-test on one notebook in its own process: rc, seconds, and the output's end where it failed."
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "MPLBACKEND": "Agg"}
    cmd = [shutil.which("nbdev-test") or "nbdev-test", "--do-print", "--file-re", f"^{nb.stem}\\.ipynb$"] \
        + (["--flags", flags] if flags else []) + ["nbs"]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=max(timeout, 1))
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout", ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")) \
            + ((e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or ""))
    r = {"notebook": nb.name, "passed": rc == 0, "rc": rc, "seconds": round(time.perf_counter() - t0, 1)}
    if rc != 0: r["output_tail"] = out[-4000:]
    return r


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flags", default="cuda", help="nbdev-test --flags (default: cuda)")
    p.add_argument("--jobs", type=int, default=12)
    p.add_argument("--timeout", type=float, default=300, help="seconds per notebook")
    p.add_argument("--budget", type=float, default=None, help="seconds for all: no notebook starts after it")
    p.add_argument("--only", nargs="*", default=None, help="notebook stems")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    m = machine(); dev = "cuda" if m["gpu"] else "cpu"
    name = m["gpu"] or m["cpu"]
    out = Path(a.out or ROOT / "bench" / "results" / f"notebooks-{slug(m, dev)}.json")
    nbs, start, lock = notebooks(a.only), time.perf_counter(), threading.Lock()
    doc = dict(machine=m, device=name, torch=torch.__version__, flags=a.flags, jobs=a.jobs, results=[],
               not_run=[])

    def write():
        doc["passed"] = sum(r["passed"] for r in doc["results"])
        doc["failed"] = [r["notebook"] for r in doc["results"] if not r["passed"]]
        doc["wall_seconds"] = round(time.perf_counter() - start, 1)
        atomic_write(out, lambda p: p.write_text(json.dumps(doc, indent=1) + "\n"))

    def task(nb: Path):
        left = None if a.budget is None else a.budget - (time.perf_counter() - start)
        if left is not None and left < 5:
            with lock: doc["not_run"].append(nb.name); write()
            return
        r = run_one(nb, a.flags, a.timeout if left is None else min(a.timeout, left))
        with lock:
            doc["results"].append(r); write()
            print(f"{'ok  ' if r['passed'] else 'FAIL'} {r['seconds']:6.1f} s  {nb.name}"
                  f"  [{len(doc['results'])}/{len(nbs)}, {time.perf_counter() - start:.0f} s]", flush=True)

    out.parent.mkdir(parents=True, exist_ok=True); write()
    with ThreadPoolExecutor(a.jobs) as ex: list(ex.map(task, nbs))
    write()
    print(f"notebooks: {doc['passed']} passed, {len(doc['failed'])} failed, {len(doc['not_run'])} not run, "
          f"in {doc['wall_seconds']:.0f} s ({name}) -> {out}")
    for r in doc["results"]:
        if not r["passed"]: print(f"--- {r['notebook']} (rc {r['rc']})\n{r['output_tail'][-1500:]}")
    return 0 if not doc["failed"] and not doc["not_run"] else 1


if __name__ == "__main__":
    sys.exit(main())
