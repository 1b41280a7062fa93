"""QDMR steps to operators, properties and arguments: Break's operator identifier, as LF-EM uses it.

A port of Hasson & Berant's ``scripts/qdmr_to_logical_form/operator_identifier.py``, ``qdmr_identifier.py`` and
``utils_.py`` (after Break's own ``qdmr_identifier``); see :mod:`taskret.icl.lf_em`. Its quirks are kept on purpose
(a reference ``#1`` also matches inside ``#12``, ``and`` inside ``candy``): LF-EM is defined by them.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from functools import lru_cache

from .variations import with_variations

AGGREGATE, ARITHMETIC, BOOLEAN, COMPARATIVE, COMPARISON, DISCARD, FILTER, GROUP, INTERSECTION, PROJECT, SELECT, \
    SORT, SUPERLATIVE, UNION = ("aggregate", "arithmetic", "boolean", "comparative", "comparison", "discard", "filter",
                                "group", "intersection", "project", "select", "sort", "superlative", "union")

#: The placeholder a projection's own reference becomes ("population of #REF").
REF_PLACEHOLDER = "#REF"


class UnparseableStep(ValueError):
    """A QDMR step that no operator, or more than one, explains, or whose arguments cannot be read."""


@dataclass
class Step:
    """One QDMR step as a logical form: its operator, properties (``max``, ``count``, ...) and arguments, each
    named ``operator-role`` (``filter-sub``, ``filter-condition``) and holding the texts it was given."""

    text: str
    operator: str
    properties: list[str] = field(default_factory=list)
    arguments: dict[str, list[str]] = field(default_factory=dict)

    def __str__(self) -> str:
        props = f"[{','.join(self.properties)}]" if self.properties else ""
        args = ";".join(sorted(f"{k.split('-', 1)[1]}: {v}" for k, values in self.arguments.items() for v in values))
        return f"{self.operator.upper()}{props}({args})"


@lru_cache(maxsize=4096)
def _in_pattern(part: str) -> re.Pattern:
    # The term is a regular expression as written (the original does not escape it); digits at its ends may not
    # run on into other digits, letters never.
    num_pref = "0-9" if part and part[0].isdigit() else ""
    num_suf = "0-9" if part and part[-1].isdigit() else ""
    return re.compile(fr"(^|[^a-zA-Z{num_pref}]){part}([^a-zA-Z{num_suf}]|$)")


def is_in(part: str, text: str) -> bool:
    """Whether ``part`` occurs in ``text`` as whole words."""
    return _in_pattern(part).search(text) is not None


def extract_references(step: str) -> list[int]:
    """The step numbers ``#n`` a step refers to, in order (``int`` fails on ``#x``: the step is unparseable)."""
    chunks = step.replace("# ", "hashtag ").split("#")
    references = []
    for chunk in chunks[1:]:
        if len(chunk) > 1:
            references.append(int(chunk.split()[0]))
        elif len(chunk) == 1:
            references.append(int(chunk))
    return references


def _refs(references: list[int]) -> list[str]:
    return [f"#{r}" for r in references]


class Identifier:
    """Recognises one operator and reads its properties and arguments."""

    operator = ""

    def __init__(self, properties_tokens: dict[str, list[str]] | None = None,
                 properties_order: list[list[str]] | None = None):
        self.properties_tokens = properties_tokens or {}
        self._terms = list(self._term_order(self.properties_tokens, properties_order))

    @staticmethod
    def _term_order(tokens: dict[str, list[str]], order: list[list[str]] | None):
        # Longest terms first within each group of properties; the first term found decides.
        groups = [tokens] if not order else [{k: v for k, v in tokens.items() if k in g} for g in order]
        for group in groups:
            term_properties: dict[str, list[str]] = {}
            for prop, terms in group.items():
                for term in terms:
                    term_properties.setdefault(term, []).append(prop)
            yield from sorted(term_properties.items(), key=lambda item: len(item[0]), reverse=True)

    def operator_indicators(self) -> list[str]:
        """Words that signal the operator itself (removed from its arguments before comparison)."""
        return []

    def properties_indicators(self, properties: list[str]) -> list[str]:
        return [term for p in properties for term in self.properties_tokens[p]]

    def identify(self, step: str) -> bool:
        return bool(self._identify(step, extract_references(step)))

    def properties(self, step: str) -> list[str] | None:
        return self._properties(step, extract_references(step))

    def arguments(self, step: str) -> dict[str, list[str] | str]:
        args = self._arguments(step, extract_references(step))
        # A list stays a list, a text becomes a one-item list, an empty text stays empty (it has no tokens).
        return {k: [x.strip() for x in v] if isinstance(v, list) else (v and [v.strip()]) for k, v in args.items()}

    def _identify(self, step: str, references: list[int]) -> bool:
        raise NotImplementedError

    def _arguments(self, step: str, references: list[int]) -> dict:
        raise NotImplementedError

    def _properties(self, step: str, references: list[int]) -> list[str] | None:
        step = step.lower()
        for term, properties in self._terms:
            if is_in(term, step):
                return properties
        return None


