"""The real runs of Part III, on this machine, timed from start to finish (data, tokenizer, training, evaluations):

    python bench/part3_run.py imdb --data-dir ../shared/data/imdb            # appendix 9g (chapter 10): test accuracy
    python bench/part3_run.py shakespeare --data-dir ../shared/data/tinyshakespeare   # appendix 9h (chapter 11): validation loss
    python bench/part3_run.py shakespeare --data-dir ../shared/data/tinyshakespeare --set seed=1 --tag seed1 --threads 1
        # a repeat at another seed (chapter 11's mean over seeds), in runs/part3-shakespeare-seed1

Training goes through the library's `train` (the same as `annotated-transformer train`), in `runs/part3-<task>`, with a
checkpoint at every evaluation: a stopped run continues with `--resume`. At the end the script measures what the
appendix shows and writes `bench/results/<task>_run-<machine>.json` (appendices 9g and 9h read it) beside the training log.
Extra `train` settings: `--set key=value` (e.g. `--set max_steps=100` for a quick check)."""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug   # noqa: E402

from annotated_transformer.run import train, load_trained, TrainConfig   # noqa: E402
from annotated_transformer.checkpoint import atomic_write   # noqa: E402

RESULTS = Path(__file__).parent / "results"


def best_checkpoint(out: Path) -> tuple[Path, int]:
    "The kept checkpoint of `out` with the highest validation accuracy in metrics.jsonl (the newest on a tie)."
    from annotated_transformer.checkpoint import checkpoint_units, load_config
    units = {load_config(u)["step"]: u for u in checkpoint_units(out)}
    scores = {json.loads(l)["step"]: json.loads(l)["accuracy"]
              for l in (out / "metrics.jsonl").read_text().splitlines() if '"accuracy"' in l}
    step = max((s for s in units if s in scores), key=lambda s: (scores[s], s))
    return units[step], step


def imdb_report(out: Path, data_dir: str | None) -> dict:
    """The checkpoint with the best validation accuracy (early stopping, decided on validation alone), its test
    accuracy read once, a confusion matrix, accuracy by review length, the worst errors, one attention map."""
    from annotated_transformer.checkpoint import load_model
    from annotated_transformer.classification import classify_ids, clean_review
    from annotated_transformer.data import load_imdb, IMDB_LABELS
    _, task = load_trained(out, "cpu")                   # the task and tokenizer, from the newest checkpoint
    best, best_step = best_checkpoint(out)
    model = load_model(best, "cpu")
    task.data_dir = data_dir
    val = task.evaluate(model, None, "cpu", split="val")
    test = load_imdb("test", data_dir)
    ids = task.encode([t for t, _ in test])
    labels = torch.tensor([y for _, y in test])
    probs = classify_ids(model, ids)
    pred = probs.argmax(-1)
    confusion = [[int(((labels == i) & (pred == j)).sum()) for j in range(2)] for i in range(2)]
    words = torch.tensor([len(clean_review(t).split()) for t, _ in test])
    edges = [0, 100, 200, 300, 400, 512, 800, 100_000]
    by_length = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        sel = (words >= lo) & (words < hi)
        if sel.any(): by_length.append({"words_from": lo, "words_to": hi, "n": int(sel.sum()),
                                         "accuracy": float((pred[sel] == labels[sel]).float().mean())})
    wrong_conf = probs.max(-1).values.masked_fill(pred == labels, 0.0)
    worst = [{"text": test[i][0][:600], "label": IMDB_LABELS[test[i][1]], "predicted": IMDB_LABELS[int(pred[i])],
              "probability": round(float(probs[i].max()), 4), "words": int(words[i])}
             for i in wrong_conf.topk(5).indices.tolist()]
    # what attention looks at: the attention each token receives, averaged over heads and queries, in a short review
    short = min((i for i in range(len(test)) if 60 <= words[i] <= 90 and pred[i] == labels[i]), key=lambda i: -float(probs[i].max()))
    attn_mod = model.encoder.layers[-1].self_attn
    attn_mod.keep_weights = True
    src = torch.tensor([ids[short]])
    with torch.no_grad(): model(src, (src != 0).unsqueeze(1))
    received = attn_mod.attn[0].mean(0).mean(0)                      # (seq,): mean over heads and queries
    attn_mod.keep_weights = False
    tokens = [task.tokenizer.id_to_token(i) for i in ids[short]]
    return {"selected_step": best_step, "val": val, "test": {"accuracy": float((pred == labels).float().mean()), "n": len(test),
                                 "correct": int((pred == labels).sum())},
            "confusion": {"rows_true": list(IMDB_LABELS), "cols_predicted": list(IMDB_LABELS), "counts": confusion},
            "by_length": by_length, "worst": worst,
            "attention": {"review": test[short][0], "label": IMDB_LABELS[test[short][1]],
                          "probability": float(probs[short].max()), "tokens": tokens,
                          "received": [round(float(x), 5) for x in received]},
            "truncated_test_reviews": int(sum(len(x) >= task.max_len for x in ids))}


