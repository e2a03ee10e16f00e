"""One process, DDP x 2 and FSDP x 2 at the same global batch: steps/s and, per process, the peak resident memory
while training and the bytes of parameters + gradients + Adam state. Runs interleaved (single, ddp, fsdp, single, ...)
so that a change in the machine's load hits every variant alike; CPU, gloo, `demo_train` of chapter 8's part 2.

    python bench/fsdp.py [--rounds 2] [--steps 6]   # prints a table, writes bench/results/fsdp-<machine>.json
    python bench/fsdp.py --layers 6 --vocab 1000    # more layers, smaller embeddings: ...-N6-vocab1000.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import load, machine, slug  # noqa: E402

MODEL = dict(vocab=8000, N=2, d_model=512, d_ff=2048, h=8, seq_len=32)   # big enough that the state matters
PROCS = {"single": 1, "ddp": 2, "fsdp": 2}


def worker(out: str, mode: str, steps: int, batch: int, layers: int, vocab: int) -> None:
    from annotated_transformer.sharding import demo_train
    demo_train(out, mode, steps, batch, **{**MODEL, "N": layers, "vocab": vocab})


def run(mode: str, steps: int, batch: int, layers: int, vocab: int, tmp: Path) -> list[dict]:
    out = tmp / f"{mode}-{len(list(tmp.iterdir()))}"
    args = [__file__, "worker", str(out), mode, str(steps), str(batch), str(layers), str(vocab)]
    cmd = ([sys.executable, *args] if PROCS[mode] == 1 else
           [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(PROCS[mode]), *args])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0: raise SystemExit(f"{mode} failed:\n{r.stderr[-3000:]}")
    return [json.loads((out / f"rank{i}.json").read_text()) for i in range(PROCS[mode])]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=2); p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch", type=int, default=16, help="global batch, sequences (each of 2 processes: half)")
    p.add_argument("--layers", type=int, default=MODEL["N"]); p.add_argument("--vocab", type=int, default=MODEL["vocab"])
    a = p.parse_args()
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
    out.write_text(json.dumps(res, indent=1) + "\n")
    print("| variant | steps/s | peak RSS per rank (MiB) | its growth while training (MiB) "
          "| params + grads + Adam per rank (MiB) |\n|---|---|---|---|---|")
    for k, s in summary.items():
        print(f"| {k} | {s['steps_per_s']:.3f} | {s['peak_rss_mib_per_rank']:.0f} | {s['rss_growth_mib_per_rank']:.0f} | "
              f"{sum(s['state_bytes_per_rank'].values()) / 2**20:.0f} |")
    print(f"wrote {out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]: worker(sys.argv[2], sys.argv[3], *map(int, sys.argv[4:8]))
    else: main()
