#!/usr/bin/env bash
# Part IV's three experiments (chapters 12, 14, 16) at a larger budget, side by side on one GPU, in one call of a few
# minutes. Run from the repository root:
#
#   bash bench/gpu_part4.sh DATA [OUT]        # DATA holds imdb/ and tinyshakespeare/ as ../shared/data does
#   DRY=1 bash bench/gpu_part4.sh DATA        # the same sequence on the CPU with each script's --dry-run (< 1 minute)
#
# Each run is its own process (the scripts' --jobs), so the GPU sees up to about fifteen small trainings at once, each
# bound by its host thread. Every script writes its JSON after each finished run, so whatever stops at the time limit
# keeps the runs that finished. Results: bench/results/<experiment>-gpu-<gpu>.json, copied with the logs to OUT.
#
# The designs (the CPU's are in each script's docstring):
#   2017 -> today ablation: chapter 11's size (4 layers, width 128, windows of 128), 2,000 steps of 32 windows, 3 seeds
#   Transformer-XL: the same size, 2,400 steps of 64 segments (4 models x 3 seeds), memories 0..512 at evaluation
#   BERT on IMDb: 4 layers of width 256, pretrained to 1.5 nats under the unigram level (or 2.5 minutes), then
#     250 / 1,000 / 5,000 / 25,000 labelled reviews x pretrained / scratch x 3 seeds, 600 labelled steps of 64 reviews
#
# Measured on one H100 (driver 580, torch 2.11, 16 host cores; 2026-11-26): all three finished in 482 s, the ablation
# and Transformer-XL within about 5 minutes and the BERT experiment last (201 s of pretraining, then 24 fine-tuning runs).
set -uo pipefail
DATA=${1:?usage: gpu_part4.sh DATA [OUT]}
OUTDIR=${2:-bench/results}
BUDGET=${BUDGET:-450}                           # seconds for the three experiments together
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
start=$(date +%s)
stamp() { echo "== $(date +%T) [$(( $(date +%s) - start )) s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - start) )); }
mkdir -p "$OUTDIR"
if [ "${DRY:-0}" = 1 ]; then
  common=(--dry-run --device cpu); sh=("${common[@]}"); xl=("${common[@]}"); imdb=("${common[@]}")
else
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  common=(--tag gpu --device cuda --save-every 100000 --seeds 0 1 2)
  sh=("${common[@]}" --steps 2000 --batch 32)
  xl=("${common[@]}" --steps 2400 --batch 64)
  imdb=("${common[@]}" --layers 4 --d-model 256 --heads 4 --batch 64 --mlm-steps 12000 --below 1.5 --mlm-minutes 2.5
        --ft-steps 600 --sizes 250 1000 5000 25000)
fi
python3 -c "import torch, annotated_transformer as at; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available() and torch.cuda.get_device_name(0))"
copy() { cp bench/results/*-gpu-*.json runs/*-dry-run-*.json "$OUTDIR"/ 2>/dev/null; cp /tmp/part4-*.log "$OUTDIR"/ 2>/dev/null; }

stamp "ablation: each row's speed, alone on the machine"
timeout 90 python3 bench/modern_ablation.py --data-dir "$DATA/tinyshakespeare" "${sh[@]}" --speed-only \
  > /tmp/part4-ablation.log 2>&1
tail -3 /tmp/part4-ablation.log

stamp "the three experiments, side by side"
timeout "$(left)" python3 bench/imdb_mlm.py --data-dir "$DATA/imdb" "${imdb[@]}" --jobs 5 > /tmp/part4-imdb.log 2>&1 &
timeout "$(left)" python3 bench/transformer_xl.py --data-dir "$DATA/tinyshakespeare" "${xl[@]}" --jobs 6 \
  > /tmp/part4-xl.log 2>&1 &
timeout "$(left)" python3 bench/modern_ablation.py --data-dir "$DATA/tinyshakespeare" "${sh[@]}" --jobs 5 --resume \
  >> /tmp/part4-ablation.log 2>&1 &
runs() { python3 -c "import json,sys; print(', '.join(f'{f.split(\"/\")[-1][:14]} {len(json.load(open(f)).get(\"runs\", {}))}' for f in sys.argv[1:]))" "$OUTDIR"/*.json 2>/dev/null; }
while [ -n "$(jobs -r)" ]; do sleep 20; copy; stamp "runs finished: $(runs)"; done
wait
copy
for f in /tmp/part4-*.log; do echo "--- $f"; tail -12 "$f"; done
stamp done
