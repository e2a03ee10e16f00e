"""Part IV's Hugging Face loaders (chapters 13 and 16) against `transformers` on a GPU: random GPT-2 and Llama models
built, perturbed and saved as `bench/hf_loaders.py` does (its `build`), a little larger (width 256, 4 layers, vocabulary
1,000), read back with `load_hf`, and compared

- in float32, TF32 off: the largest |logit difference| on 4 random prompts of 16 tokens, with the default attention
  kernels (the pass test: below 1e-4) and with SDPA's math kernel (for information);
- in bfloat16 (both models `.to(torch.bfloat16)`, as a user loads them for inference): 32 greedy tokens from our
  `generate(top_k=1)` and from `transformers`' `generate(do_sample=False)`; the positions where they agree and each
  row's first divergence; and the log-probability error on `transformers`' greedy sequences (ours vs theirs in
  bfloat16, and each vs the float32 reference).

Greedy decoding in bfloat16 may legitimately part ways where two tokens are nearly tied. A row passes in bfloat16 if its
32 tokens are equal, or if at its first divergence the float32 gap between the two most likely tokens is below twice
the larger of the two bfloat16 models' log-probability errors against float32 on that row: the most the rounding can
move that gap, so one of the two may flip the order. Both numbers are written so a reader can judge.

    PYTHONPATH=$PWD python bench/hf_loaders_cuda.py                                   # on a GPU
    PYTHONPATH=$PWD python bench/hf_loaders_cuda.py --device cpu --out /tmp/hfc.json  # the dry run (about a minute)

Writes `bench/results/hf_loaders_cuda-<machine>.json` (e.g. `hf_loaders_cuda-nvidia-h100-80gb-hbm3.json`) and prints
a table. Nothing is downloaded. Exits non-zero if a float32 comparison fails; a bfloat16 failure is reported only.
"""
from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import torch
import transformers
from torch.nn.attention import SDPBackend, sdpa_kernel

from annotated_transformer.language_model import generate
from annotated_transformer.modern import load_hf
from copy_task import machine, slug                               # the file names other bench scripts use
from hf_loaders import LLAMA, build                               # the random, perturbed, saved models

VOCAB = 1000
CASES = [("gpt2", "GPT2", dict(vocab_size=VOCAB, n_positions=128, n_embd=256, n_layer=4, n_head=8, bos_token_id=None,
                               eos_token_id=None)),
         ("llama", "Llama", {**LLAMA, "vocab_size": VOCAB, "hidden_size": 256, "intermediate_size": 688,
                             "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32,
                             "max_position_embeddings": 128})]


def sync(device: torch.device) -> None:
    if device.type == "cuda": torch.cuda.synchronize(device)


def logprobs(model, seq: torch.Tensor, t: int, hf: bool) -> torch.Tensor:
    "Float32 log-probabilities `(B, new, V)` of the positions that predict `seq[:, t:]`, from one forward pass."
    logits = model(seq[:, :-1]).logits if hf else model(seq[:, :-1])
    return logits[:, t - 1:].float().log_softmax(-1)


def err(a: torch.Tensor, b: torch.Tensor) -> dict:
    d = (a - b).abs()
    return {"max": d.max().item(), "mean": d.mean().item(), "max_per_row": d.flatten(1).max(1).values.tolist()}


def fp32_case(ours, hf, ids) -> dict:
    with torch.no_grad():
        diff = (ours(ids) - hf(ids).logits).abs().max().item()
        with sdpa_kernel(SDPBackend.MATH):
            diff_math = (ours(ids) - hf(ids).logits).abs().max().item()
    return {"max_logit_difference": diff, "max_logit_difference_math_sdpa": diff_math, "pass": diff < 1e-4}


def greedy_pair(ours, hf, ids, new: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    "Our `generate(top_k=1)` and `transformers`' `generate(do_sample=False)`, `(B, t + new)` each."
    g = torch.Generator(device=device).manual_seed(0)            # top_k=1 keeps exact ties: the draw among them
    with torch.no_grad():
        a = generate(ours, ids, new, top_k=1, generator=g)
        b = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                        min_new_tokens=new, pad_token_id=0)
    return a, b


