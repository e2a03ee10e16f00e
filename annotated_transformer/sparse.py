from __future__ import annotations

import math

import torch
from torch import nn, Tensor

from annotated_transformer.model import LanguageModel, make_language_model
def strided_mask(n: int, stride: int, device=None) -> Tensor:
    """Child et al.'s strided pattern, both parts merged: `(n, n)` bool, True where query i may attend key j: j <= i,
    and j is one of the last `stride` positions (i - j < stride) or a whole number of strides back."""
    i, j = torch.arange(n, device=device)[:, None], torch.arange(n, device=device)
    d = i - j                                                  # (n, n): how far back key j is
    return (d >= 0) & ((d < stride) | (d % stride == 0))

def fixed_mask(n: int, stride: int, c: int = 1, device=None) -> Tensor:
    """Child et al.'s fixed pattern, both parts merged: `(n, n)` bool: j <= i, and j is in the same block of
    `stride` positions as i, or j is one of the last `c` positions of its block (a summary every block can read)."""
    i, j = torch.arange(n, device=device)[:, None], torch.arange(n, device=device)
    same_block = i // stride == j // stride
    summary = j % stride >= stride - c
    return (j <= i) & (same_block | summary)
def sparse_pairs(pattern: str, n: int, stride: int, c: int = 1) -> int:
    """The number of (query, key) pairs the pattern attends, by formula, for `n` a multiple of `stride` (k blocks):
    strided: sum over i of min(i + 1, stride) + floor(i / stride); fixed: k blocks of stride(stride + 1)/2 pairs, plus
    c summary keys of each earlier block for every query."""
    if n % stride: raise ValueError(f"n={n} must be a multiple of stride={stride}.")
    k, l = n // stride, stride
    if pattern == "strided": return l * (l + 1) // 2 + (n - l) * l + l * k * (k - 1) // 2
    if pattern == "fixed": return k * l * (l + 1) // 2 + c * l * k * (k - 1) // 2
    raise ValueError(f"pattern must be 'strided' or 'fixed', got {pattern!r}.")
def joint_softmax(parts: list[tuple[Tensor, Tensor]]) -> list[Tensor]:
    """One softmax over several groups of keys, as if they were side by side: each part is (scores, allowed), both
    `(..., q, k_p)`; returns each part's weights. Every query must be allowed at least one key in some part."""
    scores = torch.cat([s.masked_fill(~ok, float("-inf")) for s, ok in parts], -1)
    return list(scores.softmax(-1).split([s.size(-1) for s, _ in parts], -1))

def strided_attention(q: Tensor, k: Tensor, v: Tensor, stride: int) -> Tensor:
    """Attention under `strided_mask` without an (n, n) matrix: `(b, h, n, d)`, n a multiple of `stride` = l.
    Local part: each block of l queries reads its own block and the one before (2l keys, distances 0 .. l-1).
    Strided part: the positions with the same remainder mod l form l sequences of n/l, read under a causal mask
    that keeps only earlier ones (distances l, 2l, ...). Score memory: n(2l + n/l) instead of n^2."""
    b, h, n, d = q.shape
    l, nb, dev = stride, n // stride, q.device
    qb, kb, vb = (t.view(b, h, nb, l, d) for t in (q / math.sqrt(d), k, v))            # (b, h, nb, l, d)
    before = lambda t: torch.cat([torch.zeros_like(t[:, :, :1]), t[:, :, :-1]], 2)     # block m-1 (zeros for m=0)
    k2, v2 = torch.cat([before(kb), kb], 3), torch.cat([before(vb), vb], 3)           # (b, h, nb, 2l, d)
    p, t = torch.arange(l, device=dev)[:, None], torch.arange(2 * l, device=dev)
    back = l + p - t                                                                 # (l, 2l): i - j
    has_before = torch.arange(nb, device=dev)[:, None, None] > 0
    local_ok = (back >= 0) & (back < l) & (has_before | (t >= l))                     # (nb, l, 2l)
    qs, ks, vs = (x.transpose(2, 3) for x in (qb, kb, vb))                             # (b, h, l, nb, d): by remainder
    far = (qs @ ks.transpose(-2, -1)).transpose(2, 3)                                # (b, h, nb, l, nb): [m, p, m']
    far_ok = torch.ones(nb, nb, dtype=torch.bool, device=dev).tril(-1)[:, None]        # m' < m: (nb, 1, nb)
    w_near, w_far = joint_softmax([(qb @ k2.transpose(-2, -1), local_ok), (far, far_ok)])
    out = w_near @ v2 + (w_far.transpose(2, 3) @ vs).transpose(2, 3)                  # (b, h, nb, l, d)
    return out.reshape(b, h, n, d)

