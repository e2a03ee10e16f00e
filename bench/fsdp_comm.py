"""Chapter 8 part 2's speed table taken apart: the collectives of one optimizer step, timed alone (no computation),
for DDP and for FSDP on 2 gloo processes with `bench/fsdp.py`'s model, beside each one's whole step (`demo_train`,
steps after the first). Interleaved rounds; every process with one thread, as in `bench/fsdp.py`.

FSDP's step, as `shard_model` wraps the model: all-gather the root unit once, then each layer's unit in forward
and again in backward, and reduce-scatter every unit's gradients. DDP's: all-reduce every gradient, in buckets of
25 MiB (DDP's default bucket size). Sizes are the units' parameter counts, padded to a multiple of P.

    python bench/fsdp_comm.py [--rounds 5] [--reps 5]   # writes bench/results/fsdp_comm-<machine>.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import load, machine, slug  # noqa: E402
from fsdp import MODEL, run  # noqa: E402
from annotated_transformer.checkpoint import atomic_write  # noqa: E402

BUCKET = 25 * 2**20 // 4                 # DDP's default bucket, in fp32 values


def comm_worker(out: str, reps: int) -> None:
    "One rank: the median over `reps` of the seconds of one step's collectives, DDP's and FSDP's, alternating."
    import torch
    import torch.distributed as dist
    from annotated_transformer.model import make_model, count_parameters
    from annotated_transformer.sharding import join_process_group, shard_units
    rank, world = join_process_group("gloo")
    with torch.device("meta"):
        model = make_model(MODEL["vocab"], MODEL["vocab"], N=MODEL["N"], d_model=MODEL["d_model"], d_ff=MODEL["d_ff"], h=MODEL["h"])
    psi, units = count_parameters(model), [count_parameters(u) for u in shard_units(model)]
    root = psi - sum(units)
    pad = lambda n: math.ceil(n / world) * world
    full = {n: torch.zeros(pad(n)) for n in {root, *units}}                      # gathered / to be scattered
    part = {n: torch.zeros(pad(n) // world) for n in {root, *units}}             # this rank's piece
    buckets = [torch.zeros(min(BUCKET, psi - s)) for s in range(0, psi, BUCKET)]

    def fsdp_step():
        for n in [root, *units, *units[::-1]]: dist.all_gather_into_tensor(full[n], part[n])   # forward, backward
        for n in [*units[::-1], root]: dist.reduce_scatter_tensor(part[n], full[n])

    def ddp_step():
        for b in buckets: dist.all_reduce(b)

    times = {"ddp": [], "fsdp": []}
    for _ in range(reps + 1):                                                    # the first: warm-up, dropped
        for name, step in (("ddp", ddp_step), ("fsdp", fsdp_step)):
            dist.barrier(); t0 = time.perf_counter(); step(); dist.barrier()
            times[name].append(time.perf_counter() - t0)
    rec = {"rank": rank, "psi": psi, "root": root, "units": units,
           **{f"{k}_comm_s": statistics.median(v[1:]) for k, v in times.items()}}
    Path(out).mkdir(parents=True, exist_ok=True)
    atomic_write(Path(out) / f"rank{rank}.json", lambda p: p.write_text(json.dumps(rec) + "\n"))
    dist.destroy_process_group(); os._exit(0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5); p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=6); p.add_argument("--batch", type=int, default=16)
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fsdp-comm-"))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    rows, load_before = [], load()
    for r in range(a.rounds):
        out = tmp / f"comm-{r}"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", __file__,
               "comm-worker", str(out), str(a.reps)]
        c = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if c.returncode != 0: raise SystemExit(f"comm failed:\n{c.stderr[-3000:]}")
        comm = [json.loads((out / f"rank{i}.json").read_text()) for i in range(2)]
        steps = {m: run(m, a.steps, a.batch, MODEL["N"], MODEL["vocab"], tmp) for m in ("ddp", "fsdp")}
        row = {"round": r, **{f"{m}_comm_s": max(x[f"{m}_comm_s"] for x in comm) for m in ("ddp", "fsdp")},
               **{f"{m}_step_s": 1 / min(x["steps_per_s"] for x in steps[m]) for m in ("ddp", "fsdp")}}
        rows.append(row)
        print(" ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    m = machine()
    res = {"benchmark": "fsdp_comm", "machine": m, "load_before": load_before, "load_after": load(), "model": MODEL,
           "global_batch": a.batch, "steps": a.steps, "reps": a.reps, "rounds": a.rounds, "bucket_values": BUCKET,
           "psi": comm[0]["psi"], "root": comm[0]["root"], "units": comm[0]["units"], "runs": rows}
    out = Path(__file__).parent / "results" / f"fsdp_comm-{slug(m, 'cpu')}.json"
    atomic_write(out, lambda t: t.write_text(json.dumps(res, indent=1) + "\n"))
    print("| | step (s) | its collectives alone (s) |\n|---|---|---|")
    for k in ("ddp", "fsdp"):
        print(f"| {k} | {statistics.median(x[f'{k}_step_s'] for x in rows):.3f} | "
              f"{statistics.median(x[f'{k}_comm_s'] for x in rows):.3f} |")
    print(f"wrote {out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["comm-worker"]: comm_worker(sys.argv[2], int(sys.argv[3]))
    else: main()
