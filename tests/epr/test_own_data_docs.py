"""The EPR config on the own-data page is a valid config, and says what the page says."""

from __future__ import annotations

import json
import re
from pathlib import Path

from taskret.epr.pipeline import EPRConfig
from taskret.epr.training import TrainingConfig

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "own-data.md"


def test_the_own_data_pages_config_parses():
    blocks = re.findall(r"```json\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1
    config = EPRConfig.model_validate(json.loads(blocks[0]))
    assert (config.train, config.input_field, config.output_field, config.id_field) == (
        "my-task/train.jsonl", "input", "output", "id")
    assert config.context_window == 640
    TrainingConfig.from_dict(config.training)  # the training keys are valid too


def test_the_own_data_pages_key_table_names_every_config_key():
    text = PAGE.read_text(encoding="utf-8")
    table = text[text.index("### Every key"):text.index("### Fast settings")]
    missing = [key for key in EPRConfig.model_fields if f"`{key}`" not in table]
    assert not missing
    missing = [key for key in TrainingConfig().to_dict() if f"`{key}`" not in table]
    assert not missing
