"""A bag-of-words baseline for chapter 10's table: unigram and bigram features of a review, weighted as present/absent
(`binary`) or by TF-IDF, and a logistic regression with an L2 penalty, fitted in plain torch by full-batch L-BFGS from
zero weights. The fit is a convex problem solved from a fixed start, so it has no random element: one run.

The training and validation reviews are those of the imdb task's `small` preset (`ImdbTask.split`, validation = the
highest ids of each label); the features' vocabulary is learned from the training reviews alone; the weighting and the penalty
are chosen on validation; the test split is read once, by the chosen model.

    python bench/imdb_bow.py --data-dir /path/to/imdb

Writes `bench/results/imdb_bow-<machine>.json`. With `--cut`, every review (training, validation, test) is first cut
as the shipped classifier cuts it (its tokenizer, `max_len` and `keep`; the text of the subwords kept), and the
result goes to `imdb_bow_cut-<machine>.json`: what the linear model loses by reading only what the Transformer reads."""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug   # noqa: E402

from annotated_transformer.classification import ImdbTask, clean_review, truncate_ids   # noqa: E402
from annotated_transformer.data import load_imdb   # noqa: E402

WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?|[!?]")   # words (with "n't", "'s"), and ! and ?


def ngrams(text: str) -> list[str]:
    "The unigrams and bigrams of a review, after the chapter's cleaning (HTML line breaks removed, lowercased)."
    w = WORD.findall(clean_review(text))
    return w + [a + " " + b for a, b in zip(w, w[1:])]


def vocabulary(docs: list[list[str]], min_df: int) -> tuple[dict[str, int], torch.Tensor]:
    "Features seen in at least `min_df` training reviews, and their document frequencies."
    df = Counter(g for d in docs for g in set(d))
    kept = sorted(g for g, c in df.items() if c >= min_df)
    return {g: i for i, g in enumerate(kept)}, torch.tensor([df[g] for g in kept], dtype=torch.float64)


def cut_like_shipped(texts: list[str]) -> tuple[list[str], float]:
    """`texts` cut to the subwords the shipped classifier keeps (`truncate_ids` on the subwords' positions; the text of
    each kept stretch, from its subwords' offsets), and the share of subwords dropped."""
    from annotated_transformer.run import load_pretrained
    _, task = load_pretrained("imdb")
    clean = [clean_review(t, task.lowercase) for t in texts]
    out, n_all, n_cut = [], 0, 0
    for t, e in zip(clean, task.tokenizer.encode_batch(clean, add_special_tokens=False)):
        n = len(e.offsets); n_all += n
        kept = truncate_ids(list(range(n)), task.max_len - 1, task.keep)   # the positions the classifier reads
        n_cut += n - len(kept)
        if len(kept) == n: out.append(t); continue
        stretches = [[kept[0]]]
        for i in kept[1:]:
            if i == stretches[-1][-1] + 1: stretches[-1].append(i)
            else: stretches.append([i])
        out.append(" ".join(t[e.offsets[r[0]][0]:e.offsets[r[-1]][1]] for r in stretches))
    return out, n_cut / n_all


def features(docs: list[list[str]], vocab: dict[str, int], idf: torch.Tensor | None) -> torch.Tensor:
    """Sparse `(len(docs), len(vocab))` rows, each of unit L2 norm: 1 for a feature present (`idf` None), else
    (1 + log count) * idf. Features outside the vocabulary are dropped."""
    rows, cols, vals = [], [], []
    for r, d in enumerate(docs):
        counts = Counter(vocab[g] for g in d if g in vocab)
        rows += [r] * len(counts); cols += list(counts); vals += list(counts.values())
    v = torch.tensor(vals, dtype=torch.float64)
    c = torch.tensor(cols, dtype=torch.long)
    v = torch.ones_like(v) if idf is None else (1 + v.log()) * idf[c]
    r = torch.tensor(rows, dtype=torch.long)
    norm = torch.zeros(len(docs), dtype=torch.float64).index_add_(0, r, v * v).sqrt().clamp(min=1e-12)
    return torch.sparse_coo_tensor(torch.stack([r, c]), v / norm[r], (len(docs), len(vocab)), is_coalesced=False).coalesce()


