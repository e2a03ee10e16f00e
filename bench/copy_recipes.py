"""Which copy-task recipe trains without a dip: steps to 100% exact match, the worst exact match after first reaching
99%, and the largest loss spike, for a few recipes over several seeds (chapter 6's lesson, repeated).

Each run trains the copy model (N=2, d_model=64, h=4, d_ff=256, no dropout, label smoothing 0.1, 128 sequences per
step) for a fixed number of steps with chapter 6's code (`LabelSmoothing`, `train_step`, as appendix 9c's `train_copy`
does: same seeding, same data, same evaluation sequences, so seed 0 repeats 9c's runs, and for the `chapter6` recipe
chapter 6's training, on the same machine), evaluates exact match every 25 steps on 1,000 sequences from generator
seed EVAL_SEED, which no training seed uses, and records the loss of every step. The four recipes are the two
of chapter 6 and each change alone: post-norm with the lower, earlier peak, and pre-norm with the paper's schedule.
Usage:

    python bench/copy_recipes.py                    # every recipe, seeds 0-4, one thread each
    python bench/copy_recipes.py --recipes paper chapter6 --seeds 0 1

It prints a table and writes JSON (default `bench/results/copy_recipes-<machine>.json`).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug  # noqa: E402  (the same machine description as the other benchmarks)

from annotated_transformer.embeddings import id_checks_off
from annotated_transformer.model import make_model
from annotated_transformer.training import (LabelSmoothing, copy_task_accuracy, copy_task_batches, noam_optimizer,
                                            train_step)

#: the evaluation sequences' generator seed (9c's COPY_EVAL_SEED); training seeds must differ from it
EVAL_SEED = 10_000

#: recipe -> (norm_first, lr_factor, warmup)
RECIPES = {
    "paper": (False, 1.0, 100),       # post-norm, the schedule's factor 1, a short warm-up
    "post-norm, lower lr": (False, 0.35, 50),
    "pre-norm, paper lr": (True, 1.0, 100),
    "chapter6": (True, 0.35, 50),     # pre-norm and a lower, earlier peak: the copy task's default
}


def run(norm_first: bool, lr_factor: float, warmup: int, seed: int, steps: int, eval_every: int = 25,
        embed_init: str = "normal") -> dict:
    torch.manual_seed(seed)
    model = make_model(11, 11, N=2, d_model=64, d_ff=256, h=4, dropout=0.0, norm_first=norm_first,
                       embed_init=embed_init)
    opt, sched = noam_optimizer(model, 64, lr_factor, warmup)
    crit = LabelSmoothing(11, 0, 0.1)
    data = copy_task_batches(11, 128, generator=torch.Generator().manual_seed(seed))
    if seed == EVAL_SEED: raise ValueError(f"seed {seed} draws the evaluation sequences: choose another training seed.")
    eval_gen = torch.Generator().manual_seed(EVAL_SEED)   # apart from the training data
    losses, evals = [], []
    with id_checks_off(model):
        for step in range(1, steps + 1):
            loss, n = train_step(model, [next(data)], crit, opt, sched)
            losses.append(float(loss) / n)
            if step % eval_every == 0:
                evals.append((step, copy_task_accuracy(model, 1000, generator=eval_gen)))
    first = next((s for s, a in evals if a >= 1.0), None)
    high = next((s for s, a in evals if a >= 0.99), None)            # first evaluation at 99% or more
    after = [a for s, a in evals if high is not None and s > high]
    # the largest ratio of a step's loss to the lowest loss of the 20 steps before it, after step 50
    spike = max((losses[i] / min(losses[i - 20:i]) for i in range(50, len(losses))), default=None)   # None: <= 50 steps
    return {"seed": seed, "first_100": first, "worst_after_99": min(after) if after else None,
            "largest_loss_spike": None if spike is None else round(spike, 1), "exact_match": [round(a, 4) for _, a in evals]}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--embed-init", default="normal", choices=["normal", "xavier"], help="make_model's embed_init")
    p.add_argument("--out")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = {"benchmark": "copy-task recipes: steps to 100% exact match, stability afterwards", "cpu": machine()["cpu"],
              "torch": torch.__version__, "threads": args.threads, "steps": args.steps, "eval_every": 25,
              "embed_init": args.embed_init, "eval_seed": EVAL_SEED, "recipes": {}, "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    t0 = time.perf_counter()
    for name in args.recipes:
        norm_first, factor, warmup = RECIPES[name]
        runs = []
        for seed in args.seeds:
            runs.append(run(norm_first, factor, warmup, seed, args.steps, embed_init=args.embed_init))
            print(f"{name}, seed {seed}: {runs[-1]}", flush=True)
        result["recipes"][name] = {"norm_first": norm_first, "lr_factor": factor, "warmup": warmup, "runs": runs}
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"\n| recipe | norm | lr factor | warm-up | steps to 100% (per seed) | worst exact match after first reaching 99% | "
          f"largest loss spike |\n|---|---|---:|---:|---|---|---:|")
    for name, r in result["recipes"].items():
        firsts = [x["first_100"] for x in r["runs"]]
        worst = [x["worst_after_99"] for x in r["runs"] if x["worst_after_99"] is not None]
        worst_text = f"{min(worst):.1%}" if worst else "n/a"
        print(f"| {name} | {'pre' if r['norm_first'] else 'post'} | {r['lr_factor']} | {r['warmup']} | "
              f"{', '.join(str(f) if f else 'never' for f in firsts)} | {worst_text} | "
              f"{max((x['largest_loss_spike'] for x in r['runs'] if x['largest_loss_spike'] is not None), default='-')}x |")
    suffix = "" if args.embed_init == "normal" else f"-embed-{args.embed_init}"
    out = Path(args.out or Path(__file__).parent / "results" / f"copy_recipes-{slug(machine(), 'cpu')}{suffix}.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
