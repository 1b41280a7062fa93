"""The inverse cloze task: sentences as queries, the rest of their document as the relevant one."""

from __future__ import annotations

import pytest

from taskret.tart.ict import IctSettings, draw_ict, inverse_cloze_task, split_sentences, write_ict_folder
from taskret.tart.tasks import (
    Document,
    load_retrieval_task,
    load_training_tasks,
    read_beir,
    split_task_spec,
    task_source,
)
from tests.conftest import write_jsonl_rows

BOILERPLATE = "Ask your doctor before you change any medicine you take."


def _corpus(n: int = 12) -> dict[str, Document]:
    """Documents of four sentences: three of their own and one shared (boilerplate) sentence."""
    docs = {}
    for i in range(n):
        text = (f"Study number {i} measured the effect of compound {i} on blood pressure in adults. "
                f"Patients in trial {i} who took the compound had lower pressure after six weeks. "
                f"{BOILERPLATE} Short one {i}.")
        docs[f"d{i}"] = Document(f"d{i}", f"Trial {i}", text)
    docs["tiny"] = Document("tiny", "", "A document of a single sentence only, too short to give a query.")
    return docs


def test_split_sentences_at_sentence_ends_not_abbreviations():
    assert split_sentences("Cells grow. They divide, e.g. in culture. 3 mice died! Why? (Unclear.)") == [
        "Cells grow.", "They divide, e.g. in culture.", "3 mice died!", "Why?", "(Unclear.)"]
    assert split_sentences("  ") == []


def test_each_query_is_a_sentence_taken_out_of_its_document():
    corpus = _corpus()
    task = inverse_cloze_task(corpus, name="trials", settings=IctSettings(n_dev=2, keep_sentence=0.0))
    assert task.name == "trials" and len(task.queries) == 10  # 12 usable documents, 2 held out
    for qid, sentence in task.queries.items():
        (doc_id, relevance), = task.qrels[qid].items()
        assert relevance == 1 and sentence in split_sentences(corpus[doc_id].text)
        assert sentence not in task.corpus[doc_id].text
        assert task.corpus[doc_id].title == corpus[doc_id].title
        # Boilerplate and sentences under min_words are never queries.
        assert sentence != BOILERPLATE and not sentence.startswith("Short one")
    assert task.corpus["tiny"] == corpus["tiny"] and set(task.corpus) == set(corpus)
    kept = inverse_cloze_task(corpus, settings=IctSettings(n_dev=2, keep_sentence=1.0))
    assert all(kept.queries[q] in kept.corpus[next(iter(kept.qrels[q]))].text for q in kept.queries)


def test_splits_are_disjoint_share_one_corpus_and_are_reproducible():
    corpus = _corpus()
    settings = IctSettings(n_dev=3, n_train=4, seed=7)
    train = inverse_cloze_task(corpus, split="train", settings=settings)
    dev = inverse_cloze_task(corpus, split="dev", settings=settings)
    assert len(train.queries) == 4 and len(dev.queries) == 3 and not set(train.queries) & set(dev.queries)
    assert train.corpus == dev.corpus == inverse_cloze_task(corpus, split="test", settings=settings).corpus
    assert inverse_cloze_task(corpus, split="train", settings=settings).queries == train.queries
    other = inverse_cloze_task(corpus, split="train", settings=IctSettings(n_dev=3, n_train=4, seed=8))
    assert other.queries != train.queries
    # A document's query depends on its own seed only: drawing from fewer documents keeps the rest.
    smaller = inverse_cloze_task({k: v for k, v in corpus.items() if k != "d0"}, settings=IctSettings(n_dev=0))
    whole = inverse_cloze_task(corpus, settings=IctSettings(n_dev=0))
    assert all(whole.queries[q] == text for q, text in smaller.queries.items())


def test_bad_settings_and_empty_splits_are_refused():
    with pytest.raises(ValueError, match="keep_sentence"):
        IctSettings(keep_sentence=1.5)
    with pytest.raises(ValueError, match="min_sentences"):
        IctSettings(min_sentences=1)
    with pytest.raises(ValueError, match="no train queries"):
        inverse_cloze_task(_corpus(2), settings=IctSettings(n_dev=5))
    with pytest.raises(ValueError, match="splits train and dev"):
        inverse_cloze_task(_corpus(), split="validation")


def test_written_folder_reads_back_as_the_same_task(tmp_path):
    corpus = _corpus()
    settings = IctSettings(n_dev=2)
    out = write_ict_folder(draw_ict(corpus, settings), tmp_path / "ict", instructions=["Find the trial report"])
    for split in ("train", "dev"):
        expected = inverse_cloze_task(corpus, split=split, settings=settings)
        read = read_beir(out, split)
        assert read.queries == expected.queries and read.qrels == expected.qrels and read.corpus == expected.corpus
        assert read.instructions == ["Find the trial report"]
    with pytest.raises(FileExistsError, match="already exists"):
        write_ict_folder(draw_ict(corpus), out)
    with pytest.raises(ValueError, match="no ICT queries"):
        write_ict_folder(draw_ict(_corpus(2), IctSettings(n_dev=5)), tmp_path / "none")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ict"]  # nothing half-written beside it


def test_ict_specs_load_as_tasks_for_training_and_evaluation(tmp_path):
    folder = tmp_path / "trials"
    write_jsonl_rows(folder / "corpus.jsonl", [{"_id": d.id, "title": d.title, "text": d.text}
                                               for d in _corpus(60).values()])
    spec = f"ict:{folder}"
    dev = load_retrieval_task(spec, split="test")
    assert dev.name == "trials-ict" and len(dev.queries) == 50 and dev.instruction
    assert split_task_spec(f"{spec}:dev", "train") == (spec, "dev")
    assert split_task_spec(spec, "train") == (spec, "train")
    assert task_source(spec, "test") == task_source(spec, "dev") != task_source(spec, "train")
    loaded, _ = load_training_tasks([spec], limit=5, task_limits={"trials-ict": 3})
    assert [t.name for t in loaded] == ["trials-ict"] and len(loaded[0].queries) == 3
    assert not set(loaded[0].queries) & set(dev.queries)
    with pytest.raises(FileNotFoundError, match="not a built-in task"):
        load_retrieval_task(f"ict:{tmp_path / 'missing'}")