def fit(X: torch.Tensor, XT: torch.Tensor, y: torch.Tensor, lam: float, max_iter: int = 300) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Logistic regression: minimise mean log-loss + lam/2 |w|^2 (bias unpenalised) by L-BFGS from zeros. `XT` is X
    transposed (sparse), so the gradient X^T (p - y) / n is one sparse product."""
    w = torch.zeros(X.shape[1] + 1, dtype=torch.float64, requires_grad=True)      # the weights, then the bias
    opt = torch.optim.LBFGS([w], lr=1, max_iter=max_iter, history_size=20, tolerance_grad=1e-7,
                            tolerance_change=1e-10, line_search_fn="strong_wolfe")
    def closure():
        with torch.no_grad():
            v = w[:-1]
            z = (X @ v.unsqueeze(1)).squeeze(1) + w[-1]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(z, y) + lam / 2 * v.dot(v)
            r = (torch.sigmoid(z) - y) / len(y)
            w.grad = torch.cat([(XT @ r.unsqueeze(1)).squeeze(1) + lam * v, r.sum().reshape(1)])
        return loss
    opt.step(closure)
    w = w.detach()
    return w[:-1], w[-1], opt.state[opt._params[0]]["n_iter"]


def accuracy(X: torch.Tensor, y: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> float:
    return float((((X @ w.unsqueeze(1)).squeeze(1) + b > 0).double() == y).double().mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--min-df", type=int, default=2)
    p.add_argument("--lams", type=float, nargs="+", default=[1e-4, 3e-5, 1e-5, 3e-6, 1e-6, 3e-7, 1e-7])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--weightings", nargs="+", default=["binary", "tfidf"])
    p.add_argument("--cut", action="store_true", help="cut every review as the shipped classifier does")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    warnings.filterwarnings("ignore", message="Sparse (CSR tensor support is in beta|invariant checks)")
    m = machine()
    out = Path(__file__).parent / "results" / f"imdb_bow{'_cut' if a.cut else ''}-{slug(m, 'cpu')}.json"
    t0 = time.perf_counter()
    task = ImdbTask(preset="small", data_dir=a.data_dir)
    train, val = task.split()
    test = load_imdb("test", a.data_dir)                        # read once below, by the chosen model
    dropped = {}
    if a.cut:
        for name, rows in (("train", train), ("val", val), ("test", test)):
            texts, dropped[name] = cut_like_shipped([t for t, _ in rows])
            rows[:] = [(t, l) for t, (_, l) in zip(texts, rows)]
    tr_docs, va_docs = [ngrams(t) for t, _ in train], [ngrams(t) for t, _ in val]
    y_tr = torch.tensor([l for _, l in train], dtype=torch.float64)
    y_va = torch.tensor([l for _, l in val], dtype=torch.float64)
    vocab, df = vocabulary(tr_docs, a.min_df)
    n_uni = sum(" " not in g for g in vocab)
    idf = torch.log((1 + len(tr_docs)) / (1 + df)) + 1
    print(f"{len(train)} training, {len(val)} validation reviews; {len(vocab):,} features ({n_uni:,} unigrams)", flush=True)
    grid, fits = [], {}
    for weighting in a.weightings:
        X_tr = features(tr_docs, vocab, None if weighting == "binary" else idf)
        XT, X_tr = X_tr.t().coalesce().to_sparse_csr(), X_tr.to_sparse_csr()
        X_va = features(va_docs, vocab, None if weighting == "binary" else idf).to_sparse_csr()
        for lam in a.lams:
            t1 = time.perf_counter()
            w, b, iters = fit(X_tr, XT, y_tr, lam)
            row = {"weighting": weighting, "lam": lam, "val_accuracy": accuracy(X_va, y_va, w, b),
                   "train_accuracy": accuracy(X_tr, y_tr, w, b), "lbfgs_iterations": int(iters),
                   "seconds": round(time.perf_counter() - t1, 1)}
            grid.append(row); fits[(weighting, lam)] = (w, b)
            print(row, flush=True)
    best = max(grid, key=lambda r: r["val_accuracy"])          # chosen on validation alone
    X_te = features([ngrams(t) for t, _ in test], vocab, None if best["weighting"] == "binary" else idf).to_sparse_csr()
    y_te = torch.tensor([l for _, l in test], dtype=torch.float64)
    w, b = fits[(best["weighting"], best["lam"])]
    result = {"machine": m, "features": len(vocab), "unigrams": n_uni, "min_df": a.min_df, "train_reviews": len(train),
              "val_reviews": len(val), "grid": grid, "chosen": {k: best[k] for k in ("weighting", "lam", "val_accuracy")},
              "test": {"accuracy": accuracy(X_te, y_te, w, b), "n": len(test)}, "seeds": "none: a convex fit from zeros",
              "wall_seconds": round(time.perf_counter() - t0, 1)}
    if a.cut: result["cut"] = {"subwords_dropped": dropped, "weightings": a.weightings}
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(result["chosen"], result["test"], f"wrote {out}")


if __name__ == "__main__":
    main()
