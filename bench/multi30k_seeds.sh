#!/usr/bin/env bash
# Chapter 9's learning curves at three seeds: the `small` preset of the multi30k task (fp32 with TF32 matrix products,
# the command line's default on a GPU), seeds 0, 1, 2 trained at once on one GPU for 4,000 steps with a validation
# BLEU and a snapshot every 250, then each run's report (bench/multi30k_report.py, on the GPU): validation
# cross-entropy per snapshot, sacreBLEU of the final model and of the mean of its last 5 snapshots.
#   D=multi30k-folder OUT=out-folder bash bench/multi30k_seeds.sh
#   D=... OUT=/tmp/dry DEV=cpu STEPS=50 EVERY=10 EXTRA="--preset tiny --max-tokens 1024" bash bench/multi30k_seeds.sh  # dry run
# Measured on one H100 (torch 2.11, 16 host cores; 2026-11-27): 141 s for the three trainings, 177 s in all.
# Writes OUT/multi30k-seed<S>-small-<gpu>.json and OUT/multi30k-seed<S>-<gpu>.log (training and report output).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
D=${D:?multi30k folder}; OUT=${OUT:?out folder}; DEV=${DEV:-cuda}; STEPS=${STEPS:-4000}; EVERY=${EVERY:-250}; LIM=${LIM:-330}
mkdir -p $OUT
if [ $DEV = cuda ]; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; fi
gpu=$(python3 -c "import re, torch; print(re.sub(r'[^a-z0-9]+', '-', torch.cuda.get_device_name(0).lower()).strip('-') if torch.cuda.is_available() else 'cpu')")
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
t0=$(date +%s)
for s in 0 1 2; do
  ( timeout -s INT $LIM python3 -m annotated_transformer train --task multi30k --preset small --data-dir $D --device $DEV \
      --max-steps $STEPS --eval-every $EVERY --keep-checkpoints 40 --seed $s --no-progress --overwrite ${EXTRA:-} \
      --out /tmp/m30k-s$s > $OUT/multi30k-seed$s-$gpu.log 2>&1
    echo "== train exit $? after $(( $(date +%s) - t0 )) s" >> $OUT/multi30k-seed$s-$gpu.log ) &
done
wait; echo "trained in $(( $(date +%s) - t0 )) s"; tail -n 2 $OUT/*.log
for s in 0 1 2; do
  ( python3 bench/multi30k_report.py --run /tmp/m30k-s$s --data-dir $D --device $DEV --out $OUT/multi30k-seed$s-small-$gpu.json \
      >> $OUT/multi30k-seed$s-$gpu.log 2>&1
    echo "== report exit $? after $(( $(date +%s) - t0 )) s" >> $OUT/multi30k-seed$s-$gpu.log ) &
done
wait; echo "all done in $(( $(date +%s) - t0 )) s"; tail -n 4 $OUT/*.log; ls -la $OUT