_AGGREGATE_TOKENS = {
    "max": with_variations(["max", "most", "more", "last", "bigger", "biggest", "larger", "largest", "higher",
                            "highest", "longer", "longest"]),
    "min": with_variations(["min", "least", "less", "first", "fewer", "smaller", "smallest", "lower", "lowest",
                            "shortest", "shorter", "earlier"]),
    "count": with_variations(["number of", "total number of"]),
    "sum": with_variations(["sum", "total"]),
    "avg": with_variations(["avg", "average", "mean"]),
}
_AGGREGATE_ORDER = [["max", "min"], ["avg"], ["count", "sum"]]


class Aggregate(Identifier):
    """"lowest of #2", "the number of #1"."""

    operator = AGGREGATE

    def __init__(self):
        super().__init__(_AGGREGATE_TOKENS, _AGGREGATE_ORDER)

    def _identify(self, step, references):
        if len(references) != 1:
            return False
        return any(is_in(term + " #", step) or is_in(term + " of #", step)
                   for terms in self.properties_tokens.values() for term in terms)

    def _arguments(self, step, references):
        return {"aggregate-arg": f"#{references[0]}"}


class Arithmetic(Identifier):
    """"difference of #3 and #5"."""

    operator = ARITHMETIC

    def __init__(self):
        super().__init__({name: with_variations([name]) for name in ("sum", "difference", "multiplication",
                                                                     "division")})

    def _identify(self, step, references):
        for term in (t for terms in self.properties_tokens.values() for t in terms):
            if (step.startswith(term) or step.startswith("the " + term)) and (
                    len(references) > 1 or (len(references) == 1 and is_in("and", step))):
                return True
        return False

    def _arguments(self, step, references):
        properties = self._properties(step, references)
        parts = re.split("and|,", step)
        if len(parts) != 2 or "sum" in properties or "multiplication" in properties:  # None fails: as the original
            return {"arithmetic-arg": _refs(references)}
        prefix, suffix = parts
        prefix = prefix.split()[-1]

        def part(text):
            refs = extract_references(text)
            return _refs(refs) if refs else text

        return {"arithmetic-left": part(prefix), "arithmetic-right": part(suffix)}


_CONDITIONAL_PROPERTIES = {
    "equals": with_variations(["equal", "equals", "same as"]),
    **{f"equals_{n}": [" ".join(x) for x in itertools.product(with_variations(["equals", "is"]), ["", "to"],
                                                              with_variations([n]))] for n in ("0", "1", "2")},
    **{f"more_than_{n}": [" ".join(x) for x in itertools.product(with_variations(["bigger", "more"]), ["", "than"],
                                                                 with_variations([n]))] for n in ("0", "1", "2")},
    **{f"less_than_{n}": [" ".join(x) for x in itertools.product(with_variations(["lower", "less"]), ["", "than"],
                                                                 with_variations([n]))] for n in ("0", "1", "2")},
}


class Boolean(Identifier):
    """"if both #2 and #3 are true", "is #2 more than #3", "if #1 is american"."""

    operator = BOOLEAN

    def __init__(self):
        super().__init__({"logical_and": ["both", "and"], "logical_or": ["either", "or"], "true": ["true"],
                          "false": ["false"], "if_exist": ["any", "there"], **_CONDITIONAL_PROPERTIES},
                         [list(_CONDITIONAL_PROPERTIES)])

    def operator_indicators(self):
        return [REF_PLACEHOLDER]

    def _identify(self, step, references):
        return step.lower().startswith(("if ", "is ", "are ", "did "))

    def _properties(self, step, references):
        logical = None
        if len(references) == 2 and is_in("both", step) and is_in("and", step):
            logical = "logical_and"
        elif len(references) == 2 and is_in("either", step) and is_in("or", step):
            logical = "logical_or"
        if logical is not None:
            return [logical, "false" if is_in("false", step) else "true"]
        if len(references) == 2:
            prefix = step.split(f"#{references[0]}")[0].lower()
            if "any" in prefix or "is there" in prefix or "there is" in prefix or "there are" in prefix:
                return ["if_exist"]
        return super()._properties(step, references)

    def _arguments(self, step, references):
        properties = self._properties(step, references)
        if properties:
            if "logical_and" in properties:  # the original tests logical_and twice: logical_or falls through
                return {"boolean-sub": _refs(references)}
            if "if_exist" in properties:
                objects = f"#{references[0]}"
                return {"boolean-sub": objects, "boolean-condition": step.split(objects)[1]}
        if step.split()[1].startswith("#"):  # "if #1 is american"
            objects = f"#{references[0]}"
            return {"boolean-sub": objects, "boolean-condition": step.split(objects)[1]}
        if len(references) == 1:  # "if dinner is served on #1"
            objects = f"#{references[0]}"
            return {"boolean-sub": objects, "boolean-condition": step.replace(objects, REF_PLACEHOLDER)}
        return {"boolean-condition": step}


