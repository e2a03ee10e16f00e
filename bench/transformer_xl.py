"""Transformer-XL against chapter 11's character model at the same compute budget, on tiny-shakespeare.

Both models have the same width, depth, heads, feed-forward size, segment (window) length, batch and steps, the same
optimiser and schedule; they differ in what a step reads. Chapter 11's model reads random windows, each alone, with
absolute sinusoids; Transformer-XL reads consecutive segments of `batch` contiguous streams and carries a memory of
earlier states (detached) with relative positions. A third run trains Transformer-XL with no memory (relative
positions only). Validation: the whole validation text, each window alone (chapter 11's `corpus_loss`) for the
baseline; for Transformer-XL as streams with the memory carried, at several memory lengths, longer ones than it was
trained with included. Usage:

    python bench/transformer_xl.py --data-dir /path/to/tinyshakespeare [--steps 360 --batch 16 --seed 0]
    python bench/transformer_xl.py --timing-only     # seconds per step of each model, measured side by side

Writes `bench/results/transformer_xl-<machine>.json` (seed 0) or `transformer_xl-seed<N>-<machine>.json`.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from annotated_transformer.data import load_corpus
from annotated_transformer.language_model import CharVocab, random_windows, corpus_loss, generate
from annotated_transformer.model import make_language_model, count_parameters
from annotated_transformer.training import noam_optimizer
from annotated_transformer.transformer_xl import make_transformer_xl, stream_segments, stream_loss, generate_xl

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug, load   # noqa: E402

RESULTS = Path(__file__).parent / "results"


def train_one(kind: str, data: torch.Tensor, vocab: int, a) -> tuple[torch.nn.Module, dict]:
    torch.manual_seed(a.seed)
    shape = dict(N=a.layers, d_model=a.d_model, d_ff=4 * a.d_model, h=a.heads, dropout=0.0, context=a.context)
    if kind == "baseline": model = make_language_model(vocab, **shape)
    else: model = make_transformer_xl(vocab, **shape, mem_len=a.context if kind == "xl" else 0)
    opt, sched = noam_optimizer(model, a.d_model, a.lr_factor, a.warmup)
    g = torch.Generator().manual_seed(a.seed)
    xs, ys = stream_segments(data, a.batch, a.context)
    mems, curve, t0 = None, [], time.perf_counter()
    model.train()
    for step in range(a.steps):
        if kind == "baseline":
            b = random_windows(data, a.context, a.batch, g)
            x, y = b.src, b.tgt_y
            out = model(x)
        else:
            x, y = xs[step % len(xs)], ys[step % len(xs)]
            out, mems = model(x, mems)
        loss = F.nll_loss(model.generator(out).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); sched.step()
        if step % 20 == 0 or step == a.steps - 1:
            curve.append({"step": step + 1, "loss": round(loss.item(), 4)})
            print(kind, step + 1, curve[-1]["loss"], f"{time.perf_counter() - t0:.0f}s", flush=True)
    return model, {"kind": kind, "params": count_parameters(model), "train_seconds": round(time.perf_counter() - t0, 1),
                   "load_at_end": load(), "curve": curve}


def step_times(train: torch.Tensor, vocab: int, a) -> dict:
    "Median seconds per training step of each model, measured in interleaved rounds so that load from other jobs hits all alike."
    import statistics
    shape = dict(N=a.layers, d_model=a.d_model, d_ff=4 * a.d_model, h=a.heads, dropout=0.0, context=a.context)
    models = {"baseline": make_language_model(vocab, **shape), "xl": make_transformer_xl(vocab, **shape, mem_len=a.context),
              "xl_nomem": make_transformer_xl(vocab, **shape, mem_len=0)}
    xs, ys = stream_segments(train, a.batch, a.context)
    mems, times = {k: None for k in models}, {k: [] for k in models}
    for r in range(a.timing_rounds):
        for kind, model in models.items():
            x, y = xs[r], ys[r]
            t0 = time.perf_counter()
            if kind == "baseline": out = model(x)
            else: out, mems[kind] = model(x, mems[kind])
            F.nll_loss(model.generator(out).flatten(0, 1), y.flatten()).backward()
            model.zero_grad(set_to_none=True)
            if r > 1: times[kind].append(time.perf_counter() - t0)   # rounds 0-1 warm up (and fill the memory)
    return {"median_step_seconds": {k: round(statistics.median(v), 4) for k, v in times.items()},
            "rounds": a.timing_rounds, "load": load()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr-factor", type=float, default=0.2)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-mems", type=int, nargs="+", default=[0, 64, 128, 256, 512])
    p.add_argument("--sample-chars", type=int, default=600)
    p.add_argument("--timing-only", action="store_true", help="only the forward+backward time per step of each model")
    p.add_argument("--timing-rounds", type=int, default=22)
    a = p.parse_args()
    torch.set_num_threads(1)
    splits = load_corpus("tinyshakespeare", a.data_dir)
    vocab = CharVocab("".join(splits.values()))
    train, val = vocab.encode_tensor(splits["train"]), vocab.encode_tensor(splits["val"])
    m = machine()
    if a.timing_only:
        out = RESULTS / f"transformer_xl_steps-{slug(m, 'cpu')}.json"
        out.write_text(json.dumps({"machine": m, "settings": vars(a), **step_times(train, len(vocab), a)}, indent=1) + "\n")
        print(out.read_text()); return
    result = {"machine": m, "settings": vars(a), "runs": {}}
    name = RESULTS / f"transformer_xl{'' if a.seed == 0 else f'-seed{a.seed}'}-{slug(m, 'cpu')}.json"
    prompt = torch.tensor([vocab.encode("ROMEO:\n")])
    for kind in ("baseline", "xl", "xl_nomem"):
        model, run = train_one(kind, train, len(vocab), a)
        t0 = time.perf_counter()
        if kind == "baseline":
            loss, chars = corpus_loss(model, val, a.context)
            run["val"] = {"loss": loss, "chars": chars, "how": "each window alone"}
            text = generate(model, prompt, a.sample_chars, 0.8, None, torch.Generator().manual_seed(0))
        else:
            run["val_by_mem"] = {}
            for mem in a.eval_mems:
                loss, chars = stream_loss(model, val, a.context, 8, mem)
                run["val_by_mem"][str(mem)] = {"loss": loss, "chars": chars}
                print(kind, "eval mem", mem, round(loss, 4), flush=True)
            run["val"] = {**run["val_by_mem"][str(model.mem_len)], "how": f"streams, memory {model.mem_len}"}
            text = generate_xl(model, prompt, a.sample_chars, 0.8, None, torch.Generator().manual_seed(0))
        run["eval_seconds"] = round(time.perf_counter() - t0, 1)
        run["sample"] = vocab.decode(text[0])
        result["runs"][kind] = run
        print(kind, "val", run["val"], flush=True)
        RESULTS.mkdir(exist_ok=True)
        name.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {name}")


if __name__ == "__main__":
    main()
