"""Weight averaging for the IMDb classifier, decided on validation alone (appendix 9g; the shipped `pretrained/imdb`):
the validation accuracy of the averages of the kept checkpoints of a run over a few windows, beside each checkpoint
alone. The test set is not read here.

    python bench/imdb_average.py --run runs/part3-imdb --data-dir ../shared/data/imdb

Writes bench/results/imdb_average-<machine>.json. The window with the best validation accuracy is what
`annotated-transformer average` then writes and `bench/ship_pretrained.py imdb` ships."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug   # noqa: E402

from annotated_transformer.checkpoint import average_checkpoints, load_config, load_model   # noqa: E402
from annotated_transformer.run import load_trained   # noqa: E402

WINDOWS = [(1000, 1500), (1000, 1500, 2000), (500, 1000, 1500, 2000), (500, 1000, 1500, 2000, 2500)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--windows", default=None, metavar="STEPS;STEPS;...",
                   help="the windows to score, e.g. '1000,1500;1000,1500,2000' (default: %s)" % ";".join(",".join(map(str, w)) for w in WINDOWS))
    p.add_argument("--out", default=None, help="JSON file (default: bench/results/imdb_average-<machine>.json)")
    a = p.parse_args()
    windows = WINDOWS if a.windows is None else [tuple(int(x) for x in w.split(",")) for w in a.windows.split(";") if w]
    run = Path(a.run)
    _, task = load_trained(run, "cpu")
    task.data_dir = a.data_dir
    steps = sorted(load_config(u)["step"] for u in run.glob("step-*"))
    windows = [w for w in windows if set(w) <= set(steps)]   # only windows of kept checkpoints
    if not windows:
        sys.exit(f"no window lies within the steps kept in {run} ({steps}); pass --windows made of those steps.")
    single = {}
    for s in steps:
        single[s] = task.evaluate(load_model(run / f"step-{s}", "cpu"), None, "cpu", split="val")["accuracy"]
        print(f"step {s}: validation {single[s]:.2%}", flush=True)
    averaged = []
    for w in windows:
        model = load_model(run / f"step-{w[0]}", "cpu")
        model.load_state_dict(average_checkpoints([run / f"step-{s}" for s in w]))
        acc = task.evaluate(model, None, "cpu", split="val")["accuracy"]
        averaged.append({"steps": list(w), "val_accuracy": acc})
        print(f"average of steps {list(w)}: validation {acc:.2%}", flush=True)
    best = max(averaged, key=lambda r: r["val_accuracy"])
    m = machine()
    out = Path(a.out or Path(__file__).parent / "results" / f"imdb_average-{slug(m, 'cpu')}.json")
    out.write_text(json.dumps({"machine": m, "run": str(run), "single": {str(k): v for k, v in single.items()},
                               "averaged": averaged, "best": best}, indent=1) + "\n")
    print(f"best: steps {best['steps']} ({best['val_accuracy']:.2%}); wrote {out}")


if __name__ == "__main__":
    main()
