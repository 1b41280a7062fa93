"""Send a trained run back: its weights as fp16 parts under 16 MiB (large tensors cut by rows, keys
'NAME@@START'), everything else but train.jsonl as one tar. unpack.py (here) puts it together again."""
import os
import sys
import tarfile
from pathlib import Path

from safetensors.torch import load_file, save_file

LIMIT = int(float(os.environ.get("PACK_LIMIT_MIB", "12")) * 2**20)  # each part under the 16 MiB a file may come back as
run, out = Path(sys.argv[1]), Path(sys.argv[2])
pieces = []
for path in sorted(run.rglob("*.safetensors")):
    source = str(path.relative_to(run.parent))
    for key, tensor in load_file(path).items():
        t = tensor.half() if tensor.is_floating_point() else tensor
        rows = max(1, LIMIT // max(1, t[0].numel() * t.element_size())) if t.dim() > 0 else 1
        for start in range(0, max(1, t.shape[0] if t.dim() else 1), rows):
            piece = t[start:start + rows] if t.dim() else t
            pieces.append((source, f"{key}@@{start}", piece.contiguous().clone()))
part, size, k = {}, 0, 0
def flush():
    global part, size, k
    if part:
        save_file({f"{s}##{key}": v for (s, key), v in part.items()}, out / f"w{k}.safetensors")
        k += 1
    part, size = {}, 0
for source, key, t in pieces:
    n = t.numel() * t.element_size()
    if size + n > LIMIT:
        flush()
    part[source, key] = t
    size += n
flush()
with tarfile.open(out / "meta.tar.gz", "w:gz") as tar:
    for path in sorted(run.rglob("*")):
        if path.is_file() and path.suffix != ".safetensors" and path.name != "train.jsonl":
            tar.add(path, arcname=str(path.relative_to(run.parent)))
print("packed", [(p.name, p.stat().st_size) for p in sorted(out.iterdir())])