def bf16_case(ours32, hf32, ids, new: int, device) -> dict:
    t = ids.size(1)
    ours, hf = copy.deepcopy(ours32).to(torch.bfloat16), copy.deepcopy(hf32).to(torch.bfloat16)
    mine, theirs = greedy_pair(ours, hf, ids, new, device)
    with torch.no_grad():                                         # all on transformers' greedy sequences
        lp_ours, lp_hf, lp_ref = (logprobs(ours, theirs, t, False), logprobs(hf, theirs, t, True),
                                  logprobs(hf32, theirs, t, True))
    e_ours, e_hf = err(lp_ours, lp_ref), err(lp_hf, lp_ref)
    same = mine[:, t:] == theirs[:, t:]
    rows = []
    for r in range(ids.size(0)):
        row = {"equal_positions": int(same[r].sum()), "first_divergence": None}
        if not same[r].all():
            k = int((~same[r]).nonzero()[0])
            top2 = lp_ref[r, k].topk(2).values
            ref = lp_ref[r, k]
            threshold = 2 * max(e_ours["max_per_row"][r], e_hf["max_per_row"][r])
            row.update(first_divergence=k, ours_token=int(mine[r, t + k]), hf_token=int(theirs[r, t + k]),
                       fp32_top2_gap=(top2[0] - top2[1]).item(),
                       fp32_gap_between_chosen=(ref[theirs[r, t + k]] - ref[mine[r, t + k]]).item(),
                       # the same gap (hf's token minus ours) under each bfloat16 model, on the same prefix
                       bf16_gap_ours=(lp_ours[r, k, theirs[r, t + k]] - lp_ours[r, k, mine[r, t + k]]).item(),
                       bf16_gap_hf=(lp_hf[r, k, theirs[r, t + k]] - lp_hf[r, k, mine[r, t + k]]).item(),
                       bf16_threshold=threshold, tie_explained=(top2[0] - top2[1]).item() < threshold)
        row["pass"] = row["first_divergence"] is None or row["tie_explained"]
        rows.append(row)
    with torch.no_grad():                                         # float32 greedy, for information
        mine32, theirs32 = greedy_pair(ours32, hf32, ids, new, device)
    return {"new_tokens": new, "tokens_equal": int(same.sum()), "tokens": same.numel(), "rows": rows,
            "logprob_error": {"ours_bf16_vs_hf_bf16": err(lp_ours, lp_hf), "ours_bf16_vs_fp32": e_ours,
                              "hf_bf16_vs_fp32": e_hf},
            "fp32_greedy_tokens_equal": int((mine32[:, t:] == theirs32[:, t:]).sum()),
            "pass": all(r["pass"] for r in rows)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--out", help="JSON file (default: bench/results/hf_loaders_cuda-<machine>.json)")
    a = p.parse_args()
    device = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = False                 # true float32 matmuls and convolutions
    torch.backends.cudnn.allow_tf32 = False
    m = machine()
    ids = torch.randint(0, VOCAB, (a.batch, a.prompt_len), generator=torch.Generator().manual_seed(1)).to(device)
    report = {"machine": m, "device": str(device), "device_name": m["gpu"] if device.type == "cuda" else m["cpu"],
              "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
              "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32,
                       "float32_matmul_precision": torch.get_float32_matmul_precision()},
              "prompts": list(ids.shape), "models": []}
    ok = True
    for name, prefix, fields in CASES:
        t0, folder = time.perf_counter(), tempfile.mkdtemp()
        try:
            hf, _ = build(prefix, fields, folder)
            ours = load_hf(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        hf, ours = hf.to(device).eval(), ours.to(device).eval()
        row = {"model": name, "config": fields, "hf_attn_implementation": getattr(hf.config, "_attn_implementation", None)}
        if "fp32" in a.dtype:
            row["fp32"] = fp32_case(ours, hf, ids)
            ok &= row["fp32"]["pass"]
        if "bf16" in a.dtype:
            row["bf16"] = bf16_case(ours, hf, ids, a.new_tokens, device)
        sync(device)
        row["seconds"] = round(time.perf_counter() - t0, 2)
        report["models"].append(row)
    report["fp32_pass"], report["bf16_pass"] = bool(ok), all(r["bf16"]["pass"] for r in report["models"] if "bf16" in r)
    out = Path(a.out or BENCH / "results" / f"hf_loaders_cuda-{slug(m, device.type)}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")

    print(f"{report['device_name']}  torch {torch.__version__}  transformers {transformers.__version__}  TF32 off")
    print(f"{'model':6} {'fp32 max|dlogit|':>16} {'(math sdpa)':>11} {'bf16 tokens eq':>14} {'first div':>12} "
          f"{'lp err ours-hf':>14} {'ours-fp32':>9} {'hf-fp32':>9} {'s':>5}")
    for r in report["models"]:
        f, b = r.get("fp32", {}), r.get("bf16")
        cols = [f"{r['model']:6}", f"{f.get('max_logit_difference', float('nan')):16.2e}",
                f"{f.get('max_logit_difference_math_sdpa', float('nan')):11.2e}"]
        if b:
            e = b["logprob_error"]
            cols += [f"{b['tokens_equal']:>7}/{b['tokens']:<6}", f"{','.join(str(x['first_divergence']) if x['first_divergence'] is not None else '-' for x in b['rows']):>12}",
                     f"{e['ours_bf16_vs_hf_bf16']['max']:14.3f}", f"{e['ours_bf16_vs_fp32']['max']:9.3f}",
                     f"{e['hf_bf16_vs_fp32']['max']:9.3f}"]
        print(" ".join(cols), f"{r['seconds']:5.1f}")
    print(f"wrote {out}; fp32 pass: {ok}; bf16 pass: {report['bf16_pass']}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
