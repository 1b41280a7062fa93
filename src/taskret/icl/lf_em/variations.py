"""The fixed word lists of Break's LF-EM: groups of interchangeable words, and the words every step drops.

Ported from the lexicon of Hasson & Berant's ``scripts/data_processing/break_app_store_generation.py`` (itself a
variation of Break's annotation pipeline ``utils/app_store_generation.py``); see :mod:`taskret.icl.lf_em`.
"""

from __future__ import annotations

from typing import Iterable

# Each group's words stand for one another (operator words and a few frequent synonyms).
VARIATION_GROUPS: tuple[tuple[str, ...], ...] = (
    ("who", "which"),
    # aggregate: max
    ("max", "maximum"),
    ("most",),
    ("more", "at least", "no less"),
    ("last",),
    ("highest", "largest", "longest", "biggest"),
    ("higher", "larger", "longer", "bigger"),
    # aggregate: min
    ("min", "minimum"),
    ("least",),
    ("less", "at most", "no more"),
    ("first",),
    ("lowest", "smallest", "shortest", "fewest"),
    ("lower", "smaller", "shorter", "fewer"),
    ("earlier",),
    # count, sum, average
    ("count", "number of", "total number of"),
    ("sum", "total"),
    ("avg", "average", "mean"),
    # arithmetic
    ("multiply", "multiplication"),
    ("difference", "decline"),
    ("division", "divide"),
    ("100", "hundred"),
    ("0", "zero"),
    ("1", "one"),
    ("2", "two"),
    # boolean
    ("same", "same as", "equal", "equals"),
    # comparative
    ("contain", "contains", "include", "includes"),
    ("start", "starts", "begin", "begins"),
    ("end", "ends"),
    # discard
    ("besides", "not in", "discard", "not"),
    # sort
    ("sort", "sorted", "order", "ordered"),
    # union
    ("and", ",", "both"),
    # extra
    ("height", "elevation"),
)

_GROUP_OF: dict[str, tuple[str, ...]] = {word: group for group in VARIATION_GROUPS for word in group}

# Words a step's arguments drop before comparison ("for each" and "number of" never match one token: kept as
# the original lists them), plus "be" and "as", which the matcher adds.
CLEANED_WORDS: frozenset[str] = frozenset((
    "a", "if", "how", "where", "when", "which", "who", "what", "with", "was", "were", "did", "to", "from", "both",
    "and", "or", "the", "of", "is", "are", "besides", "that", "have", "has", "for each", "number of", "not",
    "than", "those", "on", "in", "any", "there", "distinct", ",", ", ", "be", "as"))


def token_variations(token: str) -> tuple[str, ...]:
    """The words ``token`` stands for (its group), or the token alone."""
    return _GROUP_OF.get(token, (token,))


def with_variations(words: Iterable[str]) -> list[str]:
    """``words`` and every word of their groups, each once. The original builds a Python set here, whose order
    varies with string hashing; the first occurrence order used instead only matters where it notes so."""
    words = list(words)
    return list(dict.fromkeys(words + [v for w in words for v in token_variations(w)]))


def merge_equivalent_classes(classes: Iterable[Iterable[str]]) -> dict[str, frozenset[str]]:
    """Each word's class, overlapping classes merged: ``[[a, b], [b, c], [d]]`` -> a, b, c: {a, b, c}; d: {d}."""
    class_of: dict[str, frozenset[str]] = {}
    for words in classes:
        merged = frozenset().union(*(class_of.get(w, frozenset((w,))) for w in words))
        for word in merged:
            class_of[word] = merged
    return class_of
