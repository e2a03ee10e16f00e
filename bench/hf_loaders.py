"""The Hugging Face loaders (chapters 13 and 16) against `transformers`, end to end through the command line: for each
kind a small random model is built with `transformers`, every parameter perturbed, saved with a word-level
tokenizer, and then

- its logits are compared with the loaded model's (`load_hf`, or `load_hf_bert` for BERT), in float32;
- for the causal models, `transformers`' greedy `generate` is compared with the text printed by a separate process
  running `python -m annotated_transformer generate --checkpoint FOLDER --top-k 1` (sampling among the single most
  likely token is greedy decoding).

    PYTHONPATH=$PWD python bench/hf_loaders.py [--out bench/results/hf_loaders.json]

Nothing is downloaded. Exits non-zero if any logit differs by 1e-4 or more or any command line's text differs.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

from annotated_transformer.bert import load_hf_bert
from annotated_transformer.modern import load_hf

transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
VOCAB, ROOT = 97, Path(__file__).resolve().parent.parent
LLAMA = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64, head_dim=16, bos_token_id=None, eos_token_id=None,
             rope_parameters={"rope_type": "default", "rope_theta": 5000.0})
LLAMA3 = {"rope_type": "llama3", "rope_theta": 5000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}
# (name, transformers class prefix, config fields)
CASES = [("gpt2", "GPT2", dict(vocab_size=VOCAB, n_positions=64, n_embd=48, n_layer=2, n_head=4, bos_token_id=None,
                               eos_token_id=None)),
         ("gpt2, untied head, no score scaling", "GPT2", dict(vocab_size=VOCAB, n_positions=64, n_embd=48, n_layer=2, n_head=4,
                               bos_token_id=None, eos_token_id=None, tie_word_embeddings=False, scale_attn_weights=False,
                               scale_attn_by_inverse_layer_idx=True)),
         ("llama, rope llama3", "Llama", {**LLAMA, "rope_parameters": LLAMA3}),
         ("mistral, window 8", "Mistral", {**LLAMA, "sliding_window": 8}),
         ("qwen2, window 8 on layer 1", "Qwen2", {**LLAMA, "use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}),
         ("qwen3", "Qwen3", dict(LLAMA)),
         ("bert", "Bert", dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=64, max_position_embeddings=64))]


def build(prefix: str, fields: dict, folder: str, seed: int = 0):
    "A random `transformers` model, parameters perturbed, saved in `folder` with a word-level tokenizer w0 .. w96."
    torch.manual_seed(seed)
    head = "ForMaskedLM" if prefix == "Bert" else ("LMHeadModel" if prefix == "GPT2" else "ForCausalLM")
    hf = getattr(transformers, prefix + head)(getattr(transformers, prefix + "Config")(**fields)).eval()
    with torch.no_grad():
        for p in hf.parameters(): p.add_(0.05 * torch.randn_like(p))
    hf.save_pretrained(folder)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(Path(folder, "tokenizer.json")))
    return hf, tok


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "hf_loaders.json"))
    p.add_argument("--new-tokens", type=int, default=30)
    a = p.parse_args()
    ids, rows, ok = torch.randint(0, VOCAB, (2, 64), generator=torch.Generator().manual_seed(1)), [], True
    for name, prefix, fields in CASES:
        folder = tempfile.mkdtemp()
        hf, tok = build(prefix, fields, folder)
        row = {"model": name, "config": {k: v for k, v in fields.items() if k not in LLAMA or LLAMA[k] != v or prefix in ("GPT2", "Bert")}}
        with torch.no_grad():
            if prefix == "Bert":
                ours, theirs = load_hf_bert(folder)(ids, None), hf(ids).logits
            else:
                ours, theirs = load_hf(folder)(ids), hf(ids).logits
        row["max_logit_difference"] = (ours - theirs).abs().max().item()
        ok &= row["max_logit_difference"] < 1e-4
        if prefix != "Bert":
            prompt = ids[:1, :5]
            with torch.no_grad():
                greedy = hf.generate(prompt, max_new_tokens=a.new_tokens, do_sample=False, pad_token_id=0)
            cmd = [sys.executable, "-m", "annotated_transformer", "generate", "--checkpoint", folder, "--prompt",
                   tok.decode(prompt[0].tolist()), "--max-new-tokens", str(a.new_tokens), "--top-k", "1", "--seed", "0"]
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout.strip()
            row["cli_equals_transformers_greedy"] = out == tok.decode(greedy[0].tolist())
            row["cli_output_words"] = len(out.split())
            ok &= row["cli_equals_transformers_greedy"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(a.out).write_text(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                                       "new_tokens": a.new_tokens, "rows": rows, "all_pass": bool(ok)}, indent=1) + "\n")
    print(f"wrote {a.out}; all pass: {ok}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
