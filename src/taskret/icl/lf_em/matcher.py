"""LF-EM itself: two QDMR decompositions' logical-form graphs, normalized, compared.

A port of Hasson & Berant's ``LogicalFromStructuralMatcher`` (``dependencies_graph/evaluation/
logical_form_matcher.py``), ``QDMRToQDMRStepTokensConverter`` (``qdmr_to_logical_form_tokens.py``) and
``reorder_by_level`` (``utils/graph.py``), with the decomposition clean-up of EPR's ``eval_single``
(``src/utils/eval_many.py``); see :mod:`taskret.icl.lf_em`. Each decomposition becomes a graph: a node per step
(operator, properties, the words of its arguments) and an edge per reference (``#2``), labelled with the argument
it fills. The words are normalized (lower case; operator words, function words and punctuation dropped; each word
replaced by its class's representative, :mod:`.lexicon`), chains of filters over a select or a project collapse
into one node, and the nodes are renumbered level by level from the leaves, so the same graph written with its
steps in another order gives the same key.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache

import networkx as nx

from .lexicon import question_representatives
from .operators import FILTER, IDENTIFIERS, PROJECT, SELECT, Step, UnparseableStep, identify_step, split_steps
from .variations import CLEANED_WORDS

_REFERENCE = re.compile(r"#(\d+)")


@dataclass
class StepTokens:
    """A step as the matcher compares it: operator, properties, and each argument's words."""

    operator: str
    properties: list[str] | None
    arguments: dict[str, list[str]] = field(default_factory=dict)


def break_standard_steps(qdmr: str, *, lowercase: bool = False) -> list[str]:
    """The step texts of a ``return ... ;return ...`` decomposition as EPR's evaluation reads them: whitespace
    collapsed, every ``return`` removed (inside words too, on both sides alike), each step's first word dropped
    after ``return`` is put back. ``lowercase``: EPR lower-cases the prediction, not the gold."""
    text = " ".join(qdmr.split())
    if lowercase:
        text = text.lower()
    standard = " ;".join("return " + re.sub("return", "", part.strip()).replace("  ", " ").strip()
                         for part in text.split(";"))
    return split_steps(standard)


@dataclass(frozen=True)
class LogicalForm:
    """A decomposition's steps as logical forms, in their written order (step ``i`` is ``steps[i - 1]``)."""

    steps: tuple[Step, ...]

    def __str__(self) -> str:
        return "\n".join(f"{i}. {step}" for i, step in enumerate(self.steps, start=1))

    def graph(self) -> nx.MultiDiGraph:
        """Nodes 1..n holding :class:`StepTokens` (``step``); an edge per reference, its argument as ``dep``."""
        graph = nx.MultiDiGraph()
        for i, step in enumerate(self.steps, start=1):
            for name, values in step.arguments.items():
                for value in values:
                    for ref in _REFERENCE.findall(value):
                        graph.add_edge(i, int(ref), dep=name)
            # one list of words per argument: of an argument with several values, the last (as the original)
            words = {name: _REFERENCE.sub("", value).replace("  ", " ").split()
                     for name, values in step.arguments.items() for value in values}
            graph.add_node(i, step=StepTokens(step.operator, list(step.properties), words))
        return graph


def qdmr_to_logical_form(qdmr: str, *, lowercase: bool = False) -> LogicalForm:
    """A QDMR decomposition (``return flights ;return #1 from denver``) as logical forms: each step's operator,
    properties and arguments, references ``#n`` kept. Raises :class:`UnparseableStep` for a step that no single
    operator explains or whose arguments cannot be read (such a decomposition never matches under LF-EM)."""
    steps = []
    for text in break_standard_steps(qdmr, lowercase=lowercase):
        try:
            steps.append(identify_step(text))
        except UnparseableStep:
            raise
        except Exception as err:  # noqa: BLE001 -- the original's reading fails in many ways on odd steps
            raise UnparseableStep(f"cannot read the step {text!r}: {type(err).__name__}: {err}") from err
    return LogicalForm(tuple(steps))


# -- normalization ---------------------------------------------------------------------------------------------