class Comparative(Identifier):
    """"#1 where #2 is at most three", "#3 where #4 is higher than #2"."""

    operator = COMPARATIVE

    def __init__(self):
        super().__init__({
            "equals": with_variations(["equal", "equals", "same as"]),
            "more": with_variations(["more", "at least"]) + [f"{x} than" for x in with_variations(["higher", "larger",
                                                                                                    "bigger"])],
            "less": with_variations(["less", "at most"]) + [f"{x} than" for x in with_variations(["smaller", "lower"])],
            **_CONDITIONAL_PROPERTIES,
        })
        self._comparatives = ([t for terms in self.properties_tokens.values() for t in terms]
                              + with_variations(["contain", "include", "has", "have"])
                              + [f"{x} with" for x in with_variations(["start", "starts", "begin", "begins", "end",
                                                                        "ends"])]
                              + ["is", "are", "was"])

    def _identify(self, step, references):
        if 2 <= len(references) <= 3 and is_in("where", step) and (step.startswith("#") or step.startswith("the #")):
            return any(is_in(c, step) for c in self._comparatives)
        return False

    def _arguments(self, step, references):
        attribute = f"#{references[1]}"
        return {"comparative-sub": f"#{references[0]}", "comparative-attribute": attribute,
                "comparative-condition": step.split(attribute)[1]}


class Comparison(Identifier):
    """"which is highest of #1, #2"."""

    operator = COMPARISON

    def __init__(self):
        super().__init__({**_AGGREGATE_TOKENS, "true": ["true"], "false": ["false"]},
                         _AGGREGATE_ORDER + [["true", "false"]])

    def _identify(self, step, references):
        return step.lower().startswith("which") and len(references) > 1

    def _properties(self, step, references):
        found = super()._properties(step, references)
        if found is None:
            raise UnparseableStep(f"a comparison without its criterion: {step!r}")
        return found

    def _arguments(self, step, references):
        return {"comparison-arg": _refs(references)}


# The original picks the *last* of these that the step holds, iterating a Python set (an order that varies
# between runs); we iterate shortest first, so the longest expression found wins ("not in" over "not").
_DISCARD_EXPRESSIONS = sorted(with_variations(["besides", "not in"]), key=lambda x: (len(x), x))


class Discard(Identifier):
    """"#2 besides #3", "#1 besides cats"."""

    operator = DISCARD

    def operator_indicators(self):
        return list(_DISCARD_EXPRESSIONS)

    def _identify(self, step, references):
        return (1 <= len(references) <= 2
                and bool(re.search(r"^[#]+[0-9]+[\s]+", step) or re.search(r"[#]+[0-9]+$", step))
                and any(is_in(x, step) for x in _DISCARD_EXPRESSIONS))

    def _arguments(self, step, references):
        expression = None
        for candidate in _DISCARD_EXPRESSIONS:
            if is_in(candidate, step):
                expression = candidate
        kept, excluded = step.split(expression)
        return {"discard-sub": kept, "discard-exclude": excluded}


class Filter(Identifier):
    """"#2 that is wearing #3", "#1 from Canada"."""

    operator = FILTER

    def _identify(self, step, references):
        return 0 < len(references) <= 3 and step.startswith("#")

    def _arguments(self, step, references):
        to_filter = f"#{references[0]}"
        return {"filter-sub": to_filter, "filter-condition": step.split(to_filter)[1]}


class Group(Identifier):
    """"number of #3 for each #2", "average of #1 for each #2"."""

    operator = GROUP

    def __init__(self):
        super().__init__(_AGGREGATE_TOKENS, _AGGREGATE_ORDER)

    def operator_indicators(self):
        return ["for each"]

    def _identify(self, step, references):
        return is_in("for each", step) and len(references) > 0

    def _arguments(self, step, references):
        value, key = step.split("for each")
        value_refs, key_refs = extract_references(value), extract_references(key)
        return {"group-value": value.split()[-1] if not value_refs else f"#{value_refs[0]}",
                "group-key": key.split()[-1] if not key_refs else f"#{key_refs[0]}"}


_INTERSECTION_EXPRESSIONS = ["of both", "in both", "at both", "by both", "between both", "for both", "are both",
                             "both of", "both"]


