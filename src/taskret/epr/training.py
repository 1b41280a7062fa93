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
    build_model(config)                                                 # -> SentenceTransformer
    dpr_loss(model, pairs, scale, batch_size)                           # the objective, no gradients
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

import dataclasses
import json
import logging
import math
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple, Sequence

import numpy as np

from ..data import DataError, Example, iter_records
from ..io import write_json
from ..retrieval.base import FIELDS, example_text

if TYPE_CHECKING:  # pragma: no cover
    import datasets
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

__all__ = [
    "TrainingConfig",
    "build_training_pairs",
    "build_model",
    "dpr_loss",
    "train_dual_encoder",
    "ROUTER_MAPPING",
]

#: Dataset column -> Router route, for the two-encoder model.
ROUTER_MAPPING = {"anchor": "query", "positive": "document", "negative": "document"}

#: Keys of ``epr_config.json`` that describe the run rather than configure it.
RESULT_KEYS = ("n_examples", "n_labelled", "n_skipped", "n_pairs", "steps", "wall_time_s", "epoch_times_s",
               "final_loss", "mean_loss", "device")


@dataclass
class TrainingConfig:
    """Hyperparameters of the EPR dual-encoder training.

    ``batch_size`` is the number of triplets per optimiser step (the paper's 120); the GradCache
    loss embeds them ``mini_batch_size`` sequences at a time, so memory is bounded by the latter.
    ``field`` is the text of a candidate example that the example encoder sees; queries are always
    the example's input.
    """

    base_model: str = "minilm-l6"
    shared_encoder: bool = False
    field: str = "input"
    epochs: int = 3
    batch_size: int = 120
    mini_batch_size: int = 16
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    seed: int = 0
    max_seq_length: int = 128
    scale: float = 20.0
    no_duplicates: bool = True
    logging_steps: int = 1

    def __post_init__(self) -> None:
        if self.field not in FIELDS:
            raise ValueError(f"field must be one of {FIELDS}, got '{self.field}'")
        for name in ("epochs", "batch_size", "mini_batch_size", "max_seq_length", "logging_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if not self.scale > 0:
            raise ValueError(f"scale must be positive, got {self.scale}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be non-negative, got {self.weight_decay}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrainingConfig":
        """Inverse of :meth:`to_dict`; also reads an ``epr_config.json`` (whose run keys it ignores)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names - set(RESULT_KEYS)
        if unknown:
            raise ValueError(f"unknown TrainingConfig keys: {', '.join(sorted(unknown))}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "TrainingConfig":
        return cls.from_dict(json.loads(text))


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
    columns, _ = _sample_epoch(by_id, usable, config, epoch)
    return datasets.Dataset.from_dict(columns)


class _RowKeys(NamedTuple):
    """What a triplet row must not share with the other rows of its batch (see :func:`_epoch_batches`)."""

    query: tuple[str, ...]  # the labelled example: its id and its input text
    positive: tuple[str, ...]  # the positive example: id and input text
    negative: tuple[str, ...]  # the hard negative example: id and input text
    positive_text: str  # the text the example encoder sees
    negative_text: str


def _example_keys(example: Example) -> tuple[str, ...]:
    return ("id:" + example.id, "x:" + example.input)


def _sample_epoch(by_id: dict[str, Example], usable: _Usable,
                  config: TrainingConfig, epoch: int) -> tuple[dict[str, list[str]], list[_RowKeys]]:
    """One epoch's triplet columns, and each row's keys for duplicate-free batching."""
    rng = np.random.default_rng([config.seed, epoch])
    columns: dict[str, list[str]] = {"anchor": [], "positive": [], "negative": []}
    keys: list[_RowKeys] = []
    for query_id, positives, negatives in usable:
        query = by_id[query_id]
        positive = by_id[positives[int(rng.integers(len(positives)))]]
        negative = by_id[negatives[int(rng.integers(len(negatives)))]]
        columns["anchor"].append(query.input)
        columns["positive"].append(example_text(positive, config.field))
        columns["negative"].append(example_text(negative, config.field))
        keys.append(_RowKeys(_example_keys(query), _example_keys(positive), _example_keys(negative),
                             columns["positive"][-1], columns["negative"][-1]))
    return columns, keys


# -- batching ------------------------------------------------------------------------------------


def _epoch_batches(rows: Sequence[_RowKeys], batch_size: int, rng: np.random.Generator,
                   no_duplicates: bool) -> list[list[int]]:
    """Shuffle rows ``0..n-1`` into ``ceil(n / batch_size)`` batches, all full but the last.

    With ``no_duplicates``, each batch is first filled greedily, in shuffled order, with rows that
    add no false negative to the batch (a document scored as a negative although it is as good
    as, or better than, the query's positive):

    * no labelled example twice (by id or input text): each one's positive would be the other's
      negative;
    * no query's own example among the batch's documents (by id or input text, whatever ``field``
      the documents show): a query's own example is its best possible demonstration, and for
      ``field="input"`` it is literally the query's text, which both encoders start by scoring 1.0;
    * no positive text that is also another document of the batch.

    Two rows sharing a hard negative are harmless and allowed. If the remaining rows cannot fill
    the batch that way (a small pool in which every example is everyone's candidate), it is topped
    up with the next rows regardless, so no tiny batches are made and duplicates stay as rare as
    the data allows.
    """
    order = [int(i) for i in rng.permutation(len(rows))]
    if not no_duplicates:
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    batches: list[list[int]] = []
    remaining = order
    while remaining:
        batch: list[int] = []
        queries: set[str] = set()  # keys of the batch's labelled examples
        doc_examples: set[str] = set()  # keys of the examples shown as its documents
        positive_texts: set[str] = set()
        doc_texts: set[str] = set()
        deferred: list[int] = []
        for position, index in enumerate(remaining):
            if len(batch) == batch_size:
                deferred.extend(remaining[position:])
                break
            row = rows[index]
            row_docs = row.positive + row.negative
            if (not queries.isdisjoint(row.query) or not doc_examples.isdisjoint(row.query)
                    or not queries.isdisjoint(row_docs) or row.positive_text in doc_texts
                    or row.negative_text in positive_texts):
                deferred.append(index)
                continue
            batch.append(index)
            queries.update(row.query)
            doc_examples.update(row_docs)
            positive_texts.add(row.positive_text)
            doc_texts.update((row.positive_text, row.negative_text))
        top_up = min(batch_size - len(batch), len(deferred))
        batch.extend(deferred[:top_up])
        batches.append(batch)
        remaining = deferred[top_up:]
    return batches


def _make_block_sampler():
    """The batch sampler class, built lazily so that importing this module does not import torch."""
    from sentence_transformers.base.sampler import DefaultBatchSampler

    class EpochBlockBatchSampler(DefaultBatchSampler):
        """Batches of a dataset made of consecutive per-epoch blocks, epoch by epoch (see
        :func:`_epoch_batches`). Computed up front, so ``len()`` is exact and the trainer's
        schedule matches the batches; the trainer's own generator and seed are not used.
        """

        def __init__(self, dataset, batch_size: int, drop_last: bool, valid_label_columns=None, generator=None,
                     seed: int = 0, *, blocks: Sequence[Sequence[_RowKeys]] = (), sample_seed: int = 0,
                     no_duplicates: bool = True) -> None:
            super().__init__(dataset, batch_size=batch_size, drop_last=drop_last,
                             valid_label_columns=valid_label_columns, generator=generator, seed=seed)
            if sum(len(b) for b in blocks) != len(dataset):
                raise ValueError(f"epoch blocks cover {sum(len(b) for b in blocks)} rows but the dataset "
                                 f"has {len(dataset)}")
            self.batches: list[list[int]] = []
            self.block_of_batch: list[int] = []
            start = 0
            for epoch, block_keys in enumerate(blocks):
                rng = np.random.default_rng([sample_seed, epoch, 1])
                block = _epoch_batches(block_keys, batch_size, rng, no_duplicates)
                if drop_last:
                    block = [b for b in block if len(b) == batch_size]
                self.batches.extend([[start + i for i in b] for b in block])
                self.block_of_batch.extend([epoch] * len(block))
                start += len(block_keys)

        def __iter__(self) -> Iterator[list[int]]:
            return iter([list(b) for b in self.batches])

        def __len__(self) -> int:
            return len(self.batches)

    return EpochBlockBatchSampler


def _fractional_epochs(block_of_batch: Sequence[int]) -> list[float]:
    """Epoch reached after each batch: ``e + i / n_e`` after the ``i``-th of epoch ``e``'s ``n_e`` batches."""
    counts: dict[int, int] = {}
    for block in block_of_batch:
        counts[block] = counts.get(block, 0) + 1
    seen: dict[int, int] = {}
    out = []
    for block in block_of_batch:
        seen[block] = seen.get(block, 0) + 1
        out.append(block + seen[block] / counts[block])
    return out


# -- model ---------------------------------------------------------------------------------------


def build_model(config: TrainingConfig, device: str | None = None) -> "SentenceTransformer":
    """The untrained dual encoder: a Router of two copies of the base model, or the base itself if shared."""
    import copy

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Router

    from ..models import resolve_model

    base = SentenceTransformer(str(resolve_model(config.base_model)), device=device or "cpu")
    if config.shared_encoder:
        model = base
    else:
        modules = list(base.children())
        router = Router.for_query_document(
            query_modules=[copy.deepcopy(m) for m in modules],
            document_modules=[copy.deepcopy(m) for m in modules],
        )
        model = SentenceTransformer(modules=[router], device=device or "cpu",
                                    similarity_fn_name=base.similarity_fn_name or "cosine")
    model.max_seq_length = config.max_seq_length
    return model


def dpr_loss(model: "SentenceTransformer", pairs: "datasets.Dataset", scale: float = 20.0,
             batch_size: int = 120) -> float:
    """The DPR objective on ``pairs`` in consecutive batches of ``batch_size``, without gradients.

    Each query is scored (cosine x ``scale``) against every positive and negative of its batch,
    i.e. its own positive and ``2B - 1`` negatives; the result is the mean negative log-likelihood
    of the own positive over all rows. For checking a trained model, not for training.
    """
    import torch

    kwargs = dict(batch_size=64, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False)
    queries = model.encode_query(list(pairs["anchor"]), **kwargs).float().cpu()
    positives = model.encode_document(list(pairs["positive"]), **kwargs).float().cpu()
    negatives = model.encode_document(list(pairs["negative"]), **kwargs).float().cpu()
    total = 0.0
    for start in range(0, len(pairs), batch_size):
        q = queries[start:start + batch_size]
        docs = torch.cat([positives[start:start + batch_size], negatives[start:start + batch_size]])
        logits = scale * q @ docs.T
        targets = torch.arange(len(q))
        total += float(torch.nn.functional.cross_entropy(logits, targets, reduction="sum"))
    return total / len(pairs)


# -- training ------------------------------------------------------------------------------------


@contextmanager
def _quiet(progress: bool) -> Iterator[None]:
    """Without progress, silence transformers' and datasets' bars and info logs for the block."""
    if progress:
        yield
        return
    import datasets
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    ds_bars = datasets.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        hf_logging.set_verbosity(verbosity)
        if ds_bars:
            datasets.enable_progress_bars()


def _read_labels(labels_path: Path) -> tuple[list[dict], list[int]]:
    rows, lines = [], []
    for line, record in iter_records(labels_path):
        rows.append(record)
        lines.append(line)
    return rows, lines


def _replace_dir(tmp: Path, target: Path) -> None:
    """Rename a complete folder onto ``target``, replacing an older one."""
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, old / target.name)
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def train_dual_encoder(examples: Sequence[Example], labels_path: str | os.PathLike, out_dir: str | os.PathLike,
                       config: TrainingConfig | None = None, progress: bool = True) -> Path:
    """Train EPR's retriever on ``examples`` labelled by ``labels_path``; return ``out_dir / "model"``.

    Writes ``out_dir/model`` (sentence-transformers folder: ``SentenceTransformer(folder)``,
    ``encode_query`` for inputs, ``encode_document`` for examples), ``out_dir/training_log.jsonl``
    (one line per logged step: step, epoch, loss, learning_rate, grad_norm) and, last,
    ``out_dir/epr_config.json`` (the config plus n_examples, n_labelled, n_skipped, n_pairs,
    steps, wall_time_s, epoch_times_s, final_loss (last logged step), mean_loss (over the run),
    device). ``examples`` is the whole pool the labels' ids refer to (usually the training set).
    Runs on the accelerator if there is one; on CPU it uses torch's current thread count.

    A failed run leaves no ``model`` folder of its own (an older one stays) and no
    ``epr_config.json``; ``training_log.jsonl`` keeps the steps it reached.
    """
    import datasets
    import torch
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss
    from transformers import PrinterCallback, TrainerCallback, set_seed

    class _Trainer(SentenceTransformerTrainer):
        def add_model_card_callback(self, default_args_dict):
            # No model card is written (the model is saved with create_model_card=False), so skip
            # the callback that samples the dataset for card widgets.
            pass

    config = config or TrainingConfig()
    labels_path = Path(labels_path)
    out_dir = Path(out_dir)
    started = time.perf_counter()

    rows, lines = _read_labels(labels_path)
    by_id, usable, n_skipped = _validated_rows(examples, rows, str(labels_path), lines)
    epochs = [_sample_epoch(by_id, usable, config, epoch) for epoch in range(config.epochs)]
    train_dataset = datasets.concatenate_datasets([datasets.Dataset.from_dict(cols) for cols, _ in epochs])
    block_keys = [keys for _, keys in epochs]

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "epr_config.json").unlink(missing_ok=True)  # a finished run's marker, rewritten last
    work = Path(tempfile.mkdtemp(prefix=".epr-train-", dir=out_dir))
    log_path = out_dir / "training_log.jsonl"
    try:
        with _quiet(progress):
            set_seed(config.seed)
            model = build_model(config)
            loss = CachedMultipleNegativesRankingLoss(model, scale=config.scale,
                                                      mini_batch_size=config.mini_batch_size,
                                                      show_progress_bar=False)
            sampler_class = _make_block_sampler()
            samplers: list = []

            def make_sampler(dataset, **kwargs):
                sampler = sampler_class(dataset, blocks=block_keys, sample_seed=config.seed,
                                        no_duplicates=config.no_duplicates, **kwargs)
                samplers.append(sampler)
                return sampler

            args = SentenceTransformerTrainingArguments(
                output_dir=str(work / "trainer"),
                num_train_epochs=1,  # the dataset already holds config.epochs epochs, in order
                per_device_train_batch_size=config.batch_size,
                learning_rate=config.learning_rate,
                weight_decay=config.weight_decay,
                warmup_steps=config.warmup_ratio,  # a fraction of the steps when < 1
                lr_scheduler_type="linear",
                seed=config.seed,
                data_seed=config.seed,
                save_strategy="no",
                eval_strategy="no",
                report_to="none",
                logging_strategy="steps",
                logging_steps=config.logging_steps,
                logging_first_step=True,
                disable_tqdm=not progress,
                dataloader_drop_last=False,
                dataloader_pin_memory=torch.cuda.is_available(),
                batch_sampler=make_sampler,
                router_mapping={} if config.shared_encoder else dict(ROUTER_MAPPING),
            )

            log_file = open(log_path, "w", encoding="utf-8")
            log_rows: list[dict] = []
            epoch_end_times: dict[int, float] = {}

            class _Log(TrainerCallback):
                fractions: list[float] | None = None

                def _epoch_at(self, step: int) -> float:
                    if self.fractions is None and samplers:
                        self.fractions = _fractional_epochs(samplers[-1].block_of_batch)
                    fractions = self.fractions or []
                    return fractions[step - 1] if 0 < step <= len(fractions) else float("nan")

                def on_step_end(self, args_, state, control, **kwargs):
                    epoch = self._epoch_at(state.global_step)
                    if not math.isnan(epoch) and epoch == int(epoch):
                        epoch_end_times[int(epoch)] = time.perf_counter()

                def on_log(self, args_, state, control, logs=None, **kwargs):
                    if not logs or "loss" not in logs:
                        return
                    row = {"step": state.global_step, "epoch": round(self._epoch_at(state.global_step), 4),
                           "loss": float(logs["loss"]), "learning_rate": float(logs.get("learning_rate", float("nan")))}
                    if logs.get("grad_norm") is not None:
                        row["grad_norm"] = float(logs["grad_norm"])
                    log_rows.append(row)
                    log_file.write(json.dumps(row) + "\n")
                    log_file.flush()

            try:
                trainer = _Trainer(model=model, args=args, train_dataset=train_dataset, loss=loss, callbacks=[_Log()])
                if not progress:
                    trainer.remove_callback(PrinterCallback)  # prints every log dict when tqdm is off
                train_start = time.perf_counter()
                result = trainer.train()
            finally:
                log_file.close()

            model_tmp = work / "model"
            model.save(str(model_tmp), safe_serialization=True, create_model_card=False)
        device = str(next(model.parameters()).device)
        _replace_dir(model_tmp, out_dir / "model")
        epoch_times, previous = [], train_start
        for epoch in sorted(epoch_end_times):
            epoch_times.append(round(epoch_end_times[epoch] - previous, 3))
            previous = epoch_end_times[epoch]
        summary = {
            **config.to_dict(),
            "n_examples": len(examples),
            "n_labelled": len(usable),
            "n_skipped": n_skipped,
            "n_pairs": len(train_dataset),
            "steps": int(result.global_step),
            "wall_time_s": round(time.perf_counter() - started, 3),
            "epoch_times_s": epoch_times,
            "final_loss": log_rows[-1]["loss"] if log_rows else None,
            "mean_loss": float(result.training_loss),
            "device": device,
        }
        write_json(out_dir / "epr_config.json", summary)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return out_dir / "model"
