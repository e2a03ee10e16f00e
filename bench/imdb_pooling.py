"""Chapter 10's pooling comparison with several seeds: the `small` preset of the imdb task with mean pooling and with
the first token (`<s>`, a class token), each trained for `--steps` steps with seeds `--seeds`; the seed sets the
initial weights and the order of the batches, the same for both arms. Records validation accuracy (the test set is
never read here). One run at a time, each saved as it ends; `--resume` skips the runs already in the file.
`--arms first` trains one arm only, to be paired with the other arm's runs stored elsewhere. Chapter 10's comparison
is both arms at ten seeds for 4,000 steps on one GPU, one process per run (`bench/imdb_pooling_gpu.sh`).

    python bench/imdb_pooling.py --data-dir /path/to/imdb --steps 500 --seeds 0 1 2 --threads 1 --resume
    python bench/imdb_pooling.py --data-dir /path/to/imdb --steps 4000 --eval-every 250 --seeds 0 --arms first --device cuda --out f.json

Writes `--out`, or `bench/results/imdb_pooling-<machine>.json` (500 steps) or `imdb_pooling-<steps>-<machine>.json`."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug, load   # noqa: E402
from imdb_choices import variant_task   # noqa: E402

from annotated_transformer.run import train   # noqa: E402

ARMS = {"mean": {}, "first": {"pool": "first"}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    p.add_argument("--eval-every", type=int, default=None, help="default: once, at the end")
    p.add_argument("--resume", action="store_true", help="keep the runs already stored and skip them")
    p.add_argument("--runs", default="runs", help="folder of the run folders (default: runs)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or auto")
    p.add_argument("--out", help="JSON file (default: bench/results/imdb_pooling-[<steps>-]<machine>.json)")
    p.add_argument("--dry-run", action="store_true", help="print the runs that would be made, and stop")
    a = p.parse_args()
    m = machine()
    out = Path(a.out or Path(__file__).parent / "results" / f"imdb_pooling-{'' if a.steps == 500 else f'{a.steps}-'}{slug(m, a.device)}.json")
    result = json.loads(out.read_text()) if a.resume and out.is_file() else {}
    if result and result.get("steps") != a.steps:
        sys.exit(f"{out} holds runs of {result.get('steps')} steps, not {a.steps}; pass --steps {result.get('steps')} or move it away.")
    result.update(machine=m, steps=a.steps, preset="small", arms={arm: ARMS[arm] for arm in a.arms})
    result.setdefault("runs", [])
    done = {(r["arm"], r["seed"]) for r in result["runs"]}
    todo = [(arm, s) for s in a.seeds for arm in a.arms if (arm, s) not in done]   # arms alternate: a cut run stays paired
    print(f"{len(todo)} runs to make: {todo}", flush=True)
    if a.dry_run: return
    for arm, seed in todo:
        t0 = time.perf_counter()
        r = train(task=variant_task(f"pool-{arm}", ARMS[arm]), data_dir=a.data_dir, out=str(Path(a.runs) / f"imdb-pooling-{arm}-{seed}"),
                  overwrite=True, progress=False, device=a.device, max_steps=a.steps, eval_every=a.eval_every or a.steps, seed=seed, threads=a.threads)
        curve = [json.loads(l) for l in Path(r["out"], "metrics.jsonl").read_text().splitlines() if l.strip()]
        acc = [c for c in curve if "accuracy" in c]
        result["runs"].append({"arm": arm, "seed": seed, "val_accuracy": acc[-1]["accuracy"], "n": acc[-1].get("eval", {}).get("n"),
                               "val_curve": [{"step": c["step"], "accuracy": c["accuracy"]} for c in acc],
                               "train_seconds": round(r["seconds"], 1), "wall_seconds": round(time.perf_counter() - t0, 1),
                               "load": load()})
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(arm, seed, result["runs"][-1], flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
