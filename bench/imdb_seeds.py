"""The headline of chapter 10 over several seeds: the `small` preset of the imdb task trained with each seed in
`--seeds` for the same budget of `--steps` steps (evaluated on validation every 500 steps, every evaluation's weights
kept), the weights with the best validation accuracy selected (as `bench/part3_run.py` selects them), and the test
split read once with them. The seed sets the initial weights and the order of the batches.

One seed after another (two processes with other `--seeds` and `--runs` share the work); each writes `bench/results/imdb_seeds-<steps>-seed<k>-<machine>.json` when it ends. A stopped
seed continues from its last checkpoint (`<runs>-<k>`) with `--resume`, and `--resume` skips the seeds whose
file exists.

    nice python bench/imdb_seeds.py --data-dir ../shared/data/imdb --steps 2000 --seeds 0 1 2 --threads 1 --resume

`--val random` validates instead on `val_size / 2` reviews of each label drawn at random (one fixed draw for every
seed), which may share movies with the training reviews: the other arm of chapter 10's split comparison, written to
`bench/results/imdb_randval-<steps>-seed<k>-<machine>.json`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug, load   # noqa: E402
from part3_run import best_checkpoint   # noqa: E402

from annotated_transformer.checkpoint import atomic_write, load_model   # noqa: E402
from annotated_transformer.classification import IMDB_LABELS, ImdbTask, classify_ids, clean_review   # noqa: E402
from annotated_transformer.data import load_imdb   # noqa: E402
from annotated_transformer.run import train, load_trained   # noqa: E402
from annotated_transformer.tasks import register_task   # noqa: E402

RESULTS = Path(__file__).parent / "results"


@register_task
@dataclass
class ImdbRandomValTask(ImdbTask):
    """`ImdbTask` validated on `val_size / 2` reviews of each label drawn at random (generator seed 0, the same draw
    for every training seed) instead of the highest ids; training reviews shuffled as `ImdbTask.split` does."""
    name: ClassVar[str] = "imdb_random_val"

    def split(self) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        reviews = load_imdb("train", self.data_dir)                  # sorted by label, then id
        rng, held = np.random.default_rng(0), set()
        for k in range(len(IMDB_LABELS)):
            of_label = [i for i, (_, y) in enumerate(reviews) if y == k]
            held.update(int(i) for i in rng.choice(of_label, self.val_size // 2, replace=False))
        val = [reviews[i] for i in sorted(held)]
        train = [reviews[i] for i in np.random.default_rng(0).permutation(len(reviews)) if i not in held]
        return (train[:self.max_train] if self.max_train else train), val


SUBWORD_EDGES = (0, 128, 256, 384, 511, 768, 1024)   # 511: the longest review kept whole (512 tokens with <s>)


def by_subwords(task, texts: list[str], correct: torch.Tensor) -> list[dict]:
    "Test accuracy by the review's length in subwords before the cut, in bins whose edges are `SUBWORD_EDGES`."
    encs = task.tokenizer.encode_batch([clean_review(t, task.lowercase) for t in texts], add_special_tokens=False)
    n = torch.tensor([len(e.ids) for e in encs])
    edges = [*SUBWORD_EDGES, 10**9]
    assert task.max_len - 1 in edges                         # the cut is a bin edge
    return [{"subwords_above": a, "subwords_to": b, "n": int(k.sum()), "correct": int(correct[k].sum()), "cut": a >= task.max_len - 1}
            for a, b in zip(edges, edges[1:]) if (k := (n > a) & (n <= b)).any()]


def test_report(out: Path, data_dir: str) -> dict:
    """The selected weights' validation and test accuracy, the test confusion counts (rows true, columns predicted)
    and the test accuracy by length in subwords."""
    _, task = load_trained(out, "cpu")
    best, step = best_checkpoint(out)
    model = load_model(best, "cpu").eval()
    task.data_dir = data_dir
    val = task.evaluate(model, None, "cpu", split="val")
    test = load_imdb("test", data_dir)
    labels = torch.tensor([y for _, y in test])
    pred = classify_ids(model, task.encode([t for t, _ in test])).argmax(-1)
    confusion = [[int(((labels == i) & (pred == j)).sum()) for j in range(2)] for i in range(2)]
    texts = [t for t, _ in test]
    return {"selected_step": step, "val": val, "by_subwords": by_subwords(task, texts, pred == labels),
            "test": {"accuracy": float((pred == labels).float().mean()), "n": len(test), "correct": int((pred == labels).sum())},
            "confusion": confusion}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--runs", default=None, help="run folders: <runs>-<seed> (default runs/imdb-seeds, runs/imdb-randval)")
    p.add_argument("--val", choices=("ids", "random"), default="ids", help="validation: the highest ids (the task's) or random reviews")
    p.add_argument("--resume", action="store_true", help="skip the seeds already stored; continue a stopped seed")
    a = p.parse_args()
    m, task = machine(), ("imdb" if a.val == "ids" else ImdbRandomValTask.name)
    runs, stem = (a.runs or "runs/imdb-seeds", "imdb_seeds") if a.val == "ids" else (a.runs or "runs/imdb-randval", "imdb_randval")
    for seed in a.seeds:
        name = RESULTS / f"{stem}-{a.steps}-seed{seed}-{slug(m, 'cpu')}.json"
        if a.resume and name.is_file():
            print(f"seed {seed}: stored in {name}, skipped", flush=True); continue
        out = Path(f"{runs}-{seed}")
        again = a.resume and (out / "train_config.json").is_file()
        t0 = time.perf_counter()
        summary = train(task=task, preset="small", data_dir=a.data_dir, out=str(out), resume=again, overwrite=not again,
                        progress=False, max_steps=a.steps, seed=seed, threads=a.threads, keep_checkpoints=20)
        train_s = time.perf_counter() - t0
        report = test_report(out, a.data_dir)
        curve = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if '"accuracy"' in l]
        result = {"task": task, "preset": "small", "seed": seed, "steps": summary["steps"], "machine": m,
                  "train_seconds": round(summary["seconds"], 1), "wall_seconds": round(time.perf_counter() - t0, 1),
                  "wall_seconds_to_trained": round(train_s, 1), "load": load(),
                  "val_curve": [{"step": c["step"], "accuracy": c["accuracy"]} for c in curve], **report}
        RESULTS.mkdir(exist_ok=True)
        atomic_write(name, lambda t: t.write_text(json.dumps(result, indent=1) + "\n"))
        print(f"seed {seed}: selected step {report['selected_step']}, val {report['val']['accuracy']:.4f}, "
              f"test {report['test']['accuracy']:.4f}; wrote {name}", flush=True)


if __name__ == "__main__":
    main()
