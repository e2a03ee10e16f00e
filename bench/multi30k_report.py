"""The result of a Multi30k training run: learning curves, test BLEU, checkpoint averaging and example translations.

Train with snapshots, then report:

    annotated-transformer train --task multi30k --preset small --data-dir DATA --out runs/m30k --keep-checkpoints 30
    python bench/multi30k_report.py --run runs/m30k --data-dir DATA --log train.log

For every snapshot (`RUN/step-N`, or the folders given by `--snapshots`) it computes the per-token cross-entropy
and perplexity on the validation split (teacher forcing, no label smoothing) and reads the validation BLEU the run
logged there. For the final model and for the average of the last `--average` snapshots it computes sacreBLEU on
`val` and `test2016`, greedy and with beam search. The average is fixed in advance (the last K snapshots), not
chosen by a test score. It also keeps the test sentences the averaged model translates best and worst (sentence
BLEU), for the chapter. It prints a table and writes JSON (default
`bench/results/multi30k-<preset>-<machine>.json`) with the machine named.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import re
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug  # noqa: E402  (the same machine description as the other benchmarks)

from annotated_transformer.checkpoint import load_config, resolve_checkpoint  # noqa: E402
from annotated_transformer.cli import average, snapshots  # noqa: E402
from annotated_transformer.data import PAD, encode_pairs, load_multi30k, translation_loader  # noqa: E402
from annotated_transformer.run import evaluate, run_recipe  # noqa: E402
from annotated_transformer.translation import fast_translate, load_translator  # noqa: E402
from annotated_transformer.training import Batch, LabelSmoothing, run_epoch  # noqa: E402


def validation_loss(checkpoint: Path, pairs: list[tuple[str, str]], max_tokens: int = 4096, device: str = "cpu") -> dict:
    "Per-token cross-entropy (nats) and perplexity of `checkpoint` on `pairs`, teacher-forced, padding excluded."
    model, tok = load_translator(checkpoint, device)
    batches = (Batch(src.to(device), tgt.to(device), PAD)
               for src, tgt in translation_loader(encode_pairs(tok, pairs), max_tokens, shuffle=False))
    nll = LabelSmoothing(tok.get_vocab_size(), PAD, smoothing=0.0)    # no smoothing: the plain cross-entropy
    loss, _ = run_epoch(batches, model, nll, mode="eval", progress=False)
    return {"val_loss": loss, "val_ppl": math.exp(loss)}


def train_losses(run: Path, logs: list[str]) -> dict[int, float]:
    """Training loss by step: from the run's `metrics.jsonl` (the mean loss per token over each log interval), else
    from the `step N: loss X` lines of older runs' stderr logs (the loss of the one batch at that step)."""
    metrics = run / "metrics.jsonl"
    if metrics.is_file():
        recs = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        return {r["step"]: r["loss"] for r in recs if "loss" in r}
    out = {}
    for log in logs:
        for m in re.finditer(r"^step (\d+): loss ([0-9.]+)", Path(log).read_text(), re.M):
            out[int(m.group(1))] = float(m.group(2))
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="the checkpoint folder of the run (its final model)")
    p.add_argument("--snapshots", help="glob of snapshot folders (default: RUN/step-N)")
    p.add_argument("--data-dir", help="Multi30k folder (default: the one the run trained on)")
    p.add_argument("--log", nargs="*", default=[], help="older runs without metrics.jsonl: stderr logs with 'step N: loss X' lines")
    p.add_argument("--average", type=int, default=5, help="average the last K snapshots (default 5)")
    p.add_argument("--beam", type=int, default=4, help="beam size of the beam-search scores (default 4)")
    p.add_argument("--device", default="cpu", help="where to evaluate: cpu (default) or cuda")
    p.add_argument("--out", help="JSON file (default: bench/results/multi30k-<preset>-<machine>.json)")
    args = p.parse_args(argv)
    run = Path(args.run)
    snaps = ([Path(s) for s in glob.glob(args.snapshots)] if args.snapshots else snapshots(run))
    snaps = sorted(snaps, key=lambda s: load_config(s)["step"])
    if len(snaps) < args.average: sys.exit(f"need at least {args.average} snapshots to average, found {len(snaps)}")
    task = json.loads((run / "task.json").read_text())   # the run folder keeps it beside its checkpoints
    data_dir = args.data_dir or task["data_dir"]
    val = load_multi30k("val", data_dir)
    losses = train_losses(run, args.log)
    t0 = time.perf_counter()

    curve = []
    for s in snaps:
        cfg = load_config(s)
        m = cfg.get("metrics") or {}
        row = {"step": cfg["step"], "val_bleu_greedy": m.get("bleu") if m.get("split") == "val" else None,
               "train_loss": losses.get(cfg["step"]), **validation_loss(s, val, device=args.device)}
        curve.append(row)
        print(json.dumps(row), flush=True)

    averaged = Path(tempfile.mkdtemp()) / "average"
    average(snaps[-args.average:], averaged)
    scores = {}
    for name, ckpt in (("final", run), (f"average_last_{args.average}", averaged)):
        for split in ("val", "test2016"):
            for beam in (1, args.beam):
                r = evaluate(ckpt, device=args.device, data_dir=data_dir, split=split, beam=beam)
                scores[f"{name}/{split}/beam{beam}"] = {k: r[k] for k in ("bleu", "precisions", "bp", "signature")}
                print(f"{name:>18} {split:>9} beam {beam}: BLEU {r['bleu']:.2f}", flush=True)

    model, tok = load_translator(averaged, args.device)
    test = load_multi30k("test2016", data_dir)
    hyps = fast_translate(model, tok, [d for d, _ in test], beam=args.beam)
    sent = [sacrebleu.sentence_bleu(h, [e]).score for h, (_, e) in zip(hyps, test)]
    metric = sacrebleu.BLEU(lowercase=True)          # case-insensitive, as scored by tutorials that lowercase
    lower = metric.corpus_score(hyps, [[e for _, e in test]])
    scores[f"average_last_{args.average}/test2016/beam{args.beam}/lowercase"] = {
        "bleu": lower.score, "signature": str(metric.get_signature())}
    print(f"average, test2016, beam {args.beam}, lowercased: BLEU {lower.score:.2f}", flush=True)
    readable = [i for i, (d, _) in enumerate(test) if 6 <= len(d.split()) <= 14]   # short enough to print
    ranked = sorted(readable, key=lambda i: (sent[i], i))
    pick = lambda idx: [{"de": test[i][0], "en": test[i][1], "hyp": hyps[i], "sentence_bleu": round(sent[i], 1)}
                        for i in idx]
    state = json.loads((resolve_checkpoint(run) / "train_state.json").read_text())
    result = {
        "benchmark": "Multi30k German->English: learning curve, sacreBLEU, checkpoint averaging",
        "machine": machine(), "preset": task["preset"], "seed": (run_recipe(run) or {}).get("seed"), "task": task,
        "model": load_config(run)["model"], "steps": load_config(run)["step"],
        "train_seconds": state["state"]["seconds"],
        "snapshots": [s.name for s in snaps], "averaged": [s.name for s in snaps[-args.average:]],
        "curve": curve, "bleu": scores,
        "examples": {"best": pick(ranked[::-1][:4]), "worst": pick(ranked[:4]),
                     "first": pick(range(4))},
        "report_seconds": round(time.perf_counter() - t0, 1),
    }
    print(f"\nsteps {result['steps']}, training time {result['train_seconds'] / 3600:.2f} h on {result['machine']['cpu']}")
    out = Path(args.out or Path(__file__).parent / "results" /
               f"multi30k-{task['preset']}-{slug(result['machine'], 'cpu')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