class Intersection(Identifier):
    """"countries in both #1 and #2", "#3 of both #4 and #5"."""

    operator = INTERSECTION

    def operator_indicators(self):
        return _INTERSECTION_EXPRESSIONS + ["and"]

    def _identify(self, step, references):
        return len(references) >= 2 and is_in("both", step) and is_in("and", step)

    def _arguments(self, step, references):
        expression = next((x for x in _INTERSECTION_EXPRESSIONS if is_in(x, step)), None)
        projection, intersection = step.split(expression)
        return {"intersection-projection": projection,
                "intersection-intersection": _refs(extract_references(intersection))}


class Project(Identifier):
    """"first name of #2", "who was #1 married to"."""

    operator = PROJECT

    def operator_indicators(self):
        return [REF_PLACEHOLDER]

    def _identify(self, step, references):
        return len(references) == 1 and re.search(r"[\s]+[#]+[0-9\s]+", step) is not None

    def _arguments(self, step, references):
        ref = f"#{references[0]}"
        return {"project-projection": step.replace(ref, REF_PLACEHOLDER), "project-sub": ref}


class Select(Identifier):
    """"countries"."""

    operator = SELECT

    def _identify(self, step, references):
        return len(references) == 0

    def _arguments(self, step, references):
        return {"select-sub": step}


class Sort(Identifier):
    """"#1 sorted by #2", "#1 ordered by #2"."""

    operator = SORT

    def operator_indicators(self):
        return ["sort by", "sorted by", "order by", "ordered by"]

    def _identify(self, step, references):
        return any(is_in(x, step) for x in self.operator_indicators())

    def _arguments(self, step, references):
        expression = None
        for candidate in self.operator_indicators():
            if is_in(candidate, step):
                expression = candidate
        objects, order = (part.strip() for part in step.split(expression))
        return {"sort-sub": objects, "sort-order": order}


class Superlative(Identifier):
    """"#1 where #2 is highest", "#1 where #2 is smallest"."""

    operator = SUPERLATIVE

    def __init__(self):
        super().__init__({
            "max": with_variations(["most", "biggest", "largest", "highest", "longest"]),
            "min": with_variations(["least", "fewest", "smallest", "lowest", "shortest", "earliest"]),
        })
        self._phrases = [f"{pre} {s}" for pre in ("is", "is the", "are", "are the")
                         for terms in self.properties_tokens.values() for s in terms]

    def _identify(self, step, references):
        if step.startswith("#") and len(references) == 2 and is_in("where", step):
            return any(is_in(s, step) for s in self._phrases)
        return False

    def _arguments(self, step, references):
        entity, attribute = references
        return {"superlative-sub": f"#{entity}", "superlative-attribute": f"#{attribute}"}


class Union(Identifier):
    """"#1 or #2", "#1, #2, #3, #4", "#1 and #2"."""

    operator = UNION

    def _identify(self, step, references):
        if len(references) > 1:
            return re.search(r"^[#0-9,\s]+$", step.replace("and", ",").replace("or", ",")) is not None
        return False

    def _arguments(self, step, references):
        return {"union-sub": _refs(references)}


#: Every operator's identifier, in the order the original tries them.
IDENTIFIERS: dict[str, Identifier] = {i.operator: i for i in (
    Select(), Filter(), Project(), Aggregate(), Group(), Superlative(), Comparative(), Union(), Intersection(),
    Discard(), Sort(), Boolean(), Arithmetic(), Comparison())}

# When several operators fit, the first of these that does wins (after project and filter, the most generic,
# are set aside).
_PRECEDENCE = (BOOLEAN, SUPERLATIVE, GROUP, COMPARATIVE, INTERSECTION, ARITHMETIC)


def step_operator(step: str) -> str:
    """The operator of one step's text (its ``return`` already removed)."""
    candidates = [op for op, identifier in IDENTIFIERS.items() if identifier.identify(step)]
    if len(candidates) > 1:
        candidates = [op for op in candidates if op not in (PROJECT, FILTER)]
        for op in _PRECEDENCE:
            if op in candidates:
                candidates = [op]
                break
    if len(candidates) != 1:
        raise UnparseableStep(f"{len(candidates)} operators fit the step {step!r}: {', '.join(candidates)}")
    return candidates[0]


def identify_step(step: str) -> Step:
    """One step's logical form. Raises :class:`UnparseableStep` (or the ``ValueError`` / ``IndexError`` of the
    original's reading) when the step cannot be read: the caller treats any such step as unparseable."""
    operator = step_operator(step)
    identifier = IDENTIFIERS[operator]
    properties = identifier.properties(step)
    arguments = identifier.arguments(step)
    return Step(step, operator, list(properties) if properties else [], arguments)


def split_steps(qdmr: str) -> list[str]:
    """A ``return ... ;return ...`` decomposition's step texts, each without its first word (``return``); commas
    become tokens of their own."""
    steps = []
    for crude in qdmr.replace(",", " , ").split(";"):
        steps.append(" ".join(token.strip() for token in crude.split()[1:]).strip())
    return steps
