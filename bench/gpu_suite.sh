#!/usr/bin/env bash
# The book's GPU measurements in one go, for a machine lent for a short while. Run from the repository root:
#
#   bash bench/gpu_suite.sh bench  [OUT]   # throughput, SDPA kernels, memory, decoding, precision curves, a short
#                                          # Multi30k run (the translation task's GPU path); ~8 minutes on an H100
#   bash bench/gpu_suite.sh train  [OUT]   # Multi30k to the book's target (see train_multi30k below), then the
#                                          # notebooks' tests with their `cuda` cells
#
# Needs the Multi30k files in $M30K (default ../shared/data/multi30k), the package importable, and nbdev for the
# notebook tests. Results go to bench/results/ and are copied, with the logs, to OUT (default bench/results).
set -uo pipefail
stage=${1:?usage: gpu_suite.sh bench|train [OUT]}
OUTDIR=${2:-bench/results}
M30K=${M30K:-../shared/data/multi30k}
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
start=$(date +%s)
left() { echo $(( ${DEADLINE:-570} - ($(date +%s) - start) )); }   # seconds left in this call's budget
stamp() { echo "== $(date +%T) [$(( $(date +%s) - start )) s] $*"; }
mkdir -p "$OUTDIR"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name(0))"

if [ "$stage" = bench ]; then
  stamp "Multi30k small, 300 steps, bf16: the translation task on the GPU, end to end"
  run=/tmp/m30k-cal
  timeout 150 python3 -m annotated_transformer train --task multi30k --preset small --data-dir "$M30K" \
    --device cuda --precision bf16 --max-steps 300 --eval-every 300 --no-progress --overwrite --out $run 2>&1 | tail -5
  timeout 60 python3 -m annotated_transformer eval --task multi30k --checkpoint $run --split test2016 --beam 4 \
    --device cuda 2>&1 | tail -2
  stamp "training throughput, base model"
  timeout 240 python3 bench/train_throughput.py --device cuda 2>&1 | tail -25
  stamp "SDPA kernels";      timeout 60 python3 bench/sdpa_kernels.py 2>&1 | tail -24
  stamp "memory";            timeout 90 python3 bench/memory.py 2>&1 | tail -8
  stamp "decoding";          timeout 90 python3 bench/decode.py --device cuda 2>&1 | tail -9
  stamp "precision curves";  timeout "$(left)" python3 bench/precision_curves.py --device cuda 2>&1 | tail -8
  cp bench/results/*nvidia* "$OUTDIR"/ 2>/dev/null
fi

if [ "$stage" = train ]; then
  stamp "Multi30k to >= 40 sacreBLEU on test2016"
  bash bench/train_multi30k.sh "$M30K" /tmp/m30k "$OUTDIR"
  stamp "notebook tests with their cuda cells"
  (cd nbs && timeout "$(left)" nbdev-test --flags cuda --n_workers 8 --timing) 2>&1 | tail -30
fi
stamp done
