"""What Transformer-XL's memory and its relative positions each buy (chapter 14), on tiny-shakespeare.

Four models of the same width, depth, heads, feed-forward size, segment (window) length, batch, steps, optimiser and
schedule, each at every seed of `--seeds`:

- `ch11_random`: chapter 11's model (absolute sinusoids) on random windows, each read alone;
- `xl_nomem_random`: Transformer-XL with no memory (relative positions only) on the same random windows;
- `xl_nomem_contig`: Transformer-XL with no memory on consecutive segments of `batch` contiguous streams;
- `xl_mem`: Transformer-XL with a memory of `--context` states on those consecutive segments (the paper's training).

`ch11_random` against `xl_nomem_random` isolates relative positions; `xl_nomem_random` against `xl_nomem_contig` the
order of the batches; `xl_nomem_contig` against `xl_mem` the memory. Validation: the whole validation text; chapter
11's model window by window (`corpus_loss`); each Transformer-XL as 8 streams with the memory carried at every
length of `--eval-mems` (0: each segment alone), lengths it was not trained with included.

Launch (checkpoints under runs/transformer_xl-<tag>/; --resume goes on from them and from the JSON):

    # chapter 11's shipped model's size and budget: 4 layers of width 128, 3,600 steps of 32 windows of 128, 3 seeds
    OMP_NUM_THREADS=1 nice -n 10 python bench/transformer_xl.py --data-dir /work/shared/data/tinyshakespeare \
        --tag full --steps 3600 --batch 32 --seeds 0 1 2 --resume
    # the smaller model that chapter 14 shows now: 2 layers of width 64, segments of 64, 2,000 steps of 16
    OMP_NUM_THREADS=1 nice -n 10 python bench/transformer_xl.py --data-dir /work/shared/data/tinyshakespeare \
        --tag small --layers 2 --d-model 64 --context 64 --steps 2000 --batch 16 --seeds 0 1 2 --resume
    python bench/transformer_xl.py --data-dir /work/shared/data/tinyshakespeare --dry-run    # < 1 minute
    # on a GPU: the full size, six runs at a time (each its own process)
    python bench/transformer_xl.py --data-dir DATA --tag full --device cuda --jobs 6

Cost, from step times measured on the 2-core AMD EPYC VM at a load average of about 8 (CPU seconds of one process):
at the full size and batch 32, 0.38 s a step for chapter 11's model, 0.50 and 0.48 for the two no-memory models and
0.76 with the memory, 2.1 s for one step of all four; 3 seeds x 3,600 steps is about 6.3 CPU-hours (half the steps,
`--steps 1800`, about 3.2), plus about a minute of validation per model and memory length. The small model: 0.02 to
0.035 s a step, about 0.2 CPU-hours for all twelve runs.

`--target 1.6` stops every run at the first evaluation (every `--eval-every` steps, on `--eval-windows` windows)
at or below 1.6 nats/char, whichever comes first with `--steps`. Writes
`bench/results/transformer_xl-<tag>-<machine>.json` after every finished run: "runs" (model | seed) and "summary"
(mean and standard deviation over the seeds finished so far, per model and memory length).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from annotated_transformer.language_model import random_windows, corpus_loss
from annotated_transformer.model import make_language_model, count_parameters
from annotated_transformer.transformer_xl import make_transformer_xl, stream_segments, stream_loss

sys.path.insert(0, str(Path(__file__).parent))
import charlm   # noqa: E402

KINDS = ("ch11_random", "xl_nomem_random", "xl_nomem_contig", "xl_mem")


def build(kind: str, vocab: int, a, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    shape = dict(N=a.layers, d_model=a.d_model, d_ff=4 * a.d_model, h=a.heads, dropout=0.0, context=a.context)
    if kind == "ch11_random": return make_language_model(vocab, **shape).to(charlm.DEVICE)
    return make_transformer_xl(vocab, **shape, mem_len=a.context if kind == "xl_mem" else 0).to(charlm.DEVICE)


def loss_fn(kind: str, train: torch.Tensor, a):
    "One step's loss: random windows (a fresh draw from the run's generator) or the next contiguous segment."
    xs, ys = stream_segments(train, a.batch, a.context)
    def f(model, g, step, mems):
        if kind.endswith("random"):
            b = random_windows(train, a.context, a.batch, g)
            x, y = b.src, b.tgt_y
        else:
            x, y = xs[step % len(xs)], ys[step % len(xs)]
        if kind == "ch11_random": out = model(x)
        else: out, mems = model(x, mems if kind == "xl_mem" else None)
        if kind != "xl_mem": mems = None
        return F.nll_loss(model.generator(out).flatten(0, 1), y.flatten()), mems
    return f


def evaluate(kind: str, model, val: torch.Tensor, a, windows: int | None = None, mems=None) -> dict:
    "Validation nats/char: chapter 11's model window by window; an XL model at each memory length (or `mems`)."
    if kind == "ch11_random":
        loss, chars = corpus_loss(model, val if windows is None else val[:windows * a.context + 1], a.context)
        return {"0": {"loss": round(loss, 4), "chars": chars}}
    data = val if windows is None else val[:windows * a.context + 1]
    out = {}
    for m in (mems or a.eval_mems):
        loss, chars = stream_loss(model, data, a.context, 8 if windows is None else 1, m)
        out[str(m)] = {"loss": round(loss, 4), "chars": chars}
    return out


def run_one(kind: str, seed: int, vocab: int, train, val, a, work: Path) -> dict:
    model = build(kind, vocab, a, seed)
    f, ckpt, curve, done = loss_fn(kind, train, a), work / f"{kind}-seed{seed}.pt", [], 0
    seconds, step_sec = 0.0, []
    from annotated_transformer.training import noam_optimizer
    opt_sched = noam_optimizer(model, a.d_model, a.lr_factor, a.warmup)
    stops = list(range(a.eval_every, a.steps, a.eval_every)) + [a.steps] if a.target else [a.steps]
    for stop in stops:                   # train to each evaluation point (resuming from the checkpoint), then look
        r = charlm.train(model, f, stop, d_model=a.d_model, lr_factor=a.lr_factor, warmup=a.warmup, seed=seed,
                         ckpt=ckpt, save_every=a.save_every, log_every=max(1, a.steps // 8), name=f"{kind} s{seed}",
                         opt_and_sched=opt_sched)
        done, seconds = stop, r["train_seconds"]
        if r["seconds_per_step"]: step_sec.append(r["seconds_per_step"])
        if a.target:
            v = evaluate(kind, model, val, a, a.eval_windows, [0])["0"]["loss"]
            curve.append((stop, v)); print(f"{kind} s{seed}: step {stop} validation {v:.4f}", flush=True)
            if v <= a.target: break
    by_mem = evaluate(kind, model, val, a)
    print(kind, seed, {m: v["loss"] for m, v in by_mem.items()}, flush=True)
    return {"kind": kind, "seed": seed, "parameters": count_parameters(model), "steps": done,
            "train_seconds": seconds, "seconds_per_step": step_sec[-1] if step_sec else None,
            "load": charlm.load_average(), "train_curve": r["curve"], "val_curve": curve, "val_by_mem": by_mem}


def run_job(kind: str, seed: int, a, work: Path) -> dict:
    D = charlm.DATA
    return run_one(kind, seed, D["vocab"], D["train"], D["val"], a, work)


def summarise(res: charlm.Results) -> None:
    table = {}
    for kind in KINDS:
        runs = [r for r in res["runs"].values() if r["kind"] == kind]
        if not runs: continue
        mems = runs[0]["val_by_mem"].keys()
        table[kind] = {"seeds": sorted(r["seed"] for r in runs), "steps": [r["steps"] for r in runs],
                       "val_by_mem": {m: charlm.mean_sd([r["val_by_mem"][m]["loss"] for r in runs]) for m in mems}}
    res.put("summary", table, top=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--steps", type=int, default=3600, help="the budget: optimiser steps per run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr-factor", type=float, default=0.3)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--eval-mems", type=int, nargs="+", default=[0, 32, 64, 128, 256, 512])
    p.add_argument("--target", type=float, default=None, help="stop a run once validation reaches this (nats/char)")
    p.add_argument("--eval-every", type=int, default=400)
    p.add_argument("--eval-windows", type=int, default=200)
    p.add_argument("--save-every", type=int, default=200)
    charlm.add_common_args(p)
    a = p.parse_args()
    if a.dry_run:
        a.steps, a.seeds, a.layers, a.d_model, a.context, a.batch, a.tag = 6, [0, 1], 1, 32, 16, 4, "dry-run"
        a.save_every, a.warmup, a.eval_mems, a.target, a.eval_every, a.eval_windows = 2, 2, [0, 16, 32], 9.9, 3, 4
    torch.set_num_threads(1)
    res, work = charlm.open_results("transformer_xl", a)
    todo = [(kind, seed, a, work) for seed in a.seeds for kind in a.kinds       # every model of one seed first
            if not res.done(f"{kind} | seed {seed}")]
    for (kind, seed, *_), r in charlm.pool(a.jobs, run_job, todo, charlm.init_text_worker,
                                                   (a, 4000 if a.dry_run else None)):
        res.put(f"{kind} | seed {seed}", r)
        summarise(res)
    print(f"wrote {res.path}")
    for kind, row in res["summary"].items():
        print(f"{kind:16s}", "  ".join(f"mem {k}: {v['mean']:.4f} ± {v['sd']:.4f}" for k, v in row["val_by_mem"].items()))


if __name__ == "__main__":
    main()
