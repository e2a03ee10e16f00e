#!/usr/bin/env bash
# The book's GPU checks in one call of a lent machine (about 9 minutes on one H100). Run from the repository root:
#
#   bash bench/gpu_suite.sh DATA [OUT]       # DATA holds tinyshakespeare/input.txt; results also copied to OUT
#   STEPS="notebooks" bash bench/gpu_suite.sh DATA [OUT]   # only some steps (names below), e.g. to finish a cut call
#   DRY=1 bash bench/gpu_suite.sh DATA /tmp/dry            # the same sequence on the CPU at toy sizes (~3 minutes)
#
# In this order, each step under its own `timeout`, each writing its JSON as it goes (bench/results/*-<gpu>.json):
#   shakespeare  chapter 11's model at nanoGPT's sizes through `annotated-transformer train`, bf16 + compile, stopped
#                at 1.47 nats/char (nanoGPT's 1.4697 in about 3 minutes on an A100): bench/shakespeare_gpu.py
#   step         the base model's training step, bf16, eager and compiled, a batch of 192 x (128 + 128) tokens: tokens/s,
#                share of the bf16 matmul rate measured in the same run, peak memory, kernels per step
#   decode       greedy and beam 4 against MarianMT's `generate`, the shipped model's sizes and base, batch 32 and 128
#   loaders      Part IV's GPT-2 and Llama loaders against `transformers` on the GPU, fp32 and bf16
#   notebooks    every notebook's tests with their `cuda` cells, 12 at a time, in the time left
# Timing steps run alone on the GPU; the loaders' check runs beside the notebooks (it measures no time).
# Measured on one H100 (driver 580, torch 2.11, 16 host cores; 2026-11-26), DEADLINE=550: 537 s in all; shakespeare
# 225 s (8,000 steps), step 90 s, decode 42 s, then 168 s for the loaders and 40 notebooks, of which the slowest
# (92_run, cut at 158 s) was run again alone: python3 bench/gpu_notebooks.py --only 92_run (179 s).
# Needs: the package importable (PYTHONPATH), nbdev for the notebooks, transformers for decode and loaders. A machine
# without nbdev takes it as wheels: `pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .whl`
# of nbdev, execnb, fastcore, fastgit, ghapi, fastspec, fasttransport, httpx2, httpcore2, truststore, asttokens,
# astunparse, six, wheel, watchdog, ipython 8 and its dependencies, then there `python3 -m pip install --no-index --no-deps
# --target /tmp/site .whl/*.whl` and PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH.
# (`python3 -m pip`, not `pip`: on the H200 image a plain `pip` belongs to another Python, whose scripts then miss packages.)
set -uo pipefail
DATA=${1:?usage: gpu_suite.sh DATA [OUT]}
OUTDIR=${2:-bench/results}
STEPS=${STEPS:-shakespeare step decode loaders notebooks}
DEADLINE=${DEADLINE:-560}                           # seconds for the whole call
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
start=$(date +%s)
left() { echo $(( DEADLINE - ($(date +%s) - start) )); }
stamp() { echo "== $(date +%T) [$(( $(date +%s) - start )) s, $(left) s left] $*"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }
mkdir -p "$OUTDIR" /tmp/gpu-suite-res; touch /tmp/gpu-suite-start
# the timing steps write over stored results that appendix 9e pins by hash: their files are copied to OUTDIR, and the
# stored ones are put back before the notebooks' tests run (the loaders, run beside those tests, write outside the tree)
rm -rf /tmp/gpu-suite-pinned; cp -a bench/results /tmp/gpu-suite-pinned
copy() { find bench/results /tmp/gpu-suite-res -maxdepth 1 -newer /tmp/gpu-suite-start -name '*.json' ! -name '*.tmp' \
           -exec cp {} "$OUTDIR"/ \; 2>/dev/null; }
restore() { [ "${DRY:-0}" = 1 ] || [ "$(realpath "$OUTDIR")" = "$(realpath bench/results)" ] && return 0
            rm -rf bench/results && cp -a /tmp/gpu-suite-pinned bench/results; }
# the command line as `pip install` makes it, where the package is only on PYTHONPATH (chapter 93 runs it)
if ! command -v annotated-transformer >/dev/null; then
  mkdir -p /tmp/at-bin; printf '#!/bin/sh\nexec python3 -m annotated_transformer "$@"\n' > /tmp/at-bin/annotated-transformer
  chmod +x /tmp/at-bin/annotated-transformer; export PATH=/tmp/at-bin:$PATH
fi
if [ "${DRY:-0}" = 1 ]; then
  dev=cpu
  shk=(--device cpu --preset tiny --target 2.3 --max-steps 400 --max-seconds 60 --out /tmp/dry-shk.json)
  step=(--device cpu --preset tiny --variants ours-bf16 ours-bf16-compile --repeats 1 --steps 1 --profile-steps 1 --budget 60
        --out /tmp/dry-step.json)
  dec=(--peer --tiny --device cpu --threads 1 --peer-sizes shipped,base --peer-batches 32,128 --repeats 1 --budget 40
       --out /tmp/dry-decode.json)
  ldr=(--device cpu --out /tmp/dry-loaders.json)
  nbk=(--flags "" --jobs 2 --only 01_embeddings 96_utils 99_references --out /tmp/dry-notebooks.json)
else
  dev=cuda
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
  shk=(--device cuda --max-steps 8000 --max-seconds 230)
  step=(--device cuda --preset base-fill --variants ours-bf16 ours-bf16-compile --repeats 3 --steps 10 --profile-steps 3 --budget 120)
  dec=(--peer --device cuda --peer-sizes shipped,base --peer-batches 32,128 --repeats 3 --budget 70)
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr '[:upper:] ' '[:lower:]-')
  ldr=(--device cuda --out "/tmp/gpu-suite-res/hf_loaders_cuda-$gpu.json"); nbk=(--flags cuda --jobs 12)
fi
python3 -c "import torch, transformers, annotated_transformer as at; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, 'gpu', torch.cuda.is_available() and torch.cuda.get_device_name(0))"

if want shakespeare; then
  stamp "tiny-shakespeare to 1.47 nats/char"
  timeout 260 python3 bench/shakespeare_gpu.py --data-dir "$DATA/tinyshakespeare" "${shk[@]}" 2>&1 \
    | grep -vE '^step [0-9]+: loss' | tail -25
  copy
fi
if want step; then
  stamp "the base model's training step"
  timeout 150 python3 bench/train_throughput.py "${step[@]}" 2>&1 | tail -25; copy
fi
if want decode; then
  stamp "decoding against MarianMT's generate"
  timeout 100 python3 bench/decode.py "${dec[@]}" 2>&1 | tail -14; copy
fi
if want loaders; then
  stamp "Part IV's loaders (beside the notebooks)"
  timeout 120 python3 bench/hf_loaders_cuda.py "${ldr[@]}" > /tmp/gpu-loaders.log 2>&1 &
fi
if want notebooks; then
  copy; restore; stamp "the notebooks' tests"
  python3 bench/gpu_notebooks.py "${nbk[@]}" --budget $(( $(left) - 25 )) --timeout 400 2>&1 | tail -60; copy
fi
wait
[ -f /tmp/gpu-loaders.log ] && { echo "--- loaders"; tail -8 /tmp/gpu-loaders.log; }
copy
stamp done
ls -la "$OUTDIR"
