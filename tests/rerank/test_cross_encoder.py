"""The cross-encoder backend and load_reranker: a tiny CrossEncoder saved as a plain folder and as a TART-full
run folder (with its summary file), loaded by path, by "cross-encoder:PATH" and as the denoiser."""

from __future__ import annotations

import numpy as np
import pytest

from taskret.io import write_json
from taskret.rerank import (
    BACKENDS,
    CrossEncoderReranker,
    Reranker,
    RetrievalResult,
    cross_encoder_folder,
    load_reranker,
    make_denoiser,
)
from taskret.rerank.cross_encoder import RUN_CONFIG_FILE

DOCS = ["aspirin lowers the risk of heart attacks", "coffee harms sleep", "jazz by miles davis"]
QUERY = "Find evidence [SEP] aspirin prevents heart attacks"


@pytest.fixture(scope="module")
def plain_folder(tmp_path_factory, tiny_bert_dir):
    """The tiny BERT with a fresh one-logit head, saved as a CrossEncoder folder."""
    import torch
    from sentence_transformers.cross_encoder import CrossEncoder

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("cross-encoder")
    CrossEncoder(str(tiny_bert_dir), num_labels=1, max_length=64, device="cpu").save(str(folder))
    return folder


def run_folder(root, plain_folder, use_instruction: bool):
    """A TART-full run folder: ``model/`` and the summary that marks a finished run."""
    import shutil

    shutil.copytree(plain_folder, root / "model")
    write_json(root / RUN_CONFIG_FILE, {"use_instruction": use_instruction, "steps": 1})
    return root


def test_a_plain_folder_scores_ranks_and_predicts(plain_folder):
    reranker = CrossEncoderReranker(plain_folder, device="cpu")
    assert reranker.path == plain_folder and reranker.config is None and reranker.use_instruction is True
    assert reranker.name == f"cross-encoder:{plain_folder}"
    scores = reranker.score(QUERY, DOCS)
    assert scores.shape == (3,) and np.isfinite(scores).all() and len(set(scores.tolist())) == 3
    ranked = reranker.rank(QUERY, DOCS, doc_ids=["a", "b", "c"])
    assert isinstance(ranked, RetrievalResult) and sorted(ranked.ids[0]) == ["a", "b", "c"]
    assert ranked.scores[0].tolist() == sorted(scores.tolist(), reverse=True)
    probabilities = reranker.predict([(QUERY, d) for d in DOCS])
    assert ((probabilities > 0) & (probabilities < 1)).all()  # the model's own activation: a sigmoid
    # the raw logits and the activation order the documents alike
    assert np.argsort(probabilities).tolist() == np.argsort(scores).tolist()
    assert reranker.score_pairs([]).shape == (0,) and reranker.predict([]).shape == (0,)


def test_a_run_folder_is_read_through_its_model_and_summary(tmp_path, plain_folder):
    run = run_folder(tmp_path / "run", plain_folder, use_instruction=False)
    assert cross_encoder_folder(run) == run / "model" and cross_encoder_folder(run / "model") == run / "model"
    assert cross_encoder_folder(plain_folder) == plain_folder
    reranker = CrossEncoderReranker(run, device="cpu")
    assert reranker.config == {"use_instruction": False, "steps": 1} and reranker.use_instruction is False
    # the same model as the plain folder
    plain = CrossEncoderReranker(plain_folder, device="cpu")
    assert np.allclose(reranker.score(QUERY, DOCS), plain.score(QUERY, DOCS))


def test_load_reranker_chooses_the_backend_by_name(tmp_path, plain_folder):
    assert list(BACKENDS)[0] == "cross-encoder"  # the default backend
    by_path = load_reranker(plain_folder, device="cpu")
    by_name = load_reranker(f"cross-encoder:{plain_folder}", device="cpu", batch_size=2)
    assert isinstance(by_path, CrossEncoderReranker) and isinstance(by_name, CrossEncoderReranker)
    assert by_name.batch_size == 2 and by_name.path == plain_folder
    assert by_name.name == by_path.name == f"cross-encoder:{plain_folder}"
    assert np.allclose(by_name.score(QUERY, DOCS), by_path.score(QUERY, DOCS))
    assert load_reranker(by_name) is by_name  # a Reranker as it is
    with pytest.raises(ValueError, match="unknown reranker backend 'colbert'.*cross-encoder"):
        load_reranker("colbert:some/model")
    odd = tmp_path / "with:colon"
    odd.mkdir()
    with pytest.raises(FileNotFoundError, match="not a cross-encoder folder"):
        load_reranker(odd)  # an existing path is a folder, not a backend name


