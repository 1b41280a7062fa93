"""Join the two fp16 halves of all-MiniLM-L6-v2 into an fp32 model.safetensors (the device gets no model hub)."""
import sys

from safetensors.torch import load_file, save_file

parts = {**load_file(sys.argv[1]), **load_file(sys.argv[2])}
state = {k: (v.long() if k.endswith("position_ids") else v.float()).contiguous() for k, v in parts.items()}
save_file(state, sys.argv[3], metadata={"format": "pt"})
print(f"assembled {len(state)} tensors -> {sys.argv[3]}")