def fixed_attention(q: Tensor, k: Tensor, v: Tensor, stride: int, c: int = 1) -> Tensor:
    """Attention under `fixed_mask` without an (n, n) matrix: `(b, h, n, d)`, n a multiple of `stride` = l.
    Each block of l queries reads its own block (causal) and the c summary keys of every earlier block, gathered
    into one short sequence of (n/l) c keys. Score memory: n(l + c n/l) instead of n^2."""
    b, h, n, d = q.shape
    l, nb, dev = stride, n // stride, q.device
    qb, kb, vb = (t.view(b, h, nb, l, d) for t in (q / math.sqrt(d), k, v))            # (b, h, nb, l, d)
    ksum, vsum = (t[:, :, :, l - c:].reshape(b, h, 1, nb * c, d) for t in (kb, vb))    # (b, h, 1, nb c, d)
    own_ok = torch.ones(l, l, dtype=torch.bool, device=dev).tril()                    # causal inside the block
    sum_ok = (torch.arange(nb, device=dev)[:, None] > torch.arange(nb * c, device=dev) // c)[:, None]   # (nb, 1, nb c)
    w_own, w_sum = joint_softmax([(qb @ kb.transpose(-2, -1), own_ok), (qb @ ksum.transpose(-2, -1), sum_ok)])
    return (w_own @ vb + w_sum @ vsum).reshape(b, h, n, d)
def pattern_mask(pattern: str, n: int, stride: int, c: int = 1, device=None) -> Tensor:
    "The `(n, n)` mask of `pattern`: `'dense'` (causal), `'strided'` or `'fixed'`."
    if pattern == "dense": return torch.ones(n, n, dtype=torch.bool, device=device).tril()
    if pattern == "strided": return strided_mask(n, stride, device)
    if pattern == "fixed": return fixed_mask(n, stride, c, device)
    raise ValueError(f"pattern must be 'dense', 'strided' or 'fixed', got {pattern!r}.")

class SparseLanguageModel(LanguageModel):
    """Chapter 11's language model whose layers attend under a sparse pattern (`pattern_mask`) instead of the whole
    causal triangle: `(batch, t)` ids -> `(batch, t, d_model)`. It reads whole windows (no key/value cache)."""
    def forward(self, x: Tensor, cache: list[dict] | None = None) -> Tensor:
        if cache is not None:
            raise ValueError("SparseLanguageModel reads whole windows; call it without a cache (generate(..., use_cache=False)).")
        cfg = self.config
        mask = pattern_mask(cfg["pattern"], x.size(1), cfg["stride"], cfg["c"], x.device)[None]   # (1, t, t)
        return self.decoder(self.embed(x), mask)

def make_sparse_language_model(vocab: int, pattern: str = "strided", stride: int = 16, c: int = 1,
                               **kwargs) -> SparseLanguageModel:
    "`make_language_model(vocab, **kwargs)` with the same weights, attending under `pattern` (stride, c)."
    pattern_mask(pattern, 1, stride, c)                                   # refuses an unknown pattern now
    lm = make_language_model(vocab, **kwargs)
    model = SparseLanguageModel(lm.embed, lm.decoder, lm.generator)
    model.config = {**lm.config, "kind": "sparse_language_model", "pattern": pattern, "stride": stride, "c": c}
    return model
