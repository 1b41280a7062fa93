"""Average the weights of models fine-tuned from one base: a *model soup* (Wortsman et al., 2022).

Students distilled with different data, seeds or epochs from the same base sit in one basin of the loss, so
their weighted average is a model as fast as each of them that is often better than any one (the paper's
uniform soup). It works on the saved folders, file by file, so it serves any model taskret trains (a
sentence-transformers encoder, a query/document Router, a cross-encoder) without loading it; the weights are
read and written as safetensors only (no pickle)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

from ..io import write_json

__all__ = ["SOUP_FILE", "average_models"]

SOUP_FILE = "soup.json"
"""The record written beside the averaged weights: sources, their weights and whatever the caller adds."""


def _weight_files(folder: Path) -> list[str]:
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.safetensors"))
    if not files:
        pickled = sorted(p.name for p in folder.rglob("*.bin"))
        hint = f" (it holds {', '.join(pickled)}: taskret reads safetensors only)" if pickled else ""
        raise ValueError(f"{folder}: no *.safetensors weights{hint}")
    return files


def _normalised(weights: Sequence[float] | None, n: int) -> list[float]:
    if weights is None:
        return [1.0 / n] * n
    weights = [float(w) for w in weights]
    if len(weights) != n:
        raise ValueError(f"{len(weights)} weights for {n} models")
    total = sum(weights)
    if any(w < 0 for w in weights) or total <= 0:
        raise ValueError(f"weights must be >= 0 with a positive sum, got {weights}")
    return [w / total for w in weights]


def average_models(folders: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                   weights: Sequence[float] | None = None, record: dict[str, Any] | None = None) -> Path:
    """Write to ``out`` the weighted average of the models saved in ``folders`` (2 or more) and return it.

    Every folder must hold the same ``*.safetensors`` files with the same tensors (names and shapes): models
    fine-tuned from one base. Floating-point tensors are averaged in float32 and saved in the first model's
    dtype; other tensors (token-type or position ids) must be equal and are kept. Everything else (config,
    tokenizer, pooling, modules) is copied from the first folder. ``weights`` (default equal) are normalised
    to sum to 1. ``out/soup.json`` records the sources, the weights and ``record``. The folder appears whole
    or not at all (it is written under a temporary name and renamed)."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    from .fit import replace_dir

    paths = [Path(f) for f in folders]
    if len(paths) < 2:
        raise ValueError(f"a soup needs 2 or more models, got {len(paths)}")
    for path in paths:
        if not path.is_dir():
            raise ValueError(f"{path}: not a model folder")
    shares = _normalised(weights, len(paths))
    files = _weight_files(paths[0])
    for path in paths[1:]:
        other = _weight_files(path)
        if other != files:
            raise ValueError(f"{path}: weight files {other} differ from {paths[0]}'s {files}; "
                             "a soup averages models fine-tuned from one base")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        shutil.copytree(paths[0], tmp, dirs_exist_ok=True)
        for name in files:
            sums: dict[str, torch.Tensor] = {}
            dtypes: dict[str, torch.dtype] = {}
            metadata = None
            for path, share in zip(paths, shares):
                with safe_open(str(path / name), framework="pt") as f:
                    keys = set(f.keys())
                    if path == paths[0]:
                        metadata = f.metadata()
                        expected = keys
                    elif keys != expected:
                        diff = sorted(keys ^ expected)
                        raise ValueError(f"{path / name}: {len(diff)} tensors differ in name from "
                                         f"{paths[0] / name} (first: {diff[0]})")
                    for key in sorted(keys):
                        tensor = f.get_tensor(key)
                        if key not in sums:
                            dtypes[key] = tensor.dtype
                            sums[key] = (tensor.float() * share if tensor.is_floating_point() else tensor)
                            continue
                        if tensor.shape != sums[key].shape:
                            raise ValueError(f"{path / name}: tensor '{key}' has shape {tuple(tensor.shape)}, "
                                             f"{paths[0] / name} has {tuple(sums[key].shape)}")
                        if tensor.is_floating_point():
                            sums[key].add_(tensor.float(), alpha=share)
                        elif not torch.equal(tensor, sums[key]):
                            raise ValueError(f"{path / name}: integer tensor '{key}' differs from {paths[0] / name}'s")
            averaged = {key: value.to(dtypes[key]).contiguous() for key, value in sums.items()}
            save_file(averaged, str(tmp / name), metadata=metadata or {"format": "pt"})
        # write_json replaces the record a soup of soups copied from its first source
        write_json(tmp / SOUP_FILE, {"sources": [str(p) for p in paths], "weights": shares, **(record or {})})
        replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
