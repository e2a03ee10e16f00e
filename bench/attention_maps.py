"""The attention weights of a trained Multi30k model on one test sentence, stored for chapter 9's figures.

    python bench/attention_maps.py                                  # the shipped pretrained/multi30k-small
    python bench/attention_maps.py --checkpoint runs/m30k --index 3

The model translates test sentence `--index` of test2016 with a beam of 4, then `attention_maps` runs one
teacher-forced pass with that translation as the target. The JSON (default
`bench/results/attention_maps-<checkpoint name>.json`) holds the sentence, the translation, the subword tokens
of both sides, every layer's encoder, decoder and cross-attention weights (rounded to 4 decimals) and the
checkpoint's tokenizer settings, so that a reader sees which pre-tokenisation produced the tokens.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from copy_task import machine  # noqa: E402

from annotated_transformer.checkpoint import load_config, resolve_checkpoint  # noqa: E402
from annotated_transformer.data import load_multi30k, sha256_file  # noqa: E402
from annotated_transformer.translation import attention_maps, load_translator, translate  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", default="pretrained/multi30k-small", help="checkpoint folder (default: the shipped model)")
    p.add_argument("--data-dir", help="Multi30k folder (default: the download cache)")
    p.add_argument("--index", type=int, default=0, help="which test2016 sentence (default 0, the first)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--out", help="JSON file (default: bench/results/attention_maps-<checkpoint name>.json)")
    args = p.parse_args(argv)
    folder = resolve_checkpoint(args.checkpoint)
    model, tok = load_translator(folder, "cpu")
    de, en = load_multi30k("test2016", args.data_dir)[args.index]
    hyp = translate(model, tok, [de], beam=args.beam)[0]
    maps = attention_maps(model, tok, de, hyp)
    saved = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    res = {"benchmark": "attention weights of one teacher-forced pass (source sentence, model's own translation)",
           "machine": machine(), "checkpoint": str(args.checkpoint), "checkpoint_config": load_config(folder),
           "tokenizer_sha256": sha256_file(folder / "tokenizer.json"),
           "tokenizer": {k: saved[k] for k in ("normalizer", "pre_tokenizer", "decoder")},
           "split": "test2016", "index": args.index, "beam": args.beam, "de": de, "en": en, "hyp": hyp,
           "src_tokens": maps["src_tokens"], "tgt_tokens": maps["tgt_tokens"],
           **{kind: [[[[round(float(x), 4) for x in row] for row in head] for head in layer] for layer in maps[kind]]
              for kind in ("encoder", "decoder", "cross")}}
    out = Path(args.out or Path(__file__).parent / "results" / f"attention_maps-{Path(args.checkpoint).name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{de} -> {hyp}\n{maps['src_tokens']}\n{maps['tgt_tokens']}\nwrote {out}")
    return res


if __name__ == "__main__":
    main()
