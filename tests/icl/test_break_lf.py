"""Break's LF-EM (taskret.icl.lf_em): operators read as the evaluator reads them, the same graph in another step
order matches, paraphrases the normalization forgives match, different graphs and malformed predictions do not.

The examples are the operator identifier's own (its docstrings) and Break's ATIS dev decompositions. The tests
without a question need networkx only; those with one need spaCy's English model, inflect and WordNet (the
``break`` extra and wordnet-base, which `make setup` and .ci/run install) and are skipped, saying why, without them.
"""

from __future__ import annotations

import pytest

from taskret.data import Example, Task
from taskret.formats import BREAK_FORMAT
from taskret.icl.evaluation import headline_metric, metrics_for, score_predictions
from taskret.icl.inference import Prediction
from taskret.icl.lf_em import UnparseableStep, lf_em, logical_form_key, qdmr_to_logical_form
from taskret.icl.prompt import Prompt


def _resources_missing() -> str | None:
    from taskret.icl.lf_em import load_resources

    try:
        load_resources()
    except Exception as err:  # noqa: BLE001 -- any missing piece skips with its message
        return str(err)
    return None


_MISSING = _resources_missing()
needs_lexicon = pytest.mark.skipif(_MISSING is not None, reason=f"LF-EM's lexicon is not installed: {_MISSING}")

ATIS_DEV_0 = "return flights ;return #1 from  denver ;return #2 to philadelphia ;return #3 if  available"


@pytest.mark.parametrize("step,operator,properties", [
    ("return countries", "select", []),
    ("return #1 from Canada", "filter", []),
    ("return first name of #2", "project", []),
    ("return lowest of #2", "aggregate", ["min"]),
    ("return the number of #1", "aggregate", ["count"]),
    ("return number of #3 for each #2", "group", ["count"]),
    ("return #1 where #2 is highest", "superlative", ["max"]),
    ("return #1 where #2 is at most three", "comparative", ["less"]),
    ("return #1 or #2", "union", []),
    ("return countries in both #1 and #2", "intersection", []),
    ("return #2 besides #3", "discard", []),
    ("return #1 sorted by #2", "sort", []),
    ("return if #1 is american", "boolean", []),
    ("return difference of #3 and #5", "arithmetic", ["difference"]),
    ("return which is highest of #1, #2", "comparison", ["max"]),
])
def test_operators_as_the_identifier_reads_its_examples(step, operator, properties):
    (parsed,) = qdmr_to_logical_form(step).steps
    assert (parsed.operator, parsed.properties) == (operator, properties)


def test_a_decomposition_becomes_steps_with_references():
    form = qdmr_to_logical_form(ATIS_DEV_0)
    assert [s.operator for s in form.steps] == ["select", "filter", "filter", "filter"]
    assert form.steps[1].arguments == {"filter-sub": ["#1"], "filter-condition": ["from denver"]}
    assert str(form).splitlines()[2] == "3. FILTER(condition: to philadelphia;sub: #2)"
    edges = sorted((u, v, d["dep"]) for u, v, d in form.graph().edges(data=True))
    assert edges == [(2, 1, "filter-sub"), (3, 2, "filter-sub"), (4, 3, "filter-sub")]


@pytest.mark.parametrize("prediction", [
    # the same graph, steps in another order (the references renumbered)
    "return flights ;return #1 to philadelphia ;return #2 from denver ;return #3 if available",
    "return flights ;return #1 if available ;return #2 from denver ;return #3 to philadelphia",
    # whitespace and case (EPR lower-cases the prediction)
    "Return Flights ;return #1 from denver;return #2   to Philadelphia ;return #3 if available",
    # function words and punctuation the normalization drops
    "return the flights ;return #1 that are from denver ;return #2 to philadelphia ;return #3 if available",
    # two filters written as one
    "return flights ;return #1 from denver to philadelphia ;return #2 if available",
])
def test_equal_graphs_and_forgiven_paraphrases_match(prediction):
    assert lf_em(prediction, ATIS_DEV_0)