def lm_report(out: Path, data_dir: str | None) -> dict:
    "The validation loss in nats and bits, and samples at several temperatures."
    from annotated_transformer.language_model import generate
    model, task = load_trained(out, "cpu")
    task.data_dir = data_dir
    val = task.evaluate(model, None, "cpu", split="val")
    samples = []
    for temperature, top_k in [(0.5, None), (0.8, None), (1.0, None), (1.0, 10)]:
        g = torch.Generator().manual_seed(0)
        prompt = torch.tensor([task.vocab.encode("ROMEO:\n")])
        text = task.vocab.decode(generate(model, prompt, 400, temperature, top_k, g)[0])
        samples.append({"temperature": temperature, "top_k": top_k, "text": text})
    return {"val": val, "samples": samples, "vocab": len(task.vocab),
            "train_chars": len(task.splits["train"]) if task.splits else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", choices=["imdb", "shakespeare"])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--out", default=None)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--tag", default=None, help="a name for a repeat (e.g. seed1): the result is <task>_run_<tag>-<machine>.json")
    a = p.parse_args()
    out = Path(a.out or f"runs/part3-{a.task}{'-' + a.tag if a.tag else ''}")
    extra = {}
    for kv in a.set:
        k, v = kv.split("=", 1)
        try: extra[k] = json.loads(v)
        except json.JSONDecodeError: extra[k] = v
    t0 = time.perf_counter()
    if a.task == "imdb": extra.setdefault("keep_checkpoints", 20)   # every evaluation's weights, to select on validation
    summary = train(TrainConfig(task=a.task, data_dir=a.data_dir, out=str(out), resume=a.resume,
                                overwrite=not a.resume, progress=False, threads=a.threads, **extra))
    train_s = time.perf_counter() - t0
    report = imdb_report(out, a.data_dir) if a.task == "imdb" else lm_report(out, a.data_dir)
    curve = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines() if l.strip()]
    m = machine()
    result = {"task": a.task, "machine": m, "settings": extra, "train_seconds": round(summary["seconds"], 1),
              "wall_seconds_to_trained": round(train_s, 1), "steps": summary["steps"],
              "task_settings": json.loads((out / "task.json").read_text()),
              "final": summary["metrics"], "curve": curve, **report}
    RESULTS.mkdir(exist_ok=True)
    name = RESULTS / f"{a.task}_run{'_' + a.tag if a.tag else ''}-{slug(m, 'cpu')}.json"
    atomic_write(name, lambda tmp: tmp.write_text(json.dumps(result, indent=1) + "\n"))
    head = {k: result[k] for k in ("train_seconds", "wall_seconds_to_trained", "steps")}
    print(json.dumps(head), json.dumps(result.get("test", result.get("val"))))
    print(f"wrote {name}")


if __name__ == "__main__":
    main()
