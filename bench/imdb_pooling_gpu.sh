#!/usr/bin/env bash
# Chapter 10's pooling comparison on one GPU: both arms (mean pooling, the first token) at seeds 0-2, each run
# (bench/imdb_pooling.py, the `small` preset) in its own process, all six at once; validation every EVERY steps.
# Usage: DATA=folder-with-the-imdb-archive OUT=folder STEPS=4000 SEEDS="0 1 2 3 4 5 6 7 8 9" bash bench/imdb_pooling_gpu.sh
#        (DEV=cpu STEPS=20 EVERY=10 SEEDS=0 for a dry run). Writes OUT/imdb_pooling-<steps>-<gpu>.json and .log.
# Measured on one H100 (torch 2.11, 16 host cores; 2026-11-27): 20 runs of 4,000 steps at once in 216 s.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
DATA=${DATA:?imdb folder}; OUT=${OUT:?out folder}; DEV=${DEV:-cuda}; STEPS=${STEPS:-2000}; EVERY=${EVERY:-250}
SEEDS=${SEEDS:-0 1 2}; ARMS=${ARMS:-mean first}; LIM=${LIM:-400}
mkdir -p "$OUT" /tmp/pool
gpu=$(python3 -c "import re, torch; print(re.sub(r'[^a-z0-9]+', '-', torch.cuda.get_device_name(0).lower()).strip('-') if torch.cuda.is_available() else 'cpu')")
log="$OUT/imdb_pooling-$STEPS-$gpu.log"; t0=$(date +%s)
for s in $SEEDS; do for arm in $ARMS; do
  ( timeout $LIM python3 bench/imdb_pooling.py --data-dir "$DATA" --steps $STEPS --eval-every $EVERY --seeds $s --arms $arm \
      --device $DEV --threads 2 --runs /tmp/pool/runs --out /tmp/pool/$arm-$s.json > /tmp/pool/$arm-$s.log 2>&1
    echo "== $arm seed $s exit $? after $(( $(date +%s) - t0 )) s" >> /tmp/pool/$arm-$s.log ) &
done; done
wait
for f in /tmp/pool/*.log; do echo "## $f"; cat "$f"; done > "$log"
python3 - "$OUT/imdb_pooling-$STEPS-$gpu.json" /tmp/pool/*-*.json <<'PY'
import json, sys
parts = [json.load(open(f)) for f in sys.argv[2:]]
out = {k: parts[0][k] for k in ("machine", "steps", "preset")}
out["arms"] = {a: v for p in parts for a, v in p["arms"].items()}
out["runs"] = sorted((r for p in parts for r in p["runs"]), key=lambda r: (r["seed"], r["arm"]))
open(sys.argv[1], "w").write(json.dumps(out, indent=1) + "\n")
print(f"{len(out['runs'])} runs:", [(r["arm"], r["seed"], r["val_accuracy"], r["train_seconds"]) for r in out["runs"]])
PY
echo "all done in $(( $(date +%s) - t0 )) s"; grep -h "==" /tmp/pool/*.log
