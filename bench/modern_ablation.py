"""From 2017 to today, one change at a time (chapter 16): the character model of chapter 11 as a pre-norm decoder,
then RMSNorm, rotary positions, SwiGLU, grouped-query attention and no biases, each added to the one before. For each
row and each seed: validation nats per character on tiny-shakespeare after the same number of steps on the same
batches; per row: parameters, training tokens per second (rounds of a few steps of every row in turn, the median, so
that a change of load touches every row alike) and the key/value cache per generated token.

Every row uses chapter 11's scaled embedding, N(0, 1/d) * sqrt(d) (`make_modern_lm(..., scaled_embeddings=True)`): the
sinusoid rows need it (an unscaled table is drowned by positions of RMS 0.7), and the rotary rows get it too so that
the only change between two rows is the one named. The report carries `"sinusoid_embeddings": "scaled"`.

Launch (--resume goes on from the checkpoints under runs/modern_ablation-<tag>/ and from the JSON):

    # the run chapter 16 shows now: a smaller model, 2,000 steps, 3 seeds a row
    OMP_NUM_THREADS=1 nice -n 10 python bench/modern_ablation.py --data-dir /work/shared/data/tinyshakespeare \
        --tag small --layers 2 --d-model 64 --context 64 --steps 2000 --save-every 200 --seeds 0 1 2 --resume
    # chapter 11's size (4 layers of width 128, windows of 128), 1,500 steps, 3 seeds a row
    OMP_NUM_THREADS=1 nice -n 10 python bench/modern_ablation.py --data-dir /work/shared/data/tinyshakespeare \
        --tag full --steps 1500 --seeds 0 1 2 --resume
    python bench/modern_ablation.py --data-dir /work/shared/data/tinyshakespeare --dry-run   # < 1 minute, end to end
    # on a GPU: the speed alone first, then five runs at a time (each its own process)
    python bench/modern_ablation.py --data-dir DATA --tag full --device cuda --speed-only
    python bench/modern_ablation.py --data-dir DATA --tag full --device cuda --jobs 5 --resume

Cost, from step times measured on the 2-core AMD EPYC VM at a load average of 8 to 12 (CPU seconds of one process,
batch 16): chapter 11's size 0.18 to 0.22 s a step (the six rows), so `--tag full` is 18 runs x 1,500 steps, about
1.5 CPU-hours plus a few minutes of validation; the small model about 0.05 s a step, 18 x 2,000 steps, about 0.5
CPU-hours. A wall-clock hour under that load gives one such process roughly half a core.

Writes `bench/results/modern_ablation-<tag>-<machine>.json` after every finished run (row x seed): "runs" holds each
run, "summary" each row's mean and standard deviation over the seeds finished so far.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from annotated_transformer.language_model import random_windows, corpus_loss
from annotated_transformer.model import count_parameters
from annotated_transformer.training import noam_optimizer
from annotated_transformer.modern import make_modern_lm

sys.path.insert(0, str(Path(__file__).parent))
import charlm   # noqa: E402


# each row adds one change to the row before it (the keyword arguments of make_modern_lm)
ROWS = [("pre-norm decoder (LayerNorm, sinusoids, ReLU, biases)", dict(norm="layer", positional="sinusoidal", ffn="relu", bias=True)),
        ("+ RMSNorm", dict(norm="rms")),
        ("+ RoPE", dict(positional="rope")),
        ("+ SwiGLU", dict(ffn="swiglu")),
        ("+ grouped-query attention (half the key/value heads)", dict(n_kv_heads=-2)),
        ("+ no biases", dict(bias=False))]


def configs(heads: int) -> list[tuple[str, dict]]:
    "The rows with their full keyword arguments (each row's changes on top of the previous row's)."
    out, kw = [], {"scaled_embeddings": True}
    for name, change in ROWS:
        kw = {**kw, **change}
        if kw.get("n_kv_heads") == -2: kw["n_kv_heads"] = heads // 2
        out.append((name, dict(kw)))
    return out


def build(kw: dict, vocab: int, a, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return make_modern_lm(vocab, N=a.layers, d_model=a.d_model, h=a.heads, context=a.context, dropout=0.0,
                          **kw).to(charlm.DEVICE)


def kv_bytes_per_token(model) -> int:
    "Keys and values kept per generated token, all layers, float32: measured on a cache after a forward pass."
    cache, t = model.new_cache(static=False), 8
    with torch.no_grad(): model(torch.zeros(1, t, dtype=torch.long, device=next(model.parameters()).device), cache)
    return sum(getattr(c["self"], kv).numel() * getattr(c["self"], kv).element_size() for c in cache for kv in "kv") // t


def window_loss(train, a):
    def loss_fn(model, g, step, state):
        b = random_windows(train, a.context, a.batch, g)
        return F.nll_loss(model.generator(model(b.src)).flatten(0, 1), b.tgt_y.flatten()), None
    return loss_fn


def speed(vocab: int, train, a) -> dict:
    "Seconds per training step of every row, interleaved; tokens per second."
    rows = configs(a.heads)
    steps = {}
    for name, kw in rows:
        model = build(kw, vocab, a, 0).train()
        opt, sched = noam_optimizer(model, a.d_model, a.lr_factor, a.warmup)
        g, loss_fn = torch.Generator().manual_seed(1), window_loss(train, a)
        def step(model=model, opt=opt, sched=sched, g=g, loss_fn=loss_fn):
            loss, _ = loss_fn(model, g, 0, None)
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step(); sched.step()
        steps[name] = step
    sec = charlm.interleaved_step_times(steps, a.speed_rounds, a.speed_steps)
    return {name: {"seconds_per_step": s, "tokens_per_second": round(a.batch * a.context / s)} for name, s in sec.items()}


def run_job(i: int, name: str, kw: dict, seed: int, a, work: Path) -> dict:
    "Train row `i` at `seed`; its validation loss and sizes."
    D = charlm.DATA
    model, train, val = build(kw, D["vocab"], a, seed), D["train"], D["val"]
    r = charlm.train(model, window_loss(train, a), a.steps, d_model=a.d_model, lr_factor=a.lr_factor,
                     warmup=a.warmup, seed=seed, ckpt=work / f"seed{seed}-row{i}.pt",
                     save_every=a.save_every, log_every=max(1, a.steps // 6), name=f"{name} s{seed}")
    val_loss, chars = corpus_loss(model, val if a.val_windows is None else val[: a.val_windows * a.context + 1], a.context)
    return {"change": name, "seed": seed, "config": kw, "parameters": count_parameters(model),
            "val_nats_per_char": round(val_loss, 4), "val_chars": chars,
            "kv_cache_bytes_per_token": kv_bytes_per_token(model), "train_seconds": r["train_seconds"],
            "seconds_per_step": r["seconds_per_step"], "load": charlm.load_average(), "curve": r["curve"]}


def summarise(res: charlm.Results, a) -> None:
    table = []
    for name, kw in configs(a.heads):
        runs = [r for r in res["runs"].values() if r["change"] == name]
        if not runs: continue
        row = {"change": name, "config": kw, "parameters": runs[0]["parameters"],
               "kv_cache_bytes_per_token": runs[0]["kv_cache_bytes_per_token"],
               "val_nats_per_char": charlm.mean_sd([r["val_nats_per_char"] for r in runs]),
               "seeds": sorted(r["seed"] for r in runs)}
        row.update(res.data.get("speed", {}).get(name, {}))
        table.append(row)
    res.put("summary", table, top=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=None)
    p.add_argument("--steps", type=int, default=1500, help="the budget: optimiser steps per run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr-factor", type=float, default=0.3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--val-windows", type=int, default=None, help="validation windows (default: the whole split)")
    p.add_argument("--speed-rounds", type=int, default=5)
    p.add_argument("--speed-steps", type=int, default=3)
    p.add_argument("--save-every", type=int, default=100)
    p.add_argument("--order", choices=("rows", "seeds"), default="rows",
                   help="rows: all seeds of a row before the next row (a stopped run leaves whole rows)")
    p.add_argument("--speed-only", action="store_true", help="measure the rows' speed (alone on the machine), then stop")
    charlm.add_common_args(p)
    a = p.parse_args()
    if a.dry_run:
        a.steps, a.seeds, a.layers, a.d_model, a.context, a.batch, a.val_windows = 4, [0, 1], 1, 32, 32, 4, 8
        a.speed_rounds, a.speed_steps, a.tag, a.save_every, a.warmup = 1, 1, "dry-run", 2, 2
    torch.set_num_threads(1)
    res, work = charlm.open_results("modern_ablation", a, sinusoid_embeddings="scaled", rotary_embeddings="scaled")
    if "speed" not in res.data:
        vocab, train, _ = charlm.shakespeare(a.data_dir)
        res.put("speed", speed(len(vocab), train.to(charlm.DEVICE), a), top=True)
        res.put("speed_load", charlm.load_average(), top=True)
        print("speed", res["speed"], flush=True)
    if a.speed_only: return
    rows = list(enumerate(configs(a.heads)))
    order = ([(seed, row) for row in rows for seed in a.seeds] if a.order == "rows" else    # every seed of a row first
             [(seed, row) for seed in a.seeds for row in rows])                             # every row of a seed first
    todo = [(i, name, kw, seed, a, work) for seed, (i, (name, kw)) in order if not res.done(f"{name} | seed {seed}")]
    for (i, name, kw, seed, *_), r in charlm.pool(a.jobs, run_job, todo, charlm.init_text_worker, (a,)):
        key = f"{name} | seed {seed}"
        res.put(key, r)
        summarise(res, a)
        print(key, r["val_nats_per_char"], flush=True)
    print(f"wrote {res.path}")
    for r in res["summary"]:
        v = r["val_nats_per_char"]
        print(f"{r['change']:55s} {r['parameters']:>9,d} params {r.get('tokens_per_second', 0):>7,d} tok/s "
              f"{v['mean']:.4f} ± {v['sd']:.4f} nats/char (n={v['n']}) {r['kv_cache_bytes_per_token']:>6,d} B/token")


if __name__ == "__main__":
    main()
