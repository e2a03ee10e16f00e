"""The copy task's loss curve in fp32, TF32, bf16 and fp16 (with a GradScaler), from the same weights and batches.

Chapter 6's copy task (vocabulary 11, 10 tokens, N 2, d_model 64, batch 128, the command line's recipe) trained for
`--steps` optimizer steps by the runner's `train_step` in each precision, recording every step's loss per token. Each run ends
with the exact-match accuracy of greedy decoding on 1,000 fresh sequences. The curves are compared with fp32's
step by step, as the mean of |loss - loss_fp32| over windows of 50 steps relative to fp32's mean in the window.
A seed draws both the weights and the batches, the same for every precision. With one seed the JSON holds
`runs` ({precision: run}); with several (`--seeds 0 1 2`) it holds `seeds` and `runs_by_seed` ({seed: {precision: run}}).

    python bench/precision_curves.py --device cuda     # prints a table, writes bench/results/precision_curves-<gpu>.json
    python bench/precision_curves.py --device cpu --seeds 0 1 2   # writes precision_curves-seeds-<machine>.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug  # noqa: E402

from annotated_transformer.tasks import CopyTask  # noqa: E402
from annotated_transformer.training import noam_optimizer  # noqa: E402
from annotated_transformer.run import train_step  # noqa: E402


def curve(precision: str, steps: int, device: str, seed: int = 0) -> dict:
    "Per-step losses and the final exact match of one run (`tf32`: fp32 tensors, TF32 matrix products)."
    task = CopyTask()
    tf32 = precision == "tf32"
    if device == "cuda": torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(seed)
    model = task.build_model().to(device)
    opt, sched = noam_optimizer(model, model.config["d_model"], task.lr_factor, task.warmup)
    losses, scales = [], []
    scaler = torch.amp.GradScaler(device) if precision == "fp16" else None

    crit = task.criterion().to(device)
    batches = task.batches(torch.Generator().manual_seed(seed))
    model.train()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss, n = train_step(model, [next(batches).to(device)], crit, opt, sched, scaler=scaler,
                             precision="fp32" if tf32 else precision)
        losses.append(float(loss) / n)
        if scaler is not None: scales.append(scaler.get_scale())
    seconds = time.perf_counter() - t0
    acc = task.evaluate(model, torch.Generator().manual_seed(seed + 1), device)["exact_match"]
    if device == "cuda": torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    return {"losses": losses, "exact_match": acc, "seconds": seconds,
            "final_scale": scales[-1] if scales else None, "min_scale": min(scales) if scales else None}


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
            print(f"seed {seed} {prec}: last-50 loss {sum(r['losses'][-50:]) / 50:.4f}, exact match {r['exact_match']:.1%}, "
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