def _normalize_words(step: StepTokens, representatives: dict[str, str]) -> None:
    if not step.arguments:
        return
    identifier = IDENTIFIERS[step.operator]
    indicators = ((step.properties and identifier.properties_indicators(step.properties)) or []) \
        + identifier.operator_indicators()
    # soft cleaning: any word of an operator or property indicator goes, wherever it stands
    indicator_words = {w for phrase in indicators for w in phrase.lower().split(" ") if w}
    for name, words in step.arguments.items():
        words = [w.lower() for w in words]
        words = [w for w in words if w not in indicator_words]
        words = [w for w in words if w not in CLEANED_WORDS]
        words = [part for w in words for part in re.split(r"\W+", w) if part]
        step.arguments[name] = [representatives.get(w, w) for w in words]


@dataclass(frozen=True)
class _MergePattern:
    """A ``dependency`` edge from a ``dependency``-operator step to a ``target``-operator step merges both into one
    ``merged``-operator step; the arguments of the other operator become ``foreign`` (None: they cannot occur)."""

    dependency: str
    target: str
    merged: str
    foreign: str | None

    def merged_argument(self, name: str) -> str:
        if name.split("-", 1)[0] == self.merged:
            return name
        if self.foreign is None:
            raise KeyError(name)
        return self.foreign


_MERGE_PATTERNS = (
    _MergePattern("filter-sub", FILTER, FILTER, None),
    _MergePattern("filter-sub", SELECT, FILTER, "filter-sub"),
    _MergePattern("project-sub", SELECT, PROJECT, "project-sub"),
)


def _merge(graph: nx.MultiDiGraph) -> None:
    operators = {n: data["step"].operator for n, data in graph.nodes(data=True)}
    next_id = max(operators) + 1
    queue = deque(operators)
    while queue:
        node = queue.popleft()
        if node not in operators:
            continue
        for pattern in _MERGE_PATTERNS:
            if pattern.dependency.split("-", 1)[0] != operators.get(node):
                continue
            for u, v, edge in graph.out_edges(node, data=True):
                if not (edge["dep"] == pattern.dependency and operators.get(v) == pattern.target):
                    continue
                u_step, v_step = graph.nodes[u]["step"], graph.nodes[v]["step"]
                if pattern.merged == u_step.operator:
                    properties = u_step.properties
                elif pattern.merged == v_step.operator:
                    properties = v_step.properties
                else:
                    properties = None
                arguments: dict[str, list[str]] = {}
                for step in (u_step, v_step):
                    for name, words in step.arguments.items():
                        merged_name = pattern.merged_argument(name)
                        arguments[merged_name] = arguments.get(merged_name, []) + words
                merged = StepTokens(pattern.merged, properties, arguments)
                graph.add_node(next_id, step=merged)
                operators[next_id] = merged.operator
                queue.append(next_id)
                # whatever referred to u now refers to the merged step
                for x, _, data in list(graph.in_edges(u, data=True)):
                    graph.add_edge(x, next_id, **data)
                    queue.append(x)
                # u's and v's own references move to the merged step, renamed as the pattern says
                for x, y, data in list(graph.out_edges(u, data=True)) + list(graph.out_edges(v, data=True)):
                    if (x, y) == (u, v):
                        continue
                    graph.add_edge(next_id, y, dep=pattern.merged_argument(data["dep"]))
                if not any(graph.successors(next_id)):  # nothing referenced any more: a select
                    merged.operator = SELECT
                    merged.arguments = {"select-sub": [w for words in merged.arguments.values() for w in words]}
                    operators[next_id] = SELECT
                graph.remove_node(u)
                del operators[u]
                if all(x == u for x in graph.predecessors(v)):
                    graph.remove_node(v)
                    del operators[v]
                next_id += 1
                break


def _node_key(graph: nx.MultiDiGraph, node, renumbered: dict | None = None) -> str:
    def number(x):
        return x if renumbered is None else renumbered.get(x, x)

    step: StepTokens = graph.nodes[node]["step"]
    properties = ",".join(sorted(step.properties or []))
    words = ",".join(sorted({w for words in step.arguments.values() for w in words}))
    deps = ",".join(sorted(f"({number(v)}, {data['dep']})" for _, v, data in graph.out_edges(node, data=True)))
    return f"{step.operator.upper()}[{properties.lower()}]{deps.lower()}{{{words.lower()}}}"