def test_missing_and_wrong_folders_say_what_they_are(tmp_path):
    from taskret.models import ModelNotInstalled

    with pytest.raises(FileNotFoundError, match="not a cross-encoder folder"):
        CrossEncoderReranker(tmp_path)
    with pytest.raises(ModelNotInstalled, match="missing"):
        load_reranker(tmp_path / "missing")


def test_the_denoiser_uses_the_instruction_only_for_an_instructed_tart_full_run(tmp_path, plain_folder):
    score, with_instruction = make_denoiser(run_folder(tmp_path / "a", plain_folder, use_instruction=True))
    assert with_instruction is True
    probabilities = score([(QUERY, d) for d in DOCS])
    assert probabilities.shape == (3,) and ((probabilities > 0) & (probabilities < 1)).all()
    assert make_denoiser(run_folder(tmp_path / "b", plain_folder, use_instruction=False))[1] is False
    assert make_denoiser(plain_folder)[1] is False  # any other CrossEncoder: queries without instructions


def test_taskret_load_reranker_is_this_one():
    import taskret

    assert taskret.load_reranker is load_reranker
    assert issubclass(CrossEncoderReranker, Reranker)


# -- a causal LM as a yes/no cross-encoder -------------------------------------------------------------


def test_a_causal_lm_scores_the_yes_no_log_odds_after_the_relevance_prompt(tiny_model_dir, tiny_model, tokenizer):
    import torch

    from taskret.rerank.cross_encoder import RELEVANCE_PROMPT, load_cross_encoder

    reranker = CrossEncoderReranker(tiny_model_dir)
    scores = reranker.score_pairs([(QUERY, d) for d in DOCS])
    # the same numbers by hand: the tiny Llama's next-token logits after the ChatML prompt, "yes" minus "no"
    yes, no = tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")
    for doc, score in zip(DOCS, scores):
        prompt = (f"<|im_start|>system\n{RELEVANCE_PROMPT}<|im_end|>\n<|im_start|>user\n<Query>: {QUERY}\n"
                  f"<Document>: {doc}<|im_end|>\n<|im_start|>assistant\n")
        with torch.no_grad():
            logits = tiny_model(**tokenizer(prompt, return_tensors="pt", add_special_tokens=False)).logits[0, -1]
        assert score == pytest.approx(float(logits[yes] - logits[no]), abs=1e-3)
    assert len(set(np.round(scores, 5))) == len(DOCS)  # the document changes the answer
    # long documents are cut (by default to LM_MAX_LENGTH, not the LM's own 8k), and the prompt still ends by
    # opening the answer
    from taskret.rerank.cross_encoder import LM_MAX_LENGTH

    assert reranker.model.max_seq_length == LM_MAX_LENGTH
    features = load_cross_encoder(tiny_model_dir, max_length=48, device="cpu")[0].preprocess([(QUERY, "word " * 500)])
    assert features["input_ids"].shape[1] <= 48
    assert tokenizer.decode(features["input_ids"][0]).rstrip().endswith("<|im_start|>assistant")


def test_a_saved_yes_no_reranker_keeps_its_prompt(tmp_path, tiny_model_dir):
    from taskret.rerank.cross_encoder import RELEVANCE_PROMPT, load_cross_encoder

    load_cross_encoder(tiny_model_dir, device="cpu").save(str(tmp_path / "saved"))
    assert RELEVANCE_PROMPT in (tmp_path / "saved" / "chat_template.jinja").read_text()
    pairs = [(QUERY, d) for d in DOCS]
    np.testing.assert_allclose(CrossEncoderReranker(tmp_path / "saved").score_pairs(pairs),
                               CrossEncoderReranker(tiny_model_dir).score_pairs(pairs), atol=1e-4)


def test_an_lm_without_a_known_chat_format_is_refused(tiny_bert_dir):
    from transformers import AutoTokenizer

    from taskret.rerank.cross_encoder import relevance_chat_template

    with pytest.raises(ValueError, match="no known chat format"):
        relevance_chat_template(AutoTokenizer.from_pretrained(str(tiny_bert_dir)))


def test_scoring_goes_by_chunks_in_order_and_reports_progress_only_when_asked(plain_folder, capsys):
    from taskret.progress import reporting

    pairs = [(QUERY, d) for d in DOCS * 3]
    whole = CrossEncoderReranker(plain_folder, device="cpu").score_pairs(pairs)
    chunked = CrossEncoderReranker(plain_folder, device="cpu", batch_size=1)  # chunks of 4 pairs, longest first
    capsys.readouterr()
    np.testing.assert_allclose(chunked.score_pairs(pairs), whole, atol=1e-5)
    assert capsys.readouterr() == ("", "")
    with reporting():
        chunked.score_pairs(pairs)
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith(f"reranking with {chunked.name}: 9/9 (100%)")
