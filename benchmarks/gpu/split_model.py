"""Here: cut a sentence-transformers model.safetensors into two fp16 halves, the word embeddings and the rest, so
that each travels to the device under the 64 MiB a call may carry; benchmarks/studies/tart/device/assemble.py joins
them there (as fp32: the weights differ from the originals by fp16 rounding, at most ~1e-4 here)."""
import sys

from safetensors.torch import load_file, save_file

state = load_file(sys.argv[1])
half = lambda t: (t.half() if t.is_floating_point() else t).contiguous()  # noqa: E731
embeddings = {k: half(v) for k, v in state.items() if "word_embeddings" in k}
rest = {k: half(v) for k, v in state.items() if k not in embeddings}
save_file(embeddings, sys.argv[2], metadata={"format": "pt"})
save_file(rest, sys.argv[3], metadata={"format": "pt"})
print(f"{len(embeddings)} + {len(rest)} tensors -> {sys.argv[2]}, {sys.argv[3]}")
