"""The copy task's loss curve in fp32, TF32, bf16 and fp16 (with a GradScaler), from the same weights and batches.

Chapter 8's `precision_run` (the package's, from appendix 9d, which also takes a device): chapter 6's copy task
(vocabulary 11, 10 tokens, N 2, d_model 64, batch 128, its recipe) trained for `--steps` optimizer steps by
`amp_train_step` in each precision, recording every step's loss per token.
Each run ends with the fp32 loss per token on 1,000 fresh sequences and the exact match of greedy decoding on them. The curves are compared with fp32's
step by step, as the mean of |loss - loss_fp32| over windows of 50 steps relative to fp32's mean in the window.
A seed draws both the weights and the batches, the same for every precision. With one seed the JSON holds
`runs` ({precision: run}); with several (`--seeds 0 1 2`) it holds `seeds` and `runs_by_seed` ({seed: {precision: run}}).

    python bench/precision_curves.py --device cuda     # prints a table, writes bench/results/precision_curves-<gpu>.json
    python bench/precision_curves.py --device cpu --seeds 0 1 2 3 4 5 6 7 8 9   # writes precision_curves-seeds-<machine>.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from unittest import mock
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug  # noqa: E402

from annotated_transformer.going_big import precision_run  # noqa: E402
from annotated_transformer.training import PRECISIONS  # noqa: E402


class RecordingScaler(torch.amp.GradScaler):
    "A GradScaler that records its scale after every update; the newest one made is `RecordingScaler.last`."
    last = None
    def __init__(self, *args, **kwargs): super().__init__(*args, **kwargs); self.scales = []; RecordingScaler.last = self
    def update(self, new_scale=None): super().update(new_scale); self.scales.append(self.get_scale())


def curve(precision: str, steps: int, device: str, seed: int = 0) -> dict:
    "Chapter 8's `precision_run` in one precision (`tf32`: fp32 tensors, TF32 matrix products), timed."
    tf32 = precision == "tf32"
    if device == "cuda": torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    RecordingScaler.last = None
    t0 = time.perf_counter()
    with mock.patch.object(torch.amp, "GradScaler", RecordingScaler):   # precision_run makes fp16's scaler: ours
        run = precision_run(None if precision in ("fp32", "tf32") else PRECISIONS[precision], seed, steps, device=device)
    scaler = RecordingScaler.last
    seconds = time.perf_counter() - t0        # training and the final evaluation
    if device == "cuda": torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    return {**run, "seconds": seconds, "final_scale": scaler.scales[-1] if scaler else None,
            "min_scale": min(scaler.scales) if scaler else None}


def window_gap(a: list[float], b: list[float], w: int = 50) -> list[float]:
    "Per window of `w` steps: mean |a - b| / mean b."
    out = []
    for i in range(0, min(len(a), len(b)) - w + 1, w):
        gap = sum(abs(x - y) for x, y in zip(a[i:i + w], b[i:i + w])) / w
        out.append(gap / (sum(b[i:i + w]) / w))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--precisions", default=None, help="default: fp32,tf32,bf16,fp16 on a GPU, fp32,bf16 on the CPU")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="each seed draws the weights and the batches")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available(): p.error("--device cuda, but no GPU is available")
    precs = (args.precisions or ("fp32,tf32,bf16,fp16" if args.device == "cuda" else "fp32,bf16")).split(",")
    by_seed = {}
    for seed in args.seeds:
        runs = by_seed[str(seed)] = {}
        for prec in precs:
            runs[prec] = curve(prec, args.steps, args.device, seed)
            r = runs[prec]
            print(f"seed {seed} {prec}: last-50 loss {sum(r['losses'][-50:]) / 50:.4g}, held out {r['held_out_loss']:.4g}, exact match {r['exact_match']:.1%}, "
                  f"{r['seconds']:.1f} s" + (f", final loss scale {r['final_scale']:.0f}" if r["final_scale"] else ""),
                  flush=True)
        ref = runs.get("fp32")
        for prec, r in runs.items():
            if ref is not None and prec != "fp32":
                gaps = window_gap(r["losses"], ref["losses"])
                r["gap_vs_fp32"] = gaps
                print(f"seed {seed} {prec} vs fp32: mean |loss gap| / loss per 50-step window: max {max(gaps):.2%}, "
                      f"last {gaps[-1]:.2%}", flush=True)
    m = machine()
    name = f"precision_curves-{'seeds-' if len(args.seeds) > 1 else ''}{slug(m, args.device)}.json"
    out = Path(args.out or Path(__file__).parent / "results" / name)
    out.parent.mkdir(parents=True, exist_ok=True)
    layout = {"runs": by_seed[str(args.seeds[0])]} if len(args.seeds) == 1 else {"seeds": args.seeds, "runs_by_seed": by_seed}
    out.write_text(json.dumps({"benchmark": "precision_curves", "device": args.device, "machine": m,
                               "steps": args.steps, "task": "copy (the command line's CopyTask)", **layout}))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
