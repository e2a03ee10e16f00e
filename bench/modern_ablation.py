"""From 2017 to today, one change at a time (chapter 16): the character model of chapter 11 as a pre-norm decoder,
then RMSNorm, rotary positions, SwiGLU, grouped-query attention and no biases, each added to the one before. For each
row: parameters, training tokens per second, validation nats per character on tiny-shakespeare after the same number
of steps on the same batches, and the key/value cache per generated token.

    python bench/modern_ablation.py --data-dir /path/to/tinyshakespeare [--steps 360 --batch 16 --seed 0]

Writes `bench/results/modern_ablation-<machine>.json`. Every row trains from the same seed on the same windows; the
speed is measured apart, in interleaved rounds of a few steps per row (the median), so that a change of load on the
machine touches every row alike.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from annotated_transformer.data import load_corpus
from annotated_transformer.language_model import CharVocab, random_windows, corpus_loss
from annotated_transformer.model import count_parameters
from annotated_transformer.training import noam_optimizer
from annotated_transformer.modern import make_modern_lm

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug, load   # noqa: E402

RESULTS = Path(__file__).parent / "results"

# each row adds one change to the row before it (the keyword arguments of make_modern_lm)
ROWS = [("pre-norm decoder (LayerNorm, sinusoids, ReLU, biases)", dict(norm="layer", positional="sinusoidal", ffn="relu", bias=True)),
        ("+ RMSNorm", dict(norm="rms")),
        ("+ RoPE", dict(positional="rope")),
        ("+ SwiGLU", dict(ffn="swiglu")),
        ("+ grouped-query attention (2 key/value heads for 4)", dict(n_kv_heads=2)),
        ("+ no biases", dict(bias=False))]


def configs() -> list[tuple[str, dict]]:
    "The rows with their full keyword arguments (each row's changes on top of the previous row's)."
    out, kw = [], {}
    for name, change in ROWS:
        kw = {**kw, **change}
        out.append((name, dict(kw)))
    return out


def build(kw: dict, vocab: int, a) -> torch.nn.Module:
    torch.manual_seed(a.seed)
    return make_modern_lm(vocab, N=a.layers, d_model=a.d_model, h=a.heads, context=a.context, dropout=0.0, **kw)


def step_fn(model, a):
    "One optimiser step on a window batch, as the training runs take it."
    opt, sched = noam_optimizer(model, a.d_model, a.lr_factor, a.warmup)
    def step(b):
        loss = F.nll_loss(model.generator(model(b.src)).flatten(0, 1), b.tgt_y.flatten())
        opt.zero_grad(set_to_none=True); loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); sched.step()
        return loss
    return step


def kv_bytes_per_token(model, a) -> int:
    "Keys and values kept per generated token, all layers, float32: measured on a cache after a forward pass."
    cache, t = model.new_cache(static=False), 8
    with torch.no_grad(): model(torch.zeros(1, t, dtype=torch.long), cache)
    return sum(getattr(c["self"], kv).numel() * getattr(c["self"], kv).element_size() for c in cache for kv in "kv") // t


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", required=True)
    p.add_argument("--steps", type=int, default=360)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr-factor", type=float, default=0.3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--speed-rounds", type=int, default=5)
    p.add_argument("--speed-steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    splits = load_corpus("tinyshakespeare", a.data_dir)
    vocab = CharVocab("".join(splits.values()))
    train, val = vocab.encode_tensor(splits["train"]), vocab.encode_tensor(splits["val"])
    rows = []
    for name, kw in configs():
        model = build(kw, len(vocab), a)
        step, g, t0 = step_fn(model, a), torch.Generator().manual_seed(a.seed), time.perf_counter()
        model.train()
        for i in range(a.steps):
            loss = step(random_windows(train, a.context, a.batch, g))
            if i % 60 == 0 or i == a.steps - 1: print(f"{name}: step {i + 1} loss {loss.item():.4f} ({time.perf_counter() - t0:.0f} s)", flush=True)
        model.eval()
        val_loss, chars = corpus_loss(model, val, a.context)
        rows.append({"change": name, "config": kw, "parameters": count_parameters(model),
                     "val_nats_per_char": round(val_loss, 4), "val_chars": chars,
                     "kv_cache_bytes_per_token": kv_bytes_per_token(model, a),
                     "train_seconds": round(time.perf_counter() - t0, 1)})
        print(rows[-1], flush=True)
    # speed: interleaved rounds, a few steps of every row per round, median seconds per step
    models = [build(kw, len(vocab), a).train() for _, kw in configs()]
    steps = [step_fn(m, a) for m in models]
    g, per_step = torch.Generator().manual_seed(a.seed + 1), [[] for _ in models]
    batches = [random_windows(train, a.context, a.batch, g) for _ in range(a.speed_steps)]
    for s in steps: s(batches[0])                                       # warm up
    for _ in range(a.speed_rounds):
        for i, s in enumerate(steps):
            t0 = time.perf_counter()
            for b in batches: s(b)
            per_step[i].append((time.perf_counter() - t0) / len(batches))
    for row, times in zip(rows, per_step):
        row["seconds_per_step"] = round(statistics.median(times), 4)
        row["tokens_per_second"] = round(a.batch * a.context / statistics.median(times))
    out = Path(a.out) if a.out else RESULTS / f"modern_ablation-{slug(machine(), 'cpu')}.json"
    report = {"machine": machine(), "load_at_end": load(), "torch": torch.__version__, "threads": a.threads,
              "settings": {k: v for k, v in vars(a).items() if k not in ("data_dir", "out")}, "rows": rows}
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")
    for r in rows:
        print(f"{r['change']:58s} {r['parameters']:>9,d} params {r['tokens_per_second']:>7,d} tok/s "
              f"{r['val_nats_per_char']:.4f} nats/char {r['kv_cache_bytes_per_token']:>6,d} B/token")


if __name__ == "__main__":
    main()
