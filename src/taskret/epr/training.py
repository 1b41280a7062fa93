"""EPR training stage: fit a dual encoder to LM-scored labels with the DPR objective.

EPR (Rubin et al., "Learning to Retrieve Prompts for In-Context Learning") labels each training
example ``x`` with the candidates ``e`` that most (positives) and least (hard negatives) help an LM
produce ``y`` given ``e; x``, and trains two encoders so that ``sim(x, e) = E_X(x) . E_P(e)`` ranks
the positives first. The loss is DPR's: every query scores its one sampled positive against the
positives *and* hard negatives of all the other queries in the batch (``2B - 1`` negatives for a
batch of ``B``); sentence-transformers calls this MultipleNegativesRankingLoss on (anchor,
positive, negative) triplets, and its GradCache variant lets a batch of 120 fit a small machine.

Public API::

    TrainingConfig                                                      # hyperparameters, JSON round-trip
    build_training_pairs(examples, labels_rows, config, epoch)          # -> datasets.Dataset triplets
    triplet_sampler(examples_by_id, config)                             # how one epoch's triplets are drawn
    train_dual_encoder(examples, labels_path, out_dir, config)          # -> out_dir / "model"

Design notes
------------
* Two encoders: both are deep copies of the base model's modules (Transformer, Pooling, Normalize)
  inside one sentence-transformers ``Router`` (``Router.for_query_document``); the trainer's
  ``router_mapping`` sends the ``anchor`` column to the ``query`` route and ``positive``/``negative``
  to the ``document`` route. ``model.encode_query`` then runs the input encoder and
  ``model.encode_document`` the example encoder, and ``SentenceTransformer(out_dir / "model")``
  loads the pair back as one model, so :class:`~taskret.retrieval.dense.DenseRetriever` uses it
  unchanged. ``shared_encoder=True`` trains one plain SentenceTransformer instead.
* Similarity is cosine (the encoders end in ``Normalize``) times ``scale`` (an inverse
  temperature), which matches how the dense retriever searches: inner products of normalised
  vectors. The paper's DPR used raw inner products; cosine with a temperature is the usual
  sentence-transformers equivalent and keeps the index and the training objective consistent.
* Epochs and sampling: each epoch draws, for every labelled example, ONE positive uniformly from
  its positives and ONE hard negative uniformly from its negatives, seeded by ``(seed, epoch)``.
  The per-epoch triplets are concatenated into one dataset that the trainer walks once
  (``num_train_epochs=1``) with a batch sampler that keeps the epochs in order and shuffles
  within an epoch, so the learning-rate schedule (linear, with warm-up) spans all epochs and
  ``training_log.jsonl`` reports the true epoch.
* Batches (``no_duplicates=True``) avoid in-batch false negatives, the job of sentence-transformers'
  ``BatchSamplers.NO_DUPLICATES``, which is not used: it compares texts only (so it misses a
  query's own example shown with ``field="output"`` or ``"both"``, a perfect demonstration that
  the loss would push away), and it defers every repeated text, so on EPR's small pools, where
  every training example is everyone's candidate, it leaves most batches nearly empty. Here a
  batch takes rows that repeat no labelled example, show no query's own example as a document
  (by id or input text) and repeat no positive as another document; shared hard negatives are
  harmless. When the data cannot fill a batch that way it is topped up regardless, so every epoch
  has ``ceil(n / batch_size)`` batches, all full but the last.
* Labels rows with an unknown id (the row's own or a candidate's) or with no positives raise a
  :class:`~taskret.data.DataError` (a ``ValueError``) naming the labels file and line. A row with
  no hard negatives (or whose negatives are all among its positives) is skipped with a warning:
  a triplet dataset needs a negative in every row, and EPR's labeller always gives some unless the
  candidate pool was tiny. Every row lacking them is an error.
* Output: ``out_dir/model`` (a sentence-transformers folder, safetensors weights) is written to a
  temporary folder beside it and renamed into place when complete; ``training_log.jsonl`` is
  streamed during training; ``epr_config.json`` is written last and marks a finished run.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, ClassVar, Sequence

from ..data import Example
from ..io import DataError, iter_records
from ..retrieval.base import FIELDS, example_text
from ..training.batching import RowKeys
from ..training.config import DPRSettings, TrainerSettings, check_training_values
from ..training.encoders import build_bi_encoder
from ..training.fit import RUN_KEYS
from ..training.losses import dpr_training_loss
from ..training.trainer import EpochRows, ModelRecipe, RowSampler, TrainingRow, train

if TYPE_CHECKING:  # pragma: no cover
    import datasets

    from ..retrieval import DenseRetriever, Retriever

logger = logging.getLogger(__name__)

__all__ = [
    "TrainingConfig",
    "build_training_pairs",
    "triplet_sampler",
    "train_dual_encoder",
    "ROUTER_MAPPING",
]

#: The columns of a triplet dataset (the query's input, a positive's and a hard negative's text).
TRIPLET_COLUMNS = ("anchor", "positive", "negative")

#: Dataset column -> Router route, for the two-encoder model.
ROUTER_MAPPING = {"anchor": "query", "positive": "document", "negative": "document"}

#: How an epoch picks a labelled example's positive: uniformly among its top-k, or always the LM's best.
POSITIVE_CHOICES = ("sample", "best")

#: The finished run's summary (the config plus the run's counts), written last.
CONFIG_FILE = "epr_config.json"

#: Keys of ``epr_config.json`` that describe the run rather than configure it.
RESULT_KEYS = ("n_examples", "n_labelled", "n_skipped", "n_pairs", *RUN_KEYS)


@dataclass
class TrainingConfig(DPRSettings, TrainerSettings):
    """Hyperparameters of the EPR dual-encoder training.

    ``batch_size`` is the number of triplets per optimiser step (the paper's 120); the GradCache
    loss embeds them ``mini_batch_size`` sequences at a time, so memory is bounded by the latter.
    ``field`` is the text of a candidate example that the example encoder sees (and the index holds);
    queries are always the example's input. ``both`` (``"{input}\t{output}"``) is EPR's code's
    ``setup_type=qa`` and measured better than ``input`` on MTOP (42.4 against 39.3 EM on all 859 test inputs,
    p = 0.010: ``benchmarks/epr/epr_ladder.py``, rungs a and b). ``positive``: each epoch's positive of a
    labelled example, ``sample`` (one of its top-k, uniformly) or ``best`` (always the LM's best, as EPR's code
    trains: DPR takes a sample's first positive unless told to shuffle them); either way the hard negative is one
    of the bottom-k, uniformly.
    """

    shared_encoder: bool = False
    field: str = "both"
    epochs: int = 3
    batch_size: int = 120
    positive: str = "sample"

    RESULT_KEYS: ClassVar[tuple[str, ...]] = RESULT_KEYS  # from_dict reads an epr_config.json, ignoring these

    def __post_init__(self) -> None:
        if self.field not in FIELDS:
            raise ValueError(f"field must be one of {FIELDS}, got '{self.field}'")
        if self.positive not in POSITIVE_CHOICES:
            raise ValueError(f"positive must be one of {POSITIVE_CHOICES}, got '{self.positive}'")
        check_training_values(self, ("epochs", "batch_size", "max_seq_length", "logging_steps"))


# -- training pairs ------------------------------------------------------------------------------


def _id_list(row: dict, key: str, where: tuple[str, int]) -> list[str]:
    value = row.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(where[0], where[1], key, "expected a list of example ids")
    return value


def _check_ids(ids: Sequence[str], by_id: dict[str, Example], key: str, where: tuple[str, int]) -> None:
    for candidate in ids:
        if candidate not in by_id:
            raise DataError(where[0], where[1], key, f"unknown example id '{candidate}'")


_Usable = list[tuple[str, list[str], list[str]]]  # (query id, positive ids, negative ids) per usable row


def _validated_rows(examples: Sequence[Example], labels_rows: Sequence[dict], source: str,
                    line_numbers: Sequence[int] | None) -> tuple[dict[str, Example], _Usable, int]:
    """(examples by id, usable (id, positives, negatives) rows, number of rows skipped)."""
    by_id: dict[str, Example] = {}
    for example in examples:
        if example.id in by_id:
            raise ValueError(f"duplicate example id '{example.id}' in the training examples")
        by_id[example.id] = example
    if line_numbers is not None and len(line_numbers) != len(labels_rows):
        raise ValueError("line_numbers must give one line number per labels row")
    usable: _Usable = []
    skipped: list[str] = []
    for index, row in enumerate(labels_rows):
        where = (source, line_numbers[index] if line_numbers is not None else index + 1)
        if not isinstance(row, dict):
            raise DataError(where[0], where[1], None, "expected a JSON object")
        query_id = row.get("id")
        if not isinstance(query_id, str):
            raise DataError(where[0], where[1], "id", "missing or not a string")
        if query_id not in by_id:
            raise DataError(where[0], where[1], "id", f"unknown example id '{query_id}'")
        positives = _id_list(row, "positives", where)
        negatives = _id_list(row, "negatives", where)
        _check_ids(positives, by_id, "positives", where)
        _check_ids(negatives, by_id, "negatives", where)
        if not positives:
            raise DataError(where[0], where[1], "positives", f"example '{query_id}' has no positives")
        positive_set = set(positives)
        negatives = [n for n in negatives if n not in positive_set]
        if not negatives:
            skipped.append(query_id)
            continue
        usable.append((query_id, positives, negatives))
    if skipped:
        logger.warning("%s: skipped %d of %d labels rows with no hard negatives (e.g. '%s')",
                       source, len(skipped), len(labels_rows), skipped[0])
    if not usable:
        raise ValueError(f"{source}: no usable labels rows (every row lacks hard negatives)"
                         if labels_rows else f"{source}: no labels rows")
    return by_id, usable, len(skipped)


def build_training_pairs(examples: Sequence[Example], labels_rows: Sequence[dict], config: TrainingConfig,
                         epoch: int, *, source: str = "labels", line_numbers: Sequence[int] | None = None
                         ) -> "datasets.Dataset":
    """One epoch of (anchor, positive, negative) triplets, one per usable labels row, in row order.

    ``anchor`` is the labelled example's input; ``positive`` and ``negative`` are the
    ``config.field`` texts of one positive and one hard negative drawn uniformly from the row's
    lists with a generator seeded by ``(config.seed, epoch)``: the same config and epoch give the
    same triplets, another epoch gives another draw. ``source`` and ``line_numbers`` only serve
    error messages (the labels file and the line of each row; by default the row's 1-based index).
    """
    import datasets

    by_id, usable, _ = _validated_rows(examples, labels_rows, source, line_numbers)
    return datasets.Dataset.from_dict(triplet_sampler(by_id, config).epoch(usable, config.seed, epoch).columns)


def _example_keys(example: Example) -> tuple[str, ...]:
    return ("id:" + example.id, "x:" + example.input)


def triplet_sampler(by_id: dict[str, Example], config: TrainingConfig,
                    query_text: Callable[[Example], str] | None = None
                    ) -> RowSampler[tuple[str, list[str], list[str]]]:
    """Draws, per usable labels row (query id, positive ids, negative ids), one triplet: the query's input
    (or ``query_text(query)``, e.g. with a task instruction in front), one positive and one hard negative (their
    ``config.field`` texts), with the row's batching keys."""

    def draw(usable_row: tuple[str, list[str], list[str]], rng) -> list[TrainingRow]:
        query_id, positives, negatives = usable_row
        query = by_id[query_id]
        positive = by_id[positives[0 if config.positive == "best" else int(rng.integers(len(positives)))]]
        negative = by_id[negatives[int(rng.integers(len(negatives)))]]
        positive_text, negative_text = example_text(positive, config.field), example_text(negative, config.field)
        keys = RowKeys(_example_keys(query), _example_keys(positive), _example_keys(negative), positive_text,
                       negative_text)
        anchor = query.input if query_text is None else query_text(query)
        return [TrainingRow({"anchor": anchor, "positive": positive_text, "negative": negative_text}, keys)]

    return RowSampler(TRIPLET_COLUMNS, draw)


# -- training ------------------------------------------------------------------------------------


def _read_labels(labels_path: Path) -> tuple[list[dict], list[int]]:
    rows, lines = [], []
    for line, record in iter_records(labels_path):
        rows.append(record)
        lines.append(line)
    return rows, lines


def train_dual_encoder(examples: Sequence[Example], labels_path: str | os.PathLike, out_dir: str | os.PathLike,
                       config: TrainingConfig | None = None, progress: bool = True,
                       query_text: Callable[[Example], str] | None = None) -> Path:
    """Train EPR's retriever on ``examples`` labelled by ``labels_path``; return ``out_dir / "model"``.

    Writes ``out_dir/model`` (sentence-transformers folder: ``SentenceTransformer(folder)``,
    ``encode_query`` for inputs, ``encode_document`` for examples), ``out_dir/training_log.jsonl``
    (one line per logged step: step, epoch, loss, learning_rate, grad_norm) and, last,
    ``out_dir/epr_config.json`` (the config plus n_examples, n_labelled, n_skipped, n_pairs,
    steps, wall_time_s, epoch_times_s, final_loss (last logged step), mean_loss (over the run),
    device). ``examples`` is the whole pool the labels' ids refer to (usually the training set).
    ``query_text`` makes a query's text from its example (default: the input; :mod:`taskret.epr.multitask`
    puts each task's instruction in front).
    Runs on the accelerator if there is one; on CPU it uses torch's current thread count.

    A failed run leaves no ``model`` folder of its own (an older one stays) and no
    ``epr_config.json``; ``training_log.jsonl`` keeps the steps it reached.
    """
    config = config or TrainingConfig()
    labels_path = Path(labels_path)
    started = time.perf_counter()

    rows, lines = _read_labels(labels_path)
    by_id, usable, n_skipped = _validated_rows(examples, rows, str(labels_path), lines)
    recipe = ModelRecipe(lambda: build_bi_encoder(config.base_model, shared_encoder=config.shared_encoder,
                                                  max_seq_length=config.max_seq_length),
                         lambda model: dpr_training_loss(model, config),
                         router_mapping=None if config.shared_encoder else ROUTER_MAPPING)

    def counts(epochs: list[EpochRows]) -> dict:
        return {"n_examples": len(examples), "n_labelled": len(usable), "n_skipped": n_skipped,
                "n_pairs": sum(len(epoch) for epoch in epochs)}

    return train(config, usable, triplet_sampler(by_id, config, query_text), recipe, out_dir, CONFIG_FILE, counts,
                 no_duplicates=config.no_duplicates, progress=progress, started=started)


def load_retriever(directory: str | os.PathLike, device: str | None = None) -> "DenseRetriever | Retriever":
    """The retriever of an EPR run (``epr:DIR``): DIR is an EPR work folder, its ``retriever/`` training output
    or a saved index. A saved index if there is one, else the trained dual encoder (indexed by the caller)."""
    from ..io import read_json
    from ..retrieval import DenseRetriever, Retriever

    directory = Path(directory)
    for index_dir in (directory / "index", directory):
        if (index_dir / "meta.json").exists():
            return Retriever.load(index_dir)
    for train_dir in (directory / "retriever", directory):
        if (train_dir / "model").is_dir():
            config = read_json(train_dir / CONFIG_FILE) if (train_dir / CONFIG_FILE).exists() else {}
            return DenseRetriever(encoder=str(train_dir / "model"), field=config.get("field", "input"), device=device)
    raise FileNotFoundError(f"{directory}: no EPR index (meta.json) or trained model (model/) found")
