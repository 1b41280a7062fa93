"""Shared fixtures: a tiny seeded Llama with the real SmolLM2 tokenizer, example pools, file writers.

Everything here runs offline and on a CPU; the real bundled models are used only where a test says so.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

from taskret.data import Example

TINY_SEED = 1234

# The tiny models do microseconds of work per op; thread hand-offs would dominate (and, on a busy
# 2-core machine, make a forward pass ~30x slower). One thread keeps the suite fast and its timing steady.
torch.set_num_threads(1)


def write_jsonl_rows(path: Path, rows: list[dict]) -> Path:
    """Test data written by hand (not through taskret.io, which is under test)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def read_jsonl_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


# A pool whose examples share little vocabulary, so lexical and semantic matches are unambiguous.
POOL_ROWS = [
    {"key": "weather", "q": "what is the weather forecast in paris tomorrow", "a": "GET_WEATHER paris tomorrow"},
    {"key": "alarm", "q": "set an alarm for seven in the morning", "a": "CREATE_ALARM seven morning"},
    {"key": "call", "q": "call my mother on whatsapp", "a": "CREATE_CALL mother whatsapp"},
    {"key": "music", "q": "play some jazz music by miles davis", "a": "PLAY_MUSIC jazz davis"},
    {"key": "timer", "q": "start a timer for twenty minutes", "a": "CREATE_TIMER twenty minutes"},
    {"key": "reminder", "q": "remind me to buy groceries after work", "a": "CREATE_REMINDER groceries"},
    {"key": "message", "q": "send a text message to john saying hello", "a": "SEND_MESSAGE john hello"},
    {"key": "news", "q": "show me the latest headlines about football", "a": "GET_NEWS football headlines"},
]


@pytest.fixture(scope="session")
def pool_examples() -> list[Example]:
    return [Example(r["key"], r["q"], r["a"]) for r in POOL_ROWS]


@pytest.fixture
def pool_files(tmp_path) -> tuple[Path, Path]:
    """A train/test pair in a custom layout (fields key/q/a)."""
    train = write_jsonl_rows(tmp_path / "pool_train.jsonl", POOL_ROWS)
    test = write_jsonl_rows(tmp_path / "pool_test.jsonl", [
        {"key": "t1", "q": "what will the weather be in paris", "a": "GET_WEATHER paris"},
        {"key": "t2", "q": "please set an alarm for six", "a": "CREATE_ALARM six"},
        {"key": "t3", "q": "call my brother", "a": "CREATE_CALL brother"},
    ])
    return train, test


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    from taskret.models import resolve_model

    return resolve_model("smollm2-135m")


@pytest.fixture(scope="session")
def tokenizer(smollm2_folder):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_folder)


def build_tiny_llama(tokenizer, seed: int = TINY_SEED, tie_word_embeddings: bool = True):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=tie_word_embeddings,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tiny_model(tokenizer):
    return build_tiny_llama(tokenizer)


@pytest.fixture(scope="session")
def tiny_lm(tiny_model, tokenizer):
    from taskret.backends.transformers import CausalLM

    return CausalLM(tiny_model, tokenizer, name="tiny")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_model, tokenizer) -> Path:
    """The tiny Llama and the real tokenizer saved as a Hugging Face folder, for `--lm PATH`."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def demo_task():
    from taskret.data import load_task

    return load_task("demo")


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide BERT with random weights and the real MiniLM tokenizer, saved as a folder:
    the base model of the dual-encoder tests."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from taskret.models import resolve_model

    folder = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(resolve_model("minilm-l6"))).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def ray_temp_dir():
    """A short folder for a local Ray cluster's sessions: Ray's socket paths under it must fit a Unix socket's 107
    bytes, which pytest's own temp folders (/tmp/pytest-of-USER/pytest-N/popen-gwK/...) can pass."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
