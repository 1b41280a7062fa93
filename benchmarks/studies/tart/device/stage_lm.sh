#!/bin/bash
# Call A on the device (TART-full on SmolLM2): unpack berri-lite, install the carried wheels (gguf among them)
# into /tmp/site, keep the first part of SmolLM2's GGUF; check the imports. Reads .gpu2/a/.
set -euo pipefail
mkdir -p /tmp/stage /tmp/data /tmp/site
tar xJf .gpu2/a/berri.tar.xz -C /tmp/data
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu2/a/whl/*.whl
cp .gpu2/a/gguf.part1 /tmp/stage/
export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1
python3 -c "import torch, transformers, sentence_transformers, gguf, bm25s, Stemmer, pydantic, taskret.tart.pipeline, taskret.rerank.cross_encoder; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__, 'st', sentence_transformers.__version__)"
ls /tmp/data/berri-lite | wc -l