def _levels(graph: nx.MultiDiGraph) -> dict[int, list]:
    """Nodes by level: 0 for a step that refers to none, else one more than its highest reference."""
    leaves = [n for n in graph.nodes if not any(graph.successors(n))]
    level = {n: 0 for n in leaves}
    queue = deque(leaves)
    while queue:
        node = queue.popleft()
        bound = level[node] + 1
        if bound > graph.number_of_nodes():
            raise ValueError("cyclic references")
        for parent in graph.predecessors(node):
            if level.get(parent, -1) < bound:
                level[parent] = bound
                queue.append(parent)
    levels: dict[int, list] = {}
    for node, lv in level.items():
        levels.setdefault(lv, []).append(node)
    return levels


def _renumber(graph: nx.MultiDiGraph) -> None:
    """Renumber the nodes 1..n level by level, each level's nodes in the order of their keys (which name their
    references by their new numbers); nodes of one level with the same key merge (a step written twice counts
    once). Nodes on a cycle reach no level and keep their numbers."""
    levels = _levels(graph)
    renumbered: dict = {}
    next_number = 1
    for lv in sorted(levels):
        by_key: dict[str, object] = {}
        for node in levels[lv]:
            key = _node_key(graph, node, renumbered)
            if key not in by_key:
                by_key[key] = node
                continue
            kept = by_key[key]
            for parent, _, data in list(graph.in_edges(node, data=True)):
                graph.add_edge(parent, kept, **data)
            graph.remove_node(node)
        for key in sorted(by_key):
            renumbered[by_key[key]] = next_number
            next_number += 1
    # in two steps, as old and new numbers overlap
    nx.relabel_nodes(graph, {old: str(new) for old, new in renumbered.items()}, copy=False)
    nx.relabel_nodes(graph, {str(new): new for new in renumbered.values()}, copy=False)


def graph_key(graph: nx.MultiDiGraph) -> str:
    """The normalized graph as one string: equal strings, equal logical forms."""
    return "; ".join(_node_key(graph, node) for node in sorted(graph))


def normalized_key(qdmr: str, representatives: dict[str, str], *, lowercase: bool = False) -> str:
    """A decomposition's normalized logical-form graph as a string (:func:`graph_key`). Raises on a decomposition
    that cannot be read: an unparseable step, a reference to a missing step, cyclic references."""
    graph = qdmr_to_logical_form(qdmr, lowercase=lowercase).graph()
    for node, data in graph.nodes(data=True):
        if "step" not in data:
            raise UnparseableStep(f"a reference to step #{node}, which the decomposition does not have")
        _normalize_words(data["step"], representatives)
    _merge(graph)
    _renumber(graph)
    return graph_key(graph)


@lru_cache(maxsize=65536)
def _cached_key(qdmr: str, question: str | None, lowercase: bool) -> str | None:
    try:
        return normalized_key(qdmr, question_representatives(question), lowercase=lowercase)
    except Exception:  # noqa: BLE001 -- as the original's is_match: whatever cannot be read does not match
        return None


def logical_form_key(qdmr: str, question: str | None = None, *, lowercase: bool = False) -> str | None:
    """:func:`normalized_key` with the question's word classes (:mod:`.lexicon`), None for an unreadable
    decomposition. Cached: an evaluation asks for each gold's key more than once."""
    question_representatives(question)  # a missing spaCy model or WordNet raises here, not as a non-match
    return _cached_key(qdmr, question, lowercase)


def lf_em(prediction: str, gold: str, question: str | None = None) -> bool:
    """Break's logical-form exact match: whether ``prediction`` and ``gold`` (``return ... ;return #1 ...``)
    have the same normalized logical-form graph, as Hasson & Berant's matcher decides it the way EPR calls it
    (the prediction lower-cased, the gold not). ``question``: the input the decompositions answer, whose words'
    inflections and lemmas count as one (spaCy, inflect and WordNet; :mod:`.lexicon`); without it only the
    operator words' classes do. A prediction that cannot be read (empty, an unknown step, a reference to a missing
    step) does not match; a gold that cannot be read matches nothing."""
    predicted = logical_form_key(prediction, question, lowercase=True)
    return predicted is not None and predicted == logical_form_key(gold, question)
