"""Here: rebuild a run packed by pack.py on the device (fp16 parts -> fp32 safetensors) under DEST."""
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

src, dest = Path(sys.argv[1]), Path(sys.argv[2])
dest.mkdir(parents=True, exist_ok=True)
with tarfile.open(src / "meta.tar.gz") as tar:
    tar.extractall(dest, filter="data")
files = defaultdict(lambda: defaultdict(list))
for part in sorted(src.glob("w*.safetensors")):
    for name, t in load_file(part).items():
        source, key = name.split("##", 1)
        key, start = key.rsplit("@@", 1)
        files[source][key].append((int(start), t))
for source, tensors in files.items():
    state = {}
    for key, chunks in tensors.items():
        chunks.sort(key=lambda c: c[0])
        t = torch.cat([c[1] for c in chunks]) if chunks[0][1].dim() else chunks[0][1]
        state[key] = (t.float() if t.is_floating_point() else t).contiguous()
    (dest / source).parent.mkdir(parents=True, exist_ok=True)
    save_file(state, dest / source, metadata={"format": "pt"})
    print("rebuilt", dest / source, len(state), "tensors")
