"""CausalLM on a tiny seeded Llama with the real SmolLM2 tokenizer: scoring and greedy generation."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch

from taskret.backends.transformers import CausalLM, TargetScore, _token_batches

from ..conftest import build_tiny_llama

PROMPTS = [
    "set an alarm for 7 am\t[IN:CREATE_ALARM ]\nwake me up at six\t",
    "hi\t",
    "what is the weather like in Paris, France, this weekend? I need to know\t",
    "call mom\t[IN:CREATE_CALL [SL:CONTACT mom ] ]\ncall dad\t[IN:CREATE_CALL ]\nring my sister\t",
    "x",
    "play music\t",
]
TARGETS = [
    "[IN:CREATE_ALARM [SL:DATE_TIME at six ] ]",
    "hello",
    "[IN:GET_WEATHER [SL:LOCATION Paris ] [SL:DATE_TIME this weekend ] ]",
    "[IN:CREATE_CALL [SL:CONTACT sister ] ]",
    " y z",
    "[IN:PLAY_MUSIC ]",
]


def _wrap(lm: CausalLM, **kwargs) -> CausalLM:
    return CausalLM(lm.model, lm.tokenizer, name=lm.name, **kwargs)


def _reference_logprob(model, tokenizer, prompt: str, target: str) -> float:
    """log P(target | prompt) from the full logits of one unpadded forward pass."""
    prompt_ids = tokenizer(prompt).input_ids
    target_ids = tokenizer(target, add_special_tokens=False).input_ids
    ids = torch.tensor([prompt_ids + target_ids])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
    return sum(float(logprobs[len(prompt_ids) + j - 1, token]) for j, token in enumerate(target_ids))


def _reference_greedy(model, tokenizer, prompt: str, max_new_tokens: int) -> tuple[str, list[int]]:
    """Greedy decoding without a cache, padding or batching: recompute everything at every step."""
    ids = tokenizer(prompt).input_ids
    out: list[int] = []
    for _ in range(max_new_tokens):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids + out])).logits[0, -1]
        token = int(logits.argmax())
        out.append(token)
        if "\n" in tokenizer.decode([token]) or token == tokenizer.eos_token_id:
            break
    text = tokenizer.decode(out, skip_special_tokens=True)
    return text.split("\n", 1)[0].strip(), out


# --- scoring --------------------------------------------------------------------------------------


def test_score_one_result_per_pair(tiny_lm, tokenizer):
    scores = tiny_lm.score(PROMPTS, TARGETS)
    assert len(scores) == len(PROMPTS)
    for score, target in zip(scores, TARGETS):
        assert isinstance(score, TargetScore)
        assert score.n_tokens == len(tokenizer(target, add_special_tokens=False).input_ids) > 0
        assert score.logprob <= 0 and math.isfinite(score.logprob)
        assert score.mean == pytest.approx(score.logprob / score.n_tokens)


def test_score_matches_a_full_logits_computation(tiny_lm, tiny_model, tokenizer):
    scores = tiny_lm.score(PROMPTS, TARGETS)
    for prompt, target, score in zip(PROMPTS, TARGETS, scores):
        assert score.logprob == pytest.approx(_reference_logprob(tiny_model, tokenizer, prompt, target), abs=1e-4)


def test_score_is_independent_of_batch_size(tiny_lm):
    batched_calls, single_calls = [], []
    batched = _wrap(tiny_lm, max_batch_tokens=1_000_000).score(PROMPTS, TARGETS, progress=batched_calls.append)
    single = _wrap(tiny_lm, max_batch_tokens=1, max_batch_size=1).score(PROMPTS, TARGETS, progress=single_calls.append)
    assert batched_calls == [len(PROMPTS)]  # really one padded batch
    assert single_calls == [1] * len(PROMPTS)  # really one sequence at a time
    medium = _wrap(tiny_lm, max_batch_tokens=60).score(PROMPTS, TARGETS)
    for a, b, c in zip(batched, single, medium):
        assert a.n_tokens == b.n_tokens == c.n_tokens
        assert abs(a.logprob - b.logprob) < 1e-3
        assert abs(a.logprob - c.logprob) < 1e-3


def test_score_is_independent_of_input_order(tiny_lm):
    forward = tiny_lm.score(PROMPTS, TARGETS)
    backward = tiny_lm.score(PROMPTS[::-1], TARGETS[::-1])[::-1]
    for a, b in zip(forward, backward):
        assert a.n_tokens == b.n_tokens and abs(a.logprob - b.logprob) < 1e-3


def test_score_depends_on_the_prompt_and_the_target(tiny_lm):
    a, b, c = tiny_lm.score(["set an alarm\t", "call mom\t", "set an alarm\t"],
                            ["[IN:CREATE_ALARM ]", "[IN:CREATE_ALARM ]", "[IN:CREATE_CALL ]"])
    assert a.logprob != pytest.approx(b.logprob, abs=1e-6)
    assert a.logprob != pytest.approx(c.logprob, abs=1e-6)


def test_score_empty_target_is_zero(tiny_lm):
    scores = tiny_lm.score(["a prompt\t", "another\t"], ["", "word"])
    assert scores[0] == TargetScore(0.0, 0)
    assert scores[1].n_tokens == 1 and scores[1].logprob < 0
    assert tiny_lm.score(["only empty targets"], [""]) == [TargetScore(0.0, 0)]


def test_score_refuses_an_empty_prompt_without_bos(tiny_lm):
    assert tiny_lm.tokenizer("").input_ids == []  # SmolLM2 adds no BOS
    with pytest.raises(ValueError, match="empty prompt"):
        tiny_lm.score(["", "fine\t"], ["hello world", "x"])


def test_score_lengths_must_match(tiny_lm):
    with pytest.raises(ValueError, match="same length"):
        tiny_lm.score(["a", "b"], ["c"])


def test_score_nothing(tiny_lm):
    assert tiny_lm.score([], []) == []


# --- scoring with shared prefixes (EPR: one candidate demonstration, many examples) -------------------

DEMOS = ["set an alarm for 7am\t[IN:CREATE_ALARM [SL:DATE_TIME for 7am ] ]\n",
         "call mom\t[IN:CREATE_CALL [SL:CONTACT mom ] ]\n",
         "what is the weather in a very long city name like Llanfairpwllgwyngyll\t[IN:GET_WEATHER ]\n"]
EXAMPLES = [("wake me up at 6\t", "[IN:CREATE_ALARM [SL:DATE_TIME at 6 ] ]"),
            ("ring dad\t", "[IN:CREATE_CALL [SL:CONTACT dad ] ]"),
            ("is it raining\t", "[IN:GET_WEATHER [SL:WEATHER_ATTRIBUTE raining ] ]"),
            ("remind me\t", "")]


def _shared_pairs():
    prefixes, prompts, targets = [], [], []
    for demo in DEMOS:
        for rest, target in EXAMPLES:
            prefixes.append(demo)
            prompts.append(demo + rest)
            targets.append(target)
    return prefixes, prompts, targets


@pytest.mark.parametrize("budget", [(1_000_000, 64), (60, 64), (1, 1), (200, 3)])
def test_score_shared_equals_score(tiny_lm, budget):
    prefixes, prompts, targets = _shared_pairs()
    lm = _wrap(tiny_lm, max_batch_tokens=budget[0], max_batch_size=budget[1])
    calls: list[int] = []
    shared = lm.score_shared(prefixes, prompts, targets, progress=calls.append)
    plain = tiny_lm.score(prompts, targets)
    assert sum(calls) == len(prompts)
    for a, b in zip(shared, plain):
        assert a.n_tokens == b.n_tokens
        assert abs(a.logprob - b.logprob) < 1e-3
    assert shared[3] == TargetScore(0.0, 0)  # an empty target
    # The scores differ between demonstrations, so rows really read their own prefix's cache.
    assert len({round(s.logprob, 4) for s in shared[0::4]}) == len(DEMOS)


def test_score_shared_falls_back_when_a_prefix_is_not_a_token_boundary(tiny_lm):
    # "set an al" ends inside a word, so its tokens are not a prefix of the prompt's: no sharing, same scores.
    prompts = ["set an alarm\t", "set an alarm please\t", "x\t"]
    targets = ["[IN:CREATE_ALARM ]", "[IN:CREATE_ALARM ]", "y"]
    shared = tiny_lm.score_shared(["set an al", "set an al", "x\t"], prompts, targets)
    for a, b in zip(shared, tiny_lm.score(prompts, targets)):
        assert a.n_tokens == b.n_tokens and abs(a.logprob - b.logprob) < 1e-3


def test_score_shared_lengths_must_match(tiny_lm):
    with pytest.raises(ValueError, match="same length"):
        tiny_lm.score_shared(["a"], ["a b", "c"], ["d", "e"])


# --- generation -----------------------------------------------------------------------------------


def test_generate_is_greedy(tiny_lm, tiny_model, tokenizer):
    outputs = tiny_lm.generate(PROMPTS, max_new_tokens=12)
    for prompt, output in zip(PROMPTS, outputs):
        expected, tokens = _reference_greedy(tiny_model, tokenizer, prompt, 12)
        assert output == expected
        assert "\n" not in output
        assert len(tokens) <= 12


def test_cached_decoding_and_shared_scoring_raise_no_deprecation(tiny_lm):
    # Both pass the keys and values back to the model; transformers renamed that keyword (past_key_values ->
    # cache) and warns on the old one, which then lands in the demo's output and will stop working.
    prefixes, prompts, targets = _shared_pairs()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny_lm.generate(PROMPTS[:2], max_new_tokens=4)
        tiny_lm.score_shared(prefixes, prompts, targets)


def test_generate_is_independent_of_batch_size(tiny_lm):
    batched_calls = []
    batched = _wrap(tiny_lm, max_batch_size=8, max_batch_tokens=1_000_000).generate(
        PROMPTS, max_new_tokens=10, progress=batched_calls.append)
    single = _wrap(tiny_lm, max_batch_size=1).generate(PROMPTS, max_new_tokens=10)
    assert batched_calls == [len(PROMPTS)]
    assert batched == single
    assert len(set(batched)) > 1  # different prompts, different answers: rows are not mixed up


def test_generate_keeps_input_order(tiny_lm):
    forward = tiny_lm.generate(PROMPTS, max_new_tokens=8)
    assert tiny_lm.generate(PROMPTS[::-1], max_new_tokens=8) == forward[::-1]
    assert [tiny_lm.generate([p], max_new_tokens=8)[0] for p in PROMPTS[:3]] == forward[:3]


def test_generate_nothing(tiny_lm):
    assert tiny_lm.generate([], max_new_tokens=4) == []


@pytest.fixture(scope="module")
def newline_lm(tokenizer):
    """A tiny Llama edited so that, in the middle of its greedy answer to PROMPTS[0], a newline wins.

    The newline's output row becomes a slightly scaled copy of the row of the token greedy decoding
    picks at step 3, so the newline replaces that token there and nowhere before.
    """
    model = build_tiny_llama(tokenizer, seed=7, tie_word_embeddings=False)
    _, tokens = _reference_greedy(model, tokenizer, PROMPTS[0], 8)
    assert len(tokens) == 8 and tokens[2] not in tokens[:2]
    newline = tokenizer.convert_tokens_to_ids("Ċ")
    assert tokenizer.decode([newline]) == "\n"
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head[newline] = head[tokens[2]] * 1.01
    return CausalLM(model, tokenizer, name="newline"), tokens


def test_generate_stops_at_the_first_newline(newline_lm, tokenizer):
    lm, original = newline_lm
    expected, tokens = _reference_greedy(lm.model, tokenizer, PROMPTS[0], 8)
    assert tokens[:2] == original[:2] and tokenizer.decode([tokens[-1]]) == "\n"  # a newline at step 3
    assert expected == tokenizer.decode(original[:2], skip_special_tokens=True).strip() != ""
    assert lm.generate([PROMPTS[0]], max_new_tokens=8) == [expected]
    # Batched with other prompts (which keep generating), the row still stops at its newline.
    outputs = lm.generate(PROMPTS, max_new_tokens=8)
    assert outputs[0] == expected
    assert all("\n" not in o for o in outputs)
    assert outputs == _wrap(lm, max_batch_size=1).generate(PROMPTS, max_new_tokens=8)


def test_newline_token_ids_cover_every_token_with_a_newline(tiny_lm, tokenizer):
    ids = set(tiny_lm._newline_token_ids().tolist())
    assert tokenizer.convert_tokens_to_ids("Ċ") in ids
    assert tokenizer.convert_tokens_to_ids("ĊĊ") in ids
    assert tokenizer.convert_tokens_to_ids("Ġthe") not in ids
    assert all("\n" in tokenizer.decode([i]) for i in ids)


# --- loading, helpers -----------------------------------------------------------------------------


def test_load_from_a_local_folder_gives_the_same_model(tiny_model_dir, tiny_lm):
    loaded = CausalLM.load(str(tiny_model_dir), device="cpu", dtype="float32")
    assert loaded.name == str(tiny_model_dir)
    assert loaded.model.dtype == torch.float32 and loaded.device.type == "cpu"
    assert loaded.context_length == 2048
    for a, b in zip(loaded.score(PROMPTS[:3], TARGETS[:3]), tiny_lm.score(PROMPTS[:3], TARGETS[:3])):
        assert abs(a.logprob - b.logprob) < 1e-4
    assert loaded.generate(PROMPTS[:2], max_new_tokens=6) == tiny_lm.generate(PROMPTS[:2], max_new_tokens=6)


def test_missing_pad_token_falls_back_to_eos(tiny_model, tokenizer):
    no_pad = copy.deepcopy(tokenizer)
    no_pad.pad_token = None
    lm = CausalLM(tiny_model, no_pad)
    assert lm.tokenizer.pad_token_id == tokenizer.eos_token_id


def test_count_tokens_has_no_special_tokens(tiny_lm, tokenizer):
    text = "set an alarm\t[IN:CREATE_ALARM ]\n"
    assert tiny_lm.count_tokens(text) == len(tokenizer(text, add_special_tokens=False).input_ids)
    assert tiny_lm.count_tokens("") == 0


@pytest.mark.parametrize("budget,size", [(1, 64), (10, 64), (40, 3), (1000, 2), (1000, 64)])
def test_token_batches_cover_every_index_once_within_the_budget(budget, size):
    lengths = [5, 17, 3, 9, 9, 30, 1, 12]
    batches = _token_batches(lengths, budget, size)
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == list(range(len(lengths)))
    assert [lengths[i] for i in flat] == sorted(lengths, reverse=True)  # longest first, little padding
    for batch in batches:
        assert len(batch) <= size
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= budget
