"""The headline of chapter 10 over several seeds: the `small` preset of the imdb task trained with each seed in
`--seeds` for the same budget of `--steps` steps (evaluated on validation every 500 steps, every evaluation's weights
kept), the weights with the best validation accuracy selected (as `bench/part3_run.py` selects them), and the test
split read once with them. The seed sets the initial weights and the order of the batches.

One seed after another (two processes with other `--seeds` and `--runs` share the work); each writes `bench/results/imdb_seeds-<steps>-seed<k>-<machine>.json` when it ends. A stopped
seed continues from its last checkpoint (`<runs>-<k>`) with `--resume`, and `--resume` skips the seeds whose
file exists.

    nice python bench/imdb_seeds.py --data-dir ../shared/data/imdb --steps 2000 --seeds 0 1 2 --threads 1 --resume
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug, load   # noqa: E402
from part3_run import best_checkpoint   # noqa: E402

from annotated_transformer.checkpoint import load_model   # noqa: E402
from annotated_transformer.classification import classify_ids, clean_review   # noqa: E402
from annotated_transformer.data import load_imdb   # noqa: E402
from annotated_transformer.run import train, load_trained   # noqa: E402

RESULTS = Path(__file__).parent / "results"


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
    p.add_argument("--runs", default="runs/imdb-seeds", help="run folders: <runs>-<seed>")
    p.add_argument("--resume", action="store_true", help="skip the seeds already stored; continue a stopped seed")
    a = p.parse_args()
    m = machine()
    for seed in a.seeds:
        name = RESULTS / f"imdb_seeds-{a.steps}-seed{seed}-{slug(m, 'cpu')}.json"
        if a.resume and name.is_file():
            print(f"seed {seed}: stored in {name}, skipped", flush=True); continue
        out = Path(f"{a.runs}-{seed}")
        again = a.resume and (out / "train_config.json").is_file()
        t0 = time.perf_counter()
        summary = train(task="imdb", preset="small", data_dir=a.data_dir, out=str(out), resume=again, overwrite=not again,
                        progress=False, max_steps=a.steps, seed=seed, threads=a.threads, keep_checkpoints=20)
        train_s = time.perf_counter() - t0
        report = test_report(out, a.data_dir)
        curve = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if '"accuracy"' in l]
        result = {"task": "imdb", "preset": "small", "seed": seed, "steps": summary["steps"], "machine": m,
                  "train_seconds": round(summary["seconds"], 1), "wall_seconds": round(time.perf_counter() - t0, 1),
                  "wall_seconds_to_trained": round(train_s, 1), "load": load(),
                  "val_curve": [{"step": c["step"], "accuracy": c["accuracy"]} for c in curve], **report}
        RESULTS.mkdir(exist_ok=True)
        name.write_text(json.dumps(result, indent=1) + "\n")
        print(f"seed {seed}: selected step {report['selected_step']}, val {report['val']['accuracy']:.4f}, "
              f"test {report['test']['accuracy']:.4f}; wrote {name}", flush=True)


if __name__ == "__main__":
    main()
