"""Tune beam search's length penalty on Multi30k validation, then score test2016 with the chosen value.

    python bench/length_penalty.py                                   # the shipped pretrained/multi30k-small
    python bench/length_penalty.py --checkpoint runs/m30k --alphas 0 0.6 1 1.5 2

For every `alpha` (GNMT's length penalty, chapter 7) it decodes the 1,014 validation sentences with a beam of
`--beam` and records sacreBLEU with its parts (n-gram precisions, brevity penalty, lengths); greedy decoding is the
reference point. The alpha with the best validation BLEU is chosen, and only then is test2016 decoded: greedy, with
the default alpha 0.6, and with the chosen alpha. The test translations are stored sentence by sentence so that
chapter 9 can score them by source length. The JSON (default `bench/results/length_penalty-<machine>.json`) names the
machine; the decoding times in it were measured on a shared machine and are only indicative.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import load, machine, slug  # noqa: E402  (the same machine description as the other benchmarks)

from annotated_transformer.checkpoint import load_config, resolve_checkpoint  # noqa: E402
from annotated_transformer.data import load_multi30k, sha256_file  # noqa: E402
from annotated_transformer.translation import bleu, load_translator, translate  # noqa: E402

DEFAULT_ALPHA = 0.6   # `translate`'s default, the value of Wu et al. (2016) that chapter 7 uses


def score(model, tok, pairs, beam: int, alpha: float) -> tuple[dict, list[str]]:
    "sacreBLEU of `model` on `pairs` (greedy when `beam` is 1), with the decoding time; and the translations."
    t0 = time.perf_counter()
    hyps = translate(model, tok, [p[0] for p in pairs], beam=beam, length_penalty=alpha, device="cpu")
    r = bleu(hyps, [p[1] for p in pairs])
    return {**r, "beam": beam, "alpha": alpha if beam > 1 else None, "n": len(pairs),
            "decode_seconds": round(time.perf_counter() - t0, 1), "load": load()}, hyps


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default="pretrained/multi30k-small", help="checkpoint folder (default: the shipped model)")
    p.add_argument("--data-dir", help="Multi30k folder (default: the download cache)")
    p.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.6, 1.0, 1.5, 2.0], help="length penalties to try on val")
    p.add_argument("--beam", type=int, default=4, help="beam size (default 4)")
    p.add_argument("--resume", action="store_true", help="keep the validation results already in the JSON (same checkpoint, beam and alphas)")
    p.add_argument("--limit", type=int, help="only the first N sentences of each split (a quick check of the script)")
    p.add_argument("--out", help="JSON file (default: bench/results/length_penalty-<machine>.json)")
    args = p.parse_args(argv)
    folder = resolve_checkpoint(args.checkpoint)
    model, tok = load_translator(folder, "cpu")
    m = machine()
    out = Path(args.out or Path(__file__).parent / "results" / f"length_penalty-{slug(m, 'cpu')}.json")
    res = {"benchmark": "Multi30k de->en: beam-search length penalty tuned on val, then test2016",
           "machine": m, "checkpoint": str(args.checkpoint), "checkpoint_config": load_config(folder),
           "tokenizer_sha256": sha256_file(folder / "tokenizer.json"), "beam": args.beam,
           "default_alpha": DEFAULT_ALPHA, "val": [], "test2016": {}}

    def save():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    done = {}
    if args.resume and out.is_file():     # a run cut short: its finished validation passes are reused
        old = json.loads(out.read_text(encoding="utf-8"))
        if (old["checkpoint"], old["beam"], old["tokenizer_sha256"]) == (res["checkpoint"], res["beam"], res["tokenizer_sha256"]):
            done = {(r["beam"], r["alpha"] or 0.0): r for r in old["val"] if r["n"] == len(load_multi30k("val", args.data_dir)[: args.limit])}
    val = load_multi30k("val", args.data_dir)[: args.limit]
    for beam, alpha in [(1, 0.0)] + [(args.beam, a) for a in args.alphas]:
        if (beam, alpha) in done:
            res["val"].append(done[beam, alpha]); continue
        r, _ = score(model, tok, val, beam, alpha)
        res["val"].append(r); save()
        print(f"val   beam {beam} alpha {r['alpha']}: BLEU {r['bleu']:.2f}  BP {r['bp']:.3f}  "
              f"len {r['sys_len']}/{r['ref_len']}  ({r['decode_seconds']:.0f} s)", flush=True)
    best = max((r for r in res["val"] if r["beam"] > 1), key=lambda r: r["bleu"])
    res["chosen_alpha"] = best["alpha"]
    test = load_multi30k("test2016", args.data_dir)[: args.limit]
    runs = {"greedy": (1, 0.0), "default": (args.beam, DEFAULT_ALPHA), "tuned": (args.beam, best["alpha"])}
    for name, (beam, alpha) in runs.items():
        if name == "tuned" and best["alpha"] == DEFAULT_ALPHA:
            res["test2016"][name] = res["test2016"]["default"]; continue
        r, hyps = score(model, tok, test, beam, alpha)
        res["test2016"][name] = {**r, "hypotheses": hyps}; save()
        print(f"test2016 {name}: beam {beam} alpha {r['alpha']}: BLEU {r['bleu']:.2f}  BP {r['bp']:.3f}  "
              f"({r['decode_seconds']:.0f} s)", flush=True)
    print(f"chosen on val: alpha = {best['alpha']}; wrote {out}")
    return res


if __name__ == "__main__":
    main()
