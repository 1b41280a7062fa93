"""The causal-LM (UPR) reranker: prompts with and without an instruction, document cuts, scores that are the
LM's own log-likelihoods, and a real ranking by the bundled SmolLM2."""

from __future__ import annotations

import numpy as np
import pytest

from taskret.backends.transformers import CausalLM
from taskret.formats import format_query
from taskret.rerank.causal_lm import CausalLMReranker


@pytest.fixture(scope="module")
def upr(tiny_lm):
    return CausalLMReranker(tiny_lm, max_doc_tokens=8)


def test_prompt_carries_the_instruction_and_scores_only_the_query(upr):
    prompt, target = upr.prompt_and_target(format_query("Find a bash command", "list files"), "ls -la")
    assert prompt == "Passage: ls -la\nTask: Find a bash command\nQuery:" and target == " list files"
    prompt, target = upr.prompt_and_target("list files", "ls -la")
    assert prompt.startswith("Passage: ls -la\n") and prompt.endswith("Question:") and target == " list files"


def test_long_documents_are_cut_to_max_doc_tokens(upr, tiny_lm):
    document = " ".join(f"word{i}" for i in range(200))
    prompt, _ = upr.prompt_and_target("q", document)
    passage = prompt.split("\n")[0].removeprefix("Passage: ")
    assert len(tiny_lm.tokenizer(passage, add_special_tokens=False)["input_ids"]) <= 8
    assert document.startswith(passage.strip())


def test_scores_are_the_lms_query_log_likelihoods(upr, tiny_lm):
    pairs = [("list files", "ls -la"), ("remove a file", "rm x"), ("list files", "rm x")]
    scores = upr.score_pairs(pairs)
    prompts, targets = zip(*(upr.prompt_and_target(q, d) for q, d in pairs))
    expected = [s.logprob for s in tiny_lm.score(list(prompts), list(targets))]
    assert np.allclose(scores, expected, atol=1e-4) and scores.dtype == np.float32
    assert upr.score_pairs([]).shape == (0,)


def test_a_spec_loads_with_the_reranker_batch_size(tiny_lm, tmp_path):
    # as a distillation teacher loads it: load_reranker("upr:...", batch_size=...)
    from taskret.rerank import load_reranker

    tiny_lm.model.save_pretrained(tmp_path)
    tiny_lm.tokenizer.save_pretrained(tmp_path)
    loaded = load_reranker(f"upr:{tmp_path}", batch_size=2, max_doc_tokens=8)
    assert isinstance(loaded, CausalLMReranker) and loaded.lm.max_batch_size == 2
    pairs = [("list files", "ls -la"), ("remove a file", "rm x"), ("list files", "rm x")]
    # The same folder loaded with the LM's default batch size and the same dtype: "auto" is bf16 on a CPU with
    # native bf16, so the float32 model in memory is not the reference there.
    same_folder = CausalLMReranker(CausalLM.load(str(tmp_path)), max_doc_tokens=8)
    assert loaded.lm.model.dtype == same_folder.lm.model.dtype
    assert np.allclose(loaded.score_pairs(pairs), same_folder.score_pairs(pairs), atol=1e-4)


def test_a_spec_sets_the_document_cut(tiny_lm, tmp_path):
    # "upr:LM?max_doc_tokens=N", as `--rerank` and tart_berri.py's --reranker take it
    from taskret.rerank import load_reranker

    tiny_lm.model.save_pretrained(tmp_path)
    tiny_lm.tokenizer.save_pretrained(tmp_path)
    loaded = load_reranker(f"upr:{tmp_path}?max_doc_tokens=5")
    assert loaded.max_doc_tokens == 5 and loaded.lm_name == str(tmp_path)
    passage = loaded.prompt_and_target("q", " ".join(f"word{i}" for i in range(50)))[0].split("\n")[0]
    assert len(tiny_lm.tokenizer(passage.removeprefix("Passage: "), add_special_tokens=False)["input_ids"]) <= 5
    with pytest.raises(ValueError, match="unknown option 'max_tokens=5'; expected max_doc_tokens="):
        load_reranker(f"upr:{tmp_path}?max_tokens=5")
    with pytest.raises(ValueError, match="option max_doc_tokens needs a whole number"):
        load_reranker(f"upr:{tmp_path}?max_doc_tokens=0")
    assert load_reranker(f"upr:{tmp_path}?ensemble_bare=true&max_doc_tokens=6").ensemble_bare
    with pytest.raises(ValueError, match="option ensemble_bare needs a true or false"):
        load_reranker(f"upr:{tmp_path}?ensemble_bare=maybe")


def test_ensemble_bare_averages_the_instructed_and_bare_prompts(tiny_lm):
    plain, both = CausalLMReranker(tiny_lm, max_doc_tokens=8), CausalLMReranker(tiny_lm, max_doc_tokens=8,
                                                                                 ensemble_bare=True)
    instructed, bare = format_query("Find a bash command", "list files"), "list files"
    pairs = [(instructed, "ls -la"), (bare, "ls -la"), (instructed, "rm x")]
    expected = [(plain.score_pairs([(instructed, d)])[0] + plain.score_pairs([(bare, d)])[0]) / 2
                for d in ("ls -la", "rm x")]
    scores = both.score_pairs(pairs)
    assert np.allclose(scores[[0, 2]], expected, atol=1e-4)
    assert np.isclose(scores[1], plain.score_pairs([(bare, "ls -la")])[0], atol=1e-4)  # no instruction: one prompt
    assert not np.isclose(scores[0], plain.score_pairs([(instructed, "ls -la")])[0], atol=1e-4)


def test_bad_settings_are_refused(tiny_lm):
    with pytest.raises(ValueError, match="max_doc_tokens"):
        CausalLMReranker(tiny_lm, max_doc_tokens=0)
    with pytest.raises(ValueError, match="lacks \\{document\\}"):
        CausalLMReranker(tiny_lm, prompt="no slot")


@pytest.mark.integration
def test_smollm2_ranks_the_passage_that_answers_first():
    upr = CausalLMReranker("smollm2-135m")
    docs = ["Bananas are a yellow fruit rich in potassium.", "Paris is the capital and largest city of France.",
            "The stock market fell sharply on Monday."]
    ranked = upr.rank("What is the capital of France?", docs, doc_ids=["banana", "paris", "stocks"])
    assert ranked.ids[0][0] == "paris"


def test_scoring_reports_its_progress_only_when_asked(upr, capsys):
    from taskret.progress import reporting

    pairs = [("list files", "ls -la"), ("remove a file", "rm x"), ("list files", "rm x")]
    quiet = upr.score_pairs(pairs)
    assert capsys.readouterr() == ("", "")
    with reporting():
        reported = upr.score_pairs(pairs)
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"reranking with {upr.name}: 3/3 (100%)") and "pairs/s" in err
    np.testing.assert_allclose(reported, quiet, atol=1e-5)
