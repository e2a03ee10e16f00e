"""The choices of chapter 10's classifier (reported in appendix 9g), made on the validation reviews only (the test set is never read here):

    python bench/imdb_choices.py --data-dir ../shared/data/imdb --steps 1000 --variant base \\
        --variant 'regularised:{"dropout": 0.3, "vocab_size": 8000}' --variant 'class-token:{"pool": "first"}'

Each variant is the `small` preset of the imdb task with some settings replaced (task fields, or `pool`, `dropout`
for the model), trained for `--steps` steps with the same seed and data order; the script records validation
accuracy at every evaluation. It also measures what truncation touches (review lengths in words and tokens) and how
strongly reviews with consecutive ids share names (the corpus numbers the reviews of one movie consecutively).
Writes `bench/results/imdb_choices-<machine>.json`."""
from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug   # noqa: E402

from annotated_transformer.classification import ImdbTask, clean_review   # noqa: E402
from annotated_transformer.data import load_imdb, load_tokenizer   # noqa: E402
from annotated_transformer.checkpoint import resolve_checkpoint   # noqa: E402
from annotated_transformer.tasks import register_task   # noqa: E402
from annotated_transformer.run import train   # noqa: E402

MODEL_KEYS = ("pool", "N", "d_model", "d_ff", "h")


def variant_task(name: str, changes: dict) -> str:
    "Register an imdb task named `imdb_<name>` whose preset settings are replaced by `changes`; returns its name."
    @dataclass
    class Variant(ImdbTask):
        def __post_init__(self):
            super().__post_init__()
            self.model = {**self.model, **{k: v for k, v in changes.items() if k in MODEL_KEYS}}
            for k, v in changes.items():
                if k not in MODEL_KEYS: setattr(self, k, v)
    Variant.name = f"imdb_{re.sub(r'[^a-z0-9]+', '_', name)}"
    register_task(Variant)
    return Variant.name


def name_overlap(reviews: list[tuple[str, int]], seed: int = 0) -> dict:
    "Mean Jaccard overlap of the capitalised words of reviews next to each other in id order, and of random pairs."
    caps = [set(re.findall(r"\b[A-Z][a-z]{3,}\b", t)) for t, _ in reviews]
    jac = lambda a, b: len(a & b) / max(1, len(a | b))
    rng = random.Random(seed)
    same_label = [i for i in range(len(reviews) - 1) if reviews[i][1] == reviews[i + 1][1]]
    return {"consecutive": float(np.mean([jac(caps[i], caps[i + 1]) for i in same_label])),
            "random": float(np.mean([jac(caps[rng.randrange(len(caps))], caps[rng.randrange(len(caps))])
                                     for _ in range(20000)]))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--variant", action="append", default=[], metavar="NAME[:JSON]")
    p.add_argument("--threads", type=int, default=None, help="torch threads (two 1-thread runs side by side)")
    p.add_argument("--no-stats", action="store_true", help="skip the length and name statistics")
    a = p.parse_args()
    m = machine()
    out = Path(__file__).parent / "results" / f"imdb_choices-{slug(m, 'cpu')}.json"
    result = json.loads(out.read_text()) if out.is_file() else {"runs": {}}
    for spec in a.variant or ["base"]:
        name, _, js = spec.partition(":")
        changes = json.loads(js) if js else {}
        t0 = time.perf_counter()
        r = train(task=variant_task(name, changes), data_dir=a.data_dir, out=f"runs/imdb-choice-{name}", overwrite=True,
                  progress=False, max_steps=a.steps, eval_every=a.eval_every, threads=a.threads)
        curve = [json.loads(l) for l in Path(r["out"], "metrics.jsonl").read_text().splitlines() if l.strip()]
        result["runs"][name] = {"changes": changes, "steps": a.steps,
                                "val_accuracy": [{"step": c["step"], "accuracy": c["accuracy"]} for c in curve if "accuracy" in c],
                                "train_seconds": round(r["seconds"], 1), "wall_seconds": round(time.perf_counter() - t0, 1)}
        print(name, changes, result["runs"][name]["val_accuracy"], flush=True)
        saved = json.loads(out.read_text()) if out.is_file() else {"runs": {}}   # another process may have added runs
        result = {**saved, "machine": m, "runs": {**saved["runs"], name: result["runs"][name]}}
        out.write_text(json.dumps(result, indent=1) + "\n")
    if a.no_stats: return
    # what truncation touches, with the tokenizer of the first variant; and how movies group by id
    train_rows = load_imdb("train", a.data_dir)
    texts = [t for t, _ in train_rows]
    words = np.array([len(clean_review(t).split()) for t in texts])
    first = next(iter(result["runs"]))
    tok = load_tokenizer(resolve_checkpoint(f"runs/imdb-choice-{first}"))
    ntok = np.array([len(e.ids) + 1 for e in tok.encode_batch([clean_review(t) for t in texts], add_special_tokens=False)])
    result["lengths"] = {"train_reviews": len(texts), "words_mean": float(words.mean()),
                         "words_median": float(np.median(words)), "over_512_words": int((words > 512).sum()),
                         "tokenizer_of": first, "tokens_mean": float(ntok.mean()), "tokens_median": float(np.median(ntok)),
                         "over_512_tokens": int((ntok > 512).sum()),
                         "tokens_beyond_512_share": float(np.clip(ntok - 512, 0, None).sum() / ntok.sum())}
    result["name_overlap"] = name_overlap(train_rows)
    print(result["lengths"], result["name_overlap"])
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
