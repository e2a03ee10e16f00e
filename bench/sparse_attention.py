"""Sparse attention (Child et al., 2019) on this machine: the loss of chapter 11's character model with the strided and
fixed patterns against dense causal attention at the same budget, and the time of one attention call against the
sequence length for the dense kernel, the chapter's compact implementations and FlexAttention (eager and compiled).

    python bench/sparse_attention.py --data-dir /path/to/tinyshakespeare [--steps 360 --batch 16]
    python bench/sparse_attention.py --skip-train         # timings only
    python bench/sparse_attention.py --skip-time --seed 1 # the loss runs again from another seed

Writes `bench/results/sparse_attention-<machine>.json` (seed 0) or `sparse_attention-seed<N>-<machine>.json`. Training uses the masks on the dense kernel (the same
arithmetic per step for every pattern): it measures what the pattern costs in loss, not in time.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

# compile FlexAttention cold: a fresh inductor cache, or the compile time measured would be a cache hit of an earlier run
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-"))
import torch
import torch.nn.functional as F

from annotated_transformer.data import load_corpus
from annotated_transformer.language_model import CharVocab, random_windows, corpus_loss
from annotated_transformer.model import count_parameters
from annotated_transformer.training import noam_optimizer
from annotated_transformer.sparse import (make_sparse_language_model, pattern_mask, strided_attention,
                                          fixed_attention, sparse_pairs)

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug, load   # noqa: E402

RESULTS = Path(__file__).parent / "results"


def train_one(pattern: str, train, val, vocab: int, a) -> dict:
    torch.manual_seed(a.seed)
    model = make_sparse_language_model(vocab, pattern, a.stride, a.c, N=a.layers, d_model=a.d_model,
                                       d_ff=4 * a.d_model, h=a.heads, dropout=0.0, context=a.context)
    opt, sched = noam_optimizer(model, a.d_model, a.lr_factor, a.warmup)
    g, curve, t0 = torch.Generator().manual_seed(a.seed), [], time.perf_counter()
    for step in range(a.steps):
        b = random_windows(train, a.context, a.batch, g)
        loss = F.nll_loss(model.generator(model(b.src)).flatten(0, 1), b.tgt_y.flatten())
        opt.zero_grad(set_to_none=True); loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); sched.step()
        if step % 20 == 0 or step == a.steps - 1:
            curve.append({"step": step + 1, "loss": round(loss.item(), 4)})
            print(pattern, step + 1, curve[-1]["loss"], f"{time.perf_counter() - t0:.0f}s", flush=True)
    seconds = time.perf_counter() - t0
    loss, chars = corpus_loss(model, val, a.context)
    pairs = int(pattern_mask(pattern, a.context, a.stride, a.c).sum())
    return {"params": count_parameters(model), "train_seconds": round(seconds, 1), "load_at_end": load(),
            "val": {"loss": loss, "chars": chars}, "pairs_per_window": pairs, "curve": curve}


def best_time(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    return min(times)


def timings(a) -> list[dict]:
    from torch.nn.attention.flex_attention import flex_attention, create_block_mask
    rows, compiled = [], torch.compile(flex_attention, dynamic=False)
    l, c = a.time_stride, a.c
    for n in a.lengths:
        q, k, v = torch.randn(3, 1, a.heads, n, a.d_model // a.heads).unbind(0)
        for pattern in ("strided", "fixed"):
            mask = pattern_mask(pattern, n, l, c)
            own = (lambda: strided_attention(q, k, v, l)) if pattern == "strided" else (lambda: fixed_attention(q, k, v, l, c))
            fn = {"strided": lambda b, h, i, j: ((i - j) >= 0) & (((i - j) < l) | ((i - j) % l == 0)),
                  "fixed": lambda b, h, i, j: (j <= i) & ((i // l == j // l) | (j % l >= l - c))}[pattern]
            bm = create_block_mask(fn, None, None, n, n, device="cpu")
            row = {"n": n, "pattern": pattern, "stride": l, "c": c, "pairs": int(mask.sum()),
                   "pairs_formula": sparse_pairs(pattern, n, l, c), "causal_pairs": n * (n + 1) // 2,
                   "block_mask_sparsity_percent": round(float(bm.sparsity()), 1),
                   "score_elements": {"dense": a.heads * n * n,
                                      "own": a.heads * n * ((2 * l + n // l) if pattern == "strided" else (l + c * n // l))}}
            t = {"dense_causal": best_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), a.repeat),
                 "dense_masked": best_time(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), a.repeat),
                 "own": best_time(own, a.repeat)}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t["flex_eager"] = best_time(lambda: flex_attention(q, k, v, block_mask=bm), a.repeat)
            if n in a.compile_lengths:
                t0 = time.perf_counter(); compiled(q, k, v, block_mask=bm)
                row["flex_compile_seconds"] = round(time.perf_counter() - t0, 1)
                t["flex_compiled"] = best_time(lambda: compiled(q, k, v, block_mask=bm), a.repeat)
            row["seconds"] = {key: round(val, 6) for key, val in t.items()}
            row["inductor_cache"] = os.environ["TORCHINDUCTOR_CACHE_DIR"]
            row["load"] = load()
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--steps", type=int, default=360)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--stride", type=int, default=16)
    p.add_argument("--c", type=int, default=2)
    p.add_argument("--lr-factor", type=float, default=0.2)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096])
    p.add_argument("--time-stride", type=int, default=32)
    p.add_argument("--compile-lengths", type=int, nargs="*", default=[1024])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--skip-time", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    m = machine()
    name = RESULTS / f"sparse_attention{'' if a.seed == 0 else f'-seed{a.seed}'}-{slug(m, 'cpu')}.json"
    result = json.loads(name.read_text()) if name.exists() else {}
    result.update({"machine": m, "settings": vars(a)})
    RESULTS.mkdir(exist_ok=True)
    if not a.skip_time:
        result["timings"] = timings(a)
        name.write_text(json.dumps(result, indent=1) + "\n")
    if not a.skip_train:
        splits = load_corpus("tinyshakespeare", a.data_dir)
        vocab = CharVocab("".join(splits.values()))
        train, val = vocab.encode_tensor(splits["train"]), vocab.encode_tensor(splits["val"])
        result["runs"] = {}
        for pattern in ("dense", "strided", "fixed"):
            result["runs"][pattern] = train_one(pattern, train, val, len(vocab), a)
            print(pattern, result["runs"][pattern]["val"], flush=True)
            name.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {name}")


if __name__ == "__main__":
    main()
