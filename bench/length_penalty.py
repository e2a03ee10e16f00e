"""Tune beam search's length penalty on Multi30k validation, then score test2016 with the chosen value.

    python bench/length_penalty.py                                   # the shipped pretrained/multi30k-small
    python bench/length_penalty.py --checkpoint runs/m30k --alphas 0 0.6 1 2

For every `alpha` (GNMT's length penalty, chapter 7) it decodes the 1,014 validation sentences with a beam of
`--beam` and records sacreBLEU with its parts (n-gram precisions, brevity penalty, lengths); greedy decoding is the
reference point. The alpha with the best validation BLEU is chosen, and only then is test2016 decoded: greedy, with
the default alpha 0.6, and with the chosen alpha. The decoders are the library's (`fast_greedy_decode`, and the
batched `beam_search` that appendix 9b tests equal to chapter 7's `beam_search_one`), called as `fast_translate` calls them.
For every sentence of every setting it also stores sacreBLEU's counts (output and reference lengths, matching and total
n-grams for n = 1..4; summed over sentences they give the corpus BLEU, so chapter 7 can resample them for paired
bootstrap intervals), the output's length in tokens and its summed log-probability under the model. The test
translations are stored sentence by sentence so that chapter 9 can score them by source length. The JSON (default `bench/results/length_penalty-<machine>.json`) names the
machine; the decoding times in it were measured on a shared machine and are only indicative.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import load, machine, slug  # noqa: E402  (the same machine description as the other benchmarks)

from annotated_transformer.checkpoint import load_config, resolve_checkpoint  # noqa: E402
import sacrebleu  # noqa: E402

from annotated_transformer.attention import subsequent_mask  # noqa: E402
from annotated_transformer.data import BOS, EOS, PAD, decode_batch, encode_batch, load_multi30k, pad_sequences, sha256_file  # noqa: E402
from annotated_transformer.decoding import beam_search, fast_greedy_decode  # noqa: E402
from annotated_transformer.translation import bleu, load_translator  # noqa: E402

DEFAULT_ALPHA = 0.6   # `translate`'s default, the value of Wu et al. (2016) that chapter 7 uses


@torch.no_grad()
def decode_scored(model, tok, sentences: list[str], beam: int, alpha: float, batch_size: int = 64):
    """`fast_translate`'s decoding (the same decoders, batches and length limit), also returning for each output its
    length in tokens (end symbol included) and its summed log-probability by one teacher-forced pass."""
    hyps, lengths, logps = [], [], []
    for i in range(0, len(sentences), batch_size):
        src = pad_sequences(encode_batch(tok, sentences[i:i + batch_size]))             # (b, S)
        src_mask, limit = (src != PAD).unsqueeze(-2), src.size(1) + 50
        if beam == 1: ys = fast_greedy_decode(model, src, src_mask, limit, BOS, EOS, pad_symbol=PAD)
        else: ys, _ = beam_search(model, src, src_mask, limit, BOS, EOS, beam, alpha, pad_symbol=PAD)
        hyps += decode_batch(tok, ys)
        out = model.decode(model.encode(src, src_mask), src_mask, ys[:, :-1], subsequent_mask(ys.size(1) - 1))
        lp = model.generator(out).float().gather(-1, ys[:, 1:, None]).squeeze(-1)      # (b, T - 1)
        real = ys[:, 1:] != PAD                                                           # up to the end symbol
        lengths += real.sum(1).tolist(); logps += [round(x, 4) for x in (lp * real).sum(1).tolist()]
    return hyps, lengths, logps


def score(model, tok, pairs, beam: int, alpha: float) -> tuple[dict, list[str]]:
    "sacreBLEU of `model` on `pairs` (greedy when `beam` is 1), with per-sentence statistics; and the translations."
    t0 = time.perf_counter()
    model.eval()
    hyps, lengths, logps = decode_scored(model, tok, [p[0] for p in pairs], beam, alpha)
    seconds = round(time.perf_counter() - t0, 1)
    r = bleu(hyps, [p[1] for p in pairs])
    metric = sacrebleu.metrics.BLEU(effective_order=True)   # effective order: no warning; the counts are the same
    sent = [metric.sentence_score(h, [p[1]]) for h, p in zip(hyps, pairs)]
    stats = [[x.sys_len, x.ref_len, *x.counts, *x.totals] for x in sent]    # sums to the corpus statistics
    return {**r, "beam": beam, "alpha": alpha if beam > 1 else None, "n": len(pairs), "decode_seconds": seconds,
            "load": load(), "sentence_stats": stats, "tokens": lengths, "logp": logps}, hyps


def dumps(res: dict) -> str:
    "The JSON text, indented, with each list of numbers on one line (the per-sentence statistics stay small)."
    text = json.dumps(res, indent=1, ensure_ascii=False)
    return re.sub(r"\[\s*(-?[0-9][-0-9.eE,\s]*?)\s*\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text) + "\n"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default="pretrained/multi30k-small", help="checkpoint folder (default: the shipped model)")
    p.add_argument("--data-dir", help="Multi30k folder (default: the download cache)")
    p.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.6, 1.0, 1.5, 2.0, 2.5, 3.0], help="length penalties to try on val")
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
           "tokenizer_sha256": sha256_file(folder / "tokenizer.json"),
           "model_sha256": sha256_file(folder / "model.safetensors"), "beam": args.beam,
           "default_alpha": DEFAULT_ALPHA, "val": [], "test2016": {}}

    def save():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(dumps(res), encoding="utf-8")

    done = {}
    if args.resume and out.is_file():     # a run cut short: its finished validation passes are reused
        old = json.loads(out.read_text(encoding="utf-8"))
        if (old["checkpoint"], old["beam"], old["tokenizer_sha256"]) == (res["checkpoint"], res["beam"], res["tokenizer_sha256"]):
            done = {(r["beam"], r["alpha"] or 0.0): r for r in old["val"] if "sentence_stats" in r and r["n"] == len(load_multi30k("val", args.data_dir)[: args.limit])}
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
