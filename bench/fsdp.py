"""One process, DDP x 2 and FSDP x 2 at the same global batch: steps/s and, per process, the peak resident memory
while training and the bytes of parameters + gradients + Adam state. Runs interleaved (single, ddp, fsdp, single, ...)
so that a change in the machine's load hits every variant alike; CPU, gloo, `demo_train` of chapter 8's part 2.

    python bench/fsdp.py [--rounds 2] [--steps 6]   # prints a table, writes bench/results/fsdp-<machine>.json
    python bench/fsdp.py --layers 6 --vocab 1000    # more layers, smaller embeddings: ...-N6-vocab1000.json
    python bench/fsdp.py --sweep [--rounds 3]        # where the state dominates: ...-sweep.json

`--sweep`: a wide model and a tiny batch, so that the parameters, gradients and Adam state dominate the memory; FSDP
at P = 1, 2, 4 and DDP at P = 2, 4 processes, and a baseline at each P: processes that import torch, join the gloo group
and all-reduce one tensor, without a model. Per rank: the bytes of state, the resident memory when training starts and
its peak while training (VmHWM), the baseline's peak.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import load, machine, slug  # noqa: E402
from torch.nn.modules.module import register_module_forward_pre_hook  # noqa: E402
from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: E402

from annotated_transformer.checkpoint import atomic_write  # noqa: E402

MODEL = dict(vocab=8000, N=2, d_model=512, d_ff=2048, h=8, seq_len=32)   # big enough that the state matters
PROCS = {"single": 1, "ddp": 2, "fsdp": 2}
SWEEP_MODEL = dict(vocab=8000, N=1, d_model=1024, d_ff=4096, h=16, seq_len=8)   # ~54 M parameters: state dominates
SWEEP_BATCH, SWEEP_STEPS = 4, 3                                                 # 4 sequences of 8 tokens, global
SWEEP = [("baseline", 1), ("fsdp", 1), ("baseline", 2), ("fsdp", 2), ("ddp", 2), ("baseline", 4), ("fsdp", 4),
         ("ddp", 4)]


def _peak_rss_mib(reset: bool = False) -> float | None:
    "This process's peak resident memory in MiB since the last `reset` (Linux: VmHWM; elsewhere None)."
    try:
        if reset: Path("/proc/self/clear_refs").write_text("5")   # restart the peak count from the current size
        return next(int(l.split()[1]) / 1024 for l in Path("/proc/self/status").read_text().splitlines()
                    if l.startswith("VmHWM"))
    except (OSError, StopIteration): return None


class Meter:
    """Steps/s after the first optimizer step (allocations), the resident memory when the first forward pass starts (the
    model built) and its peak up to the last optimizer step: read through global hooks, so `demo_train` knows nothing of it."""
    def __init__(self):
        self.rss0 = self.start = self.end = self.peak = None
        self.steps = 0
        self.hooks = [register_module_forward_pre_hook(self._first_forward), register_optimizer_step_post_hook(self._step)]

    def _first_forward(self, module, args) -> None:
        self.rss0 = _peak_rss_mib(reset=True)                    # the training's peak, not the model's construction
        self.hooks.pop(0).remove()

    def _step(self, optimizer, args, kwargs) -> None:
        if self.start is None: self.start = time.perf_counter()
        else: self.steps += 1
        self.end, self.peak = time.perf_counter(), _peak_rss_mib()

    def record(self) -> dict:
        for h in self.hooks: h.remove()
        return {"steps_per_s": self.steps / (self.end - self.start), "rss_at_start_mib": self.rss0, "peak_rss_mib": self.peak}


def measured(out: str, mode: str, steps: int, batch: int, **model) -> None:
    "`demo_train` under a `Meter`, whose record is added to this rank's `rank<r>.json`."
    from annotated_transformer import sharding
    sharding.DEMO.update(model)                                  # the benchmark's model and sequence length
    meter = Meter()
    rec = {**sharding.demo_train(out, mode, steps, batch), **meter.record()}
    atomic_write(Path(out) / f"rank{rec['rank']}.json", lambda p: p.write_text(json.dumps(rec) + "\n"))


def worker(out: str, mode: str, steps: int, batch: int, layers: int, vocab: int) -> None:
    measured(out, mode, steps, batch, **{**MODEL, "N": layers, "vocab": vocab})


def sweep_worker(out: str, mode: str) -> None:
    "One rank of the sweep: `demo_train` on the wide model, or (`baseline`) the process and gloo group without a model."
    from annotated_transformer import sharding as S
    if mode != "baseline":
        measured(out, mode, SWEEP_STEPS, SWEEP_BATCH, **SWEEP_MODEL)
        return
    import torch, torch.distributed as dist
    rank, world = S.join_process_group("gloo")
    t = torch.ones(1024); dist.all_reduce(t); dist.barrier()
    rec = {"mode": mode, "world": world, "rank": rank, "peak_rss_mib": _peak_rss_mib()}
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(rec) + "\n")
    dist.destroy_process_group()


def run(mode: str, steps: int, batch: int, layers: int, vocab: int, tmp: Path, procs: int | None = None,
        sweep: bool = False) -> list[dict]:
    out, procs = tmp / f"{mode}-{len(list(tmp.iterdir()))}", procs or PROCS[mode]
    args = ([__file__, "sweep-worker", str(out), mode] if sweep else
            [__file__, "worker", str(out), mode, str(steps), str(batch), str(layers), str(vocab)])
    cmd = ([sys.executable, *args] if procs == 1 and not sweep else
           [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(procs), *args])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0: raise SystemExit(f"{mode} failed:\n{r.stderr[-3000:]}")
    recs = [json.loads((out / f"rank{i}.json").read_text()) for i in range(procs)]
    shutil.rmtree(out, ignore_errors=True)            # the gathered weights rank 0 wrote: hundreds of MiB
    return recs


def sweep(rounds: int) -> None:
    "FSDP, DDP and the baseline at P = 1, 2, 4, interleaved, `rounds` times; writes ...-sweep.json."
    tmp = Path(tempfile.mkdtemp(prefix="fsdp-sweep-"))
    runs, load_before = {f"{m}-{p}": [] for m, p in SWEEP}, load()
    for r in range(rounds):
        for mode, procs in SWEEP:
            runs[f"{mode}-{procs}"].append(run(mode, 0, 0, 0, 0, tmp, procs, sweep=True))
            print(f"round {r}: {mode} x {procs}: peak " + ", ".join(f"{x['peak_rss_mib']:.0f}" for x in runs[f"{mode}-{procs}"][-1])
                  + " MiB", flush=True)
    m = machine()
    res = {"benchmark": "fsdp-sweep", "machine": m, "load_before": load_before, "load_after": load(),
           "model": SWEEP_MODEL, "global_batch": SWEEP_BATCH, "steps": SWEEP_STEPS, "rounds": rounds, "runs": runs}
    out = Path(__file__).parent / "results" / f"fsdp-{slug(m, 'cpu')}-sweep.json"
    atomic_write(out, lambda t: t.write_text(json.dumps(res, indent=1) + "\n"))
    print(f"wrote {out}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2); p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=16, help="global batch, sequences (each of 2 processes: half)")
    p.add_argument("--layers", type=int, default=MODEL["N"]); p.add_argument("--vocab", type=int, default=MODEL["vocab"])
    p.add_argument("--sweep", action="store_true", help="FSDP/DDP/baseline at P = 1, 2, 4 on a wide model, tiny batch")
    a = p.parse_args()
    if a.sweep: return sweep(a.rounds)
    tmp = Path(tempfile.mkdtemp(prefix="fsdp-bench-"))
    runs = {m: [] for m in PROCS}
    load_before = load()
    for r in range(a.rounds):
        for mode in PROCS:
            runs[mode].append(run(mode, a.steps, a.batch, a.layers, a.vocab, tmp))
            print(f"round {r}: {mode}: {min(x['steps_per_s'] for x in runs[mode][-1]):.3f} steps/s", flush=True)
    summary = {m: {"steps_per_s": statistics.median(min(x["steps_per_s"] for x in rr) for rr in runs[m]),
                   "peak_rss_mib_per_rank": max(x["peak_rss_mib"] for rr in runs[m] for x in rr),
                   "rss_growth_mib_per_rank": max(x["peak_rss_mib"] - x["rss_at_start_mib"] for rr in runs[m] for x in rr),
                   "state_bytes_per_rank": runs[m][0][0]["bytes"]} for m in PROCS}
    m = machine()
    model = {**MODEL, "N": a.layers, "vocab": a.vocab}
    res = {"benchmark": "fsdp", "machine": m, "load_before": load_before, "load_after": load(), "model": model,
           "global_batch": a.batch, "steps": a.steps, "rounds": a.rounds, "summary": summary, "runs": runs}
    tag = "" if model == MODEL else f"-N{a.layers}-vocab{a.vocab}"
    out = Path(__file__).parent / "results" / f"fsdp-{slug(m, 'cpu')}{tag}.json"
    atomic_write(out, lambda t: t.write_text(json.dumps(res, indent=1) + "\n"))
    print("| variant | steps/s | peak RSS per rank (MiB) | its growth while training (MiB) "
          "| params + grads + Adam per rank (MiB) |\n|---|---|---|---|---|")
    for k, s in summary.items():
        print(f"| {k} | {s['steps_per_s']:.3f} | {s['peak_rss_mib_per_rank']:.0f} | {s['rss_growth_mib_per_rank']:.0f} | "
              f"{sum(s['state_bytes_per_rank'].values()) / 2**20:.0f} |")
    print(f"wrote {out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]: worker(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:8]))
    elif sys.argv[1:2] == ["sweep-worker"]: sweep_worker(sys.argv[2], sys.argv[3])
    else: main()