def test_projections_in_another_order_match():
    gold = "return cities ;return population of #1 ;return #1 where #2 is highest"
    assert lf_em("return cities ;return population of #1 ;return #1 where #2 is the largest", gold)
    assert not lf_em("return cities ;return population of #1 ;return #1 where #2 is lowest", gold)
    two = "return rivers ;return states ;return length of #1 ;return area of #2 ;return #3 , #4"
    swapped = "return states ;return rivers ;return area of #1 ;return length of #2 ;return #4 , #3"
    assert lf_em(swapped, two)


@pytest.mark.parametrize("prediction", [
    "return flights ;return #1 from denver ;return #2 to boston ;return #3 if available",  # another argument
    "return flights ;return #1 from denver ;return #2 to philadelphia",  # a step missing
    "return flights ;return #1 from denver ;return #2 to philadelphia ;return number of #3",  # another operator
    "return flights ;return #1 from denver ;return #2 to philadelphia ;return lowest of #3",
])
def test_different_graphs_do_not_match(prediction):
    assert not lf_em(prediction, ATIS_DEV_0)


def test_an_aggregate_differs_by_its_property():
    assert not lf_em("return flights ;return highest of #1", "return flights ;return lowest of #1")
    assert lf_em("return flights ;return the highest of #1", "return flights ;return highest of #1")


@pytest.mark.parametrize("prediction", [
    "", "   ", ";", "return", "return ;return ;return",
    "return flights ;return #7 from denver",  # a reference to a step that is not there
    "return #2 ;return #1",  # cyclic references
    "return flights ;return #x from denver",  # not a reference the identifier can read
    "return which is #1 , #2",  # a comparison without its criterion
    "1#) return flights 2#) return #1 from denver",  # the LM's notation, not mapped back
])
def test_malformed_predictions_are_non_matches_not_crashes(prediction):
    assert lf_em(prediction, ATIS_DEV_0) is False
    assert logical_form_key(prediction, lowercase=True) != logical_form_key(ATIS_DEV_0)


def test_an_unparseable_step_says_which():
    with pytest.raises(UnparseableStep, match="which is #1"):
        qdmr_to_logical_form("return which is #1 , #2")


def test_a_gold_that_cannot_be_read_matches_nothing():
    assert not lf_em("return flights ;return #5", "return flights ;return #5")


# --- with the question: its words' inflections and lemmas count as one ------------------------------------------

@needs_lexicon
def test_the_question_makes_inflections_one_word():
    question = "what are the us air flights from toronto to san diego with a stopover in denver"
    gold = "return us air flights ;return #1 from toronto ;return #2 to san diego ;return #3 with a stopover in denver"
    prediction = "return a us air flight ;return #1 from toronto to san diego ;return #2 with a stopover in denver"
    assert lf_em(prediction, gold, question)
    assert not lf_em(prediction, gold)  # without the question, flight and flights differ
    assert not lf_em(prediction.replace("denver", "dallas"), gold, question)


@needs_lexicon
def test_break_evaluation_reports_lf_em_as_its_headline():
    task = Task("break", train=[], test=[], output_format=BREAK_FORMAT)
    question = "what flights are available tomorrow from denver to philadelphia"
    examples = [Example(str(i), question, ATIS_DEV_0) for i in range(3)]
    texts = [ATIS_DEV_0, "return flights ;return #1 to philadelphia ;return #2 from denver ;return #3 if available",
             "return flights ;return #1 to philadelphia"]
    predictions = [Prediction(example=e, retrieved_ids=[], retrieved_scores=[], prompt=Prompt("", [], 0),
                              prediction=t, raw_generation=t) for e, t in zip(examples, texts)]
    scores = score_predictions(task, predictions)
    assert scores == pytest.approx({"em": 100 / 3, "lf_em": 200 / 3, "normalized_match": 100 / 3})
    assert headline_metric(task) == "lf_em" and "lf_em" in metrics_for(task)
