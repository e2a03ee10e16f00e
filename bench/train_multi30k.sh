#!/usr/bin/env bash
# Multi30k German->English on a GPU in minutes: the `small` preset (N 3, d_model 256), 8192-token batches, fp32 with
# TF32 matrix products (the command line's default on a GPU), 3000 steps with an evaluation and a snapshot every 300;
# then the average of the last 5 snapshots, and sacreBLEU on test2016 (greedy and beam 4) of the final and averaged
# models. Usage: bash bench/train_multi30k.sh DATA_DIR RUN_DIR OUT_DIR
# OUT_DIR gets the log (multi30k-gpu-<gpu>.log), the BLEU lines (.jsonl) and the averaged model in fp16 (m30k/).
set -uo pipefail
data=${1:?data dir}; run=${2:?run dir}; out=${3:?out dir}
gpu=$(python3 -c "import re, torch; print(re.sub(r'[^a-z0-9]+', '-', torch.cuda.get_device_name(0).lower()).strip('-'))")
log="$out/multi30k-gpu-$gpu.log"; scores="$out/multi30k-gpu-$gpu.jsonl"
mkdir -p "$out"; : > "$scores"
t0=$(date +%s.%N)
# SIGINT on time-out: the command line saves a resumable checkpoint on Ctrl-C
timeout -s INT "${TRAIN_LIMIT:-480}" python3 -m annotated_transformer train --task multi30k --preset small \
  --data-dir "$data" --device cuda --max-tokens 8192 --max-steps "${STEPS:-3000}" --eval-every 300 \
  --keep-checkpoints 5 --no-progress --overwrite --out "$run" 2>&1 | tee "$log"
t1=$(date +%s.%N)
python3 -m annotated_transformer average "$run"/step-* --out "$run-avg" 2>&1 | tee -a "$log"
for ck in "$run" "$run-avg"; do
  for beam in 1 4; do
    python3 -m annotated_transformer eval --task multi30k --checkpoint "$ck" --split test2016 --beam $beam \
      --device cuda | tee -a "$scores"
  done
done
t2=$(date +%s.%N)
python3 - "$run-avg" "$out/m30k" <<'PY'
import sys, shutil
from pathlib import Path
from annotated_transformer.checkpoint import load_model, load_config, save_model
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
model = load_model(src).half()                       # fp16 weights: half the file, same translations within rounding
cfg = {k: v for k, v in load_config(src).items() if k not in ("format_version", "model")}
save_model(model, dst, {**cfg, "dtype": "float16"})
for f in ("tokenizer.json", "task.json"): shutil.copyfile(src / f, dst / f)
print("fp16 model:", sum(p.stat().st_size for p in dst.iterdir()) / 2**20, "MiB in", dst)
PY
python3 -c "print(f'wall seconds: train command {$t1 - $t0:.1f}, average + 4 evaluations {$t2 - $t1:.1f}')" | tee -a "$log"
