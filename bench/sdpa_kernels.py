"""Which kernel `F.scaled_dot_product_attention` runs for each kind of mask, and what each costs (GPU).

The attention of the paper's base model (8 heads, d_k 64), forward + backward, for the masks a Transformer uses:
no mask, `is_causal=True`, and the boolean masks `MultiHeadedAttention` passes (padding `(b, 1, 1, t)`, causal
`(1, 1, t, t)`, padding & causal `(b, 1, t, t)`). For each mask and dtype it records

* the kernel torch picks by itself, read from the names of the GPU kernels that `torch.profiler` sees
  (flash, memory-efficient, cuDNN or the math fallback: a matrix product, a softmax and another product);
* which backends accept the case at all, each tried alone under `torch.nn.attention.sdpa_kernel`;
* the median forward + backward time (CUDA events), and the time of the explicit formula for comparison.

    python bench/sdpa_kernels.py                 # prints a table, writes bench/results/sdpa_kernels-<gpu>.json
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug  # noqa: E402

from annotated_transformer.attention import attention  # noqa: E402

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def masks(b: int, t: int, device) -> dict:
    "name -> (attn_mask, is_causal); bool masks are True where a query may attend, as in the package."
    pad = torch.ones(b, t, dtype=torch.bool, device=device)
    pad[: b // 2, t - t // 4:] = False                                # half the rows end with a quarter of padding
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril()
    return {"none": (None, False),
            "is_causal=True": (None, True),
            "padding (b,1,1,t)": (pad[:, None, None, :], False),
            "causal (1,1,t,t)": (causal[None, None], False),
            "padding & causal (b,1,t,t)": ((pad[:, None, :] & causal)[:, None], False)}


def kernel_family(names: list[str]) -> str:
    "The attention family from the GPU kernel names of one call."
    low = " ".join(names).lower()
    if "cudnn" in low: return "cudnn"           # first: cuDNN's own attention kernels have "flash" in their names
    if "flash" in low: return "flash"
    if "fmha" in low or "mem_eff" in low or "efficient" in low: return "efficient"
    return "math"


def fwd_bwd(q, k, v, mask, causal, explicit: bool = False):
    "One forward + backward pass of attention."
    if explicit:
        m = mask if not causal else torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        out = attention(q, k, v, m)[0]
    else:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    out.backward(torch.ones_like(out))


def time_ms(fn, reps: int = 20) -> float:
    "Median milliseconds of `fn()` between CUDA events, after 3 warm-up calls."
    for _ in range(3): fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def probe(b: int, h: int, t: int, d: int, dtype: torch.dtype) -> list[dict]:
    dev = "cuda"
    rows = []
    for name, (mask, causal) in masks(b, t, dev).items():
        q, k, v = (torch.randn(b, h, t, d, device=dev, dtype=dtype, requires_grad=True) for _ in range(3))
        run = lambda: fwd_bwd(q, k, v, mask, causal)
        run(); torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run(); torch.cuda.synchronize()
        kernels = [e.key for e in prof.key_averages() if str(e.device_type).endswith("CUDA")]
        chosen = kernel_family(kernels)
        accepts = {}
        for bname, backend in BACKENDS.items():
            try:
                with sdpa_kernel([backend]): run()
                torch.cuda.synchronize(); accepts[bname] = True
            except RuntimeError:
                accepts[bname] = False
        ms = time_ms(run)
        try:
            ms_explicit = time_ms(lambda: fwd_bwd(q, k, v, mask, causal, explicit=True))
        except torch.OutOfMemoryError:
            ms_explicit = None
        torch.cuda.empty_cache()
        rows.append(dict(mask=name, t=t, chosen=chosen, accepts=accepts, ms=ms, ms_explicit=ms_explicit,
                         kernels=sorted({k for k in kernels if "attention" in k.lower() or "fmha" in k.lower()
                                         or "flash" in k.lower()})[:6]))
        print(f"  {name:28s} t={t:5d}: {chosen:9s} {ms:8.3f} ms (explicit "
              f"{'OOM' if ms_explicit is None else f'{ms_explicit:.3f} ms'}); accepts "
              + ", ".join(k for k, ok in accepts.items() if ok), flush=True)
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lengths", default="128,1024")
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if not torch.cuda.is_available(): p.error("this benchmark needs a GPU (torch.cuda.is_available() is False)")
    h, d = 8, 64
    res = {}
    for dt in args.dtypes.split(","):
        res[dt] = []
        for t in (int(x) for x in args.lengths.split(",")):
            print(f"{dt}, batch {args.batch}, {h} heads, d_k {d}, t {t}:", flush=True)
            res[dt] += probe(args.batch, h, t, d, DTYPES[dt])
    m = machine()
    out = Path(args.out or Path(__file__).parent / "results" / f"sdpa_kernels-{slug(m, 'cuda')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"benchmark": "sdpa_kernels", "machine": m, "batch": args.batch, "heads": h, "d_k": d,
                               "results": res}, indent=1))
    print(f"\n{'dtype':5s} {'t':>5s} {'mask':28s} {'kernel':9s} {'fwd+bwd ms':>10s} {'explicit ms':>11s}")
    for dt, rows in res.items():
        for r in rows:
            e = "OOM" if r["ms_explicit"] is None else f"{r['ms_explicit']:.3f}"
            print(f"{dt:5s} {r['t']:5d} {r['mask']:28s} {r['chosen']:9s} {r['ms']:10.3f} {e:>11s}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
