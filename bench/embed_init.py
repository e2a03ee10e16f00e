"""The embedding initialisation on Multi30k: `make_model(embed_init="normal")` (the authors', the default) against
`"xavier"` (the Harvard notebook's), validation loss per token (teacher forcing) at equal steps, same data order.

A reduced model (N=2, d_model=128, d_ff=512, h=4, dropout 0.1, the small preset's 8,000-token joint BPE vocabulary,
tied embeddings, 2,048-token batches, warm-up 400) so that it runs on a CPU in minutes. Usage:

    python bench/embed_init.py --steps 1500 --seeds 0

It prints a table and writes JSON (default `bench/results/embed_init-<machine>.json`). Needs the Multi30k files in the
download cache (`annotated_transformer.data.cached_multi30k`).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine, slug  # noqa: E402  (the same machine description as the other benchmarks)

from annotated_transformer.data import PAD, collate, encode_pairs
from annotated_transformer.embeddings import id_checks_off
from annotated_transformer.training import Batch, noam_optimizer, train_step
from annotated_transformer.translation import Multi30kTask


def run(embed_init: str, seed: int, steps: int, every: int) -> dict:
    torch.manual_seed(seed)
    task = Multi30kTask(preset="small", model=dict(N=2, d_model=128, d_ff=512, h=4, dropout=0.1, embed_init=embed_init),
                        max_tokens=2048, warmup=400, max_steps=steps)
    task.prepare()
    model = task.build_model()
    table = model.src_embed.embed
    pe_rms = float(model.src_embed.position.pe[0, :100].pow(2).mean().sqrt())
    with torch.no_grad(): token_rms = float(table(torch.arange(4, table.vocab)[None]).pow(2).mean().sqrt())
    opt, sched = noam_optimizer(model, 128, task.lr_factor, task.warmup)
    crit = task.criterion()
    batches = task.batches(torch.Generator().manual_seed(seed))
    val = encode_pairs(task.tokenizer, task.eval_pairs)
    val_batches = [Batch(*collate(val[i:i + 100]), PAD) for i in range(0, len(val), 100)]

    @torch.no_grad()
    def val_loss() -> float:
        model.eval()
        total = tokens = 0
        for b in val_batches:
            logp = model.generator(model(b.src, b.tgt, b.src_mask, b.tgt_mask))
            total += float(F.nll_loss(logp.flatten(0, 1), b.tgt_y.flatten(), ignore_index=PAD, reduction="sum"))
            tokens += b.ntokens
        model.train()
        return total / tokens

    curve, t0 = [], time.perf_counter()
    with id_checks_off(model):
        for step in range(1, steps + 1):
            train_step(model, [next(batches)], crit, opt, sched)
            if step % every == 0:
                curve.append((step, round(val_loss(), 4)))
                print(f"{embed_init}, seed {seed}: step {step}, validation loss {curve[-1][1]}", flush=True)
    return {"embed_init": embed_init, "seed": seed, "scaled_token_rms": round(token_rms, 4),
            "positional_rms": round(pe_rms, 4), "val_loss": curve, "seconds": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    runs = [run(init, seed, args.steps, args.every) for seed in args.seeds for init in ("normal", "xavier")]
    result = {"benchmark": "embedding initialisation on Multi30k: validation loss per token at equal steps",
              "cpu": machine()["cpu"], "torch": torch.__version__, "threads": args.threads, "runs": runs,
              "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}
    steps = [s for s, _ in runs[0]["val_loss"]]
    print("\n| init | seed | scaled token RMS / positional RMS | " + " | ".join(f"step {s}" for s in steps) + " |")
    print("|---|---:|---:|" + "---:|" * len(steps))
    for r in runs:
        print(f"| {r['embed_init']} | {r['seed']} | {r['scaled_token_rms'] / r['positional_rms']:.2f} | "
              + " | ".join(f"{v:.3f}" for _, v in r["val_loss"]) + " |")
    out = Path(args.out or Path(__file__).parent / "results" / f"embed_init-{slug(machine(), 'cpu')}.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
