"""Tiny hand-written task files for the TART tests: a BEIR folder, MTOP / Break / AmbigQA files, and a data
directory in the shared layout holding all of them."""

from __future__ import annotations

import json
from pathlib import Path

from taskret.tart.pipeline import TartRunConfig

from ..conftest import write_jsonl_rows

CORPUS = [
    {"_id": "d1", "title": "Aspirin and the heart", "text": "Aspirin lowers the risk of heart attacks."},
    {"_id": "d2", "title": "", "text": "Vitamin C does not prevent the common cold."},
    {"_id": 3, "text": "Coffee consumption and sleep quality in adults."},  # numeric id, no title
]
QUERIES = [
    {"_id": "q1", "text": "Aspirin prevents heart attacks.", "metadata": {}},
    {"_id": "q2", "text": "Vitamin C cures colds."},
    {"_id": "q3", "text": "Coffee harms sleep."},
]
QRELS = {"test": [("q1", "d1", 1), ("q2", "d2", 1), ("q2", "3", 2)], "train": [("q3", "3", 1)]}


def write_beir(folder: Path, corpus=CORPUS, queries=QUERIES, qrels=QRELS, header: bool = True) -> Path:
    """A BEIR folder written by hand; ``qrels`` maps split -> rows (or raw file text)."""
    write_jsonl_rows(folder / "corpus.jsonl", corpus)
    write_jsonl_rows(folder / "queries.jsonl", queries)
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    for split, rows in qrels.items():
        text = rows if isinstance(rows, str) else (
            ("query-id\tcorpus-id\tscore\n" if header else "") + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in rows))
        (folder / "qrels" / f"{split}.tsv").write_text(text, encoding="utf-8")
    return folder


def write_mtop(path: Path) -> Path:
    return write_jsonl_rows(path, [
        {"idx": "m1", "question": "wake me up at 7 am", "logical_form": "[IN:CREATE_ALARM [SL:DATE_TIME at 7 am ] ]"},
        {"idx": "m2", "question": "what is the weather in paris",
         "logical_form": "[IN:GET_WEATHER [SL:LOCATION paris ] ]"},
        {"idx": "m3", "question": "set a new alarm", "logical_form": "[IN:CREATE_ALARM ]"},
        {"idx": "m4", "question": "make an alarm", "logical_form": "[IN:CREATE_ALARM  ]"},  # same parse as m3
    ])


def write_break(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "question_id,question_text,decomposition,operators,split\n"
        "b1,show me flights from boston to denver,return flights ;return #1 from  boston ;return #2 to denver,"
        "\"['select', 'filter', 'filter']\",dev\n"
        "b2,how many red cubes are there,return red cubes ;return number of #1,\"['select', 'aggregate']\",dev\n"
        "b3,what is the capital of france,return capital of france,\"['select']\",dev\n",
        encoding="utf-8")
    return path


AMBIGQA_ITEMS = [
    {"id": "a1", "question": "Who played the doctor in dexter season 1?",
     "annotations": [{"type": "singleAnswer", "answer": ["Tony Goldwyn"]}]},  # unambiguous: left out
    {"id": "a2", "question": "When did the simpsons first air?",
     "annotations": [
         {"type": "multipleQAs", "qaPairs": [
             {"question": "When did the simpsons first air as a short?", "answer": ["1987"]},
             {"question": "When did the simpsons first air as a half-hour show?", "answer": ["1989"]}]},
         {"type": "multipleQAs", "qaPairs": [  # a second annotator repeats one rewrite
             {"question": "When did the simpsons first air as a  short?", "answer": ["April 19, 1987"]}]},
     ]},
    {"id": 3, "question": "Who won the world cup?",
     "annotations": [{"type": "multipleQAs", "qaPairs": [
         {"question": "Who won the 2018 world cup?", "answer": ["France"]},
         {"question": "Who won the 2014 world cup?", "answer": ["Germany"]}]}]},
]


def make_data_dir(root: Path) -> Path:
    """A data directory in the shared layout, with tiny files for every built-in task."""
    write_beir(root / "scifact")
    write_mtop(root / "mtop" / "test.jsonl")
    write_mtop(root / "mtop" / "train.jsonl")
    write_break(root / "break" / "test.csv")
    (root / "ambigqa").mkdir(parents=True)
    (root / "ambigqa" / "dev_light.json").write_text(json.dumps(AMBIGQA_ITEMS), encoding="utf-8")
    return root


class Say:
    """A console that keeps what it is told."""

    def __init__(self):
        self.lines: list[str] = []

    def print(self, text):
        self.lines.append(str(text))


def write_task(root, task, split):
    corpus = [{"_id": d.id, "title": d.title, "text": d.text} for d in task.corpus.values()]
    queries = [{"_id": q, "text": text} for q, text in task.queries.items()]
    qrels = [(q, d, r) for q, judged in task.qrels.items() for d, r in judged.items()]
    return write_beir(root / task.name, corpus=corpus, queries=queries, qrels={split: qrels})


def make_config(beir, work, tiny, **overrides) -> TartRunConfig:
    settings = dict(
        work_dir=str(work), train_tasks=[str(beir["parses"]), str(beir["steps"])], instructions=beir["instructions"],
        n_hard=2, n_random=1, n_unfollowing=2,
        dual={"base_model": str(tiny), "batch_size": 4, "mini_batch_size": 4, "max_seq_length": 32,
              "learning_rate": 1e-3},
        full={"base_model": str(tiny), "batch_size": 16, "max_length": 64},
        redenoise=True, distil={"batch_size": 4, "max_seq_length": 32},
        eval_tasks=[str(beir["facts"])], k=5, rerank_top_k=4)
    settings.update(overrides)
    return TartRunConfig(**settings)
