"""Break's LF-EM (logical-form exact match), as the evaluator EPR reported its Break numbers with computes it.

A QDMR decomposition (``return flights ;return #1 from denver ;return #2 to boston``) becomes a logical form:
each step an operator (select, filter, project, aggregate, ...), its properties and arguments, references ``#n``
edges of a graph. Two decompositions match when their graphs, normalized, are equal: the same graph with its steps
in another order matches, so does a paraphrase the normalization forgives (operator and function words dropped,
chains of filters folded, inflections of the question's words taken as one); a different graph does not.

    >>> from taskret.icl.lf_em import lf_em
    >>> lf_em("return flights ;return #1 to boston ;return #2 from denver",
    ...       "return flights ;return #1 from denver ;return #2 to boston")
    True

:func:`lf_em` takes the question too (``question=``), as the original does: its words' inflections and lemmas
(spaCy's ``en_core_web_sm``, inflect, WordNet 3.0) then count as one word. These are the ``break`` extra
(``pip install 'taskret[break]'``) and WordNet's database (``apt-get install wordnet-base``, or NLTK's
``wordnet``); :func:`load_resources` checks them. Without a question only the operator words' classes are used,
and nothing beyond networkx is needed.

Credits and licences. This is our own code, a port of the logic of:

* Hasson & Berant, "Question Decomposition with Dependency Graphs" (AKBC 2021),
  github.com/matanhasson/qdecomp_with_dependency_graphs: ``dependencies_graph/evaluation/logical_form_matcher.py``
  and ``qdmr_to_logical_form_tokens.py``, ``scripts/qdmr_to_logical_form/`` (the operator identifier),
  ``scripts/data_processing/break_app_store_generation.py`` (the lexicon), ``utils/graph.py``; as vendored by
  EPR (Rubin et al., 2022, github.com/OhadRubin/EPR, ``qdecomp_with_dependency_graphs/``), whose
  ``src/utils/eval_many.py`` calls it. Neither repository states a licence.
* Their operator identifier and lexicon are adapted from Break (Wolfson et al., 2020, github.com/allenai/Break,
  annotation pipeline), MIT licence, Copyright (c) 2021 AI2.

Where this differs from the original (NLTK's WordNet read directly, newer spaCy and inflect, fixed orders where
the original iterates Python sets): the deviation table of ``docs/how-to/evaluate.md``.
"""

from __future__ import annotations

from .lexicon import LF_EM_INSTALL, load_resources
from .matcher import LogicalForm, lf_em, logical_form_key, qdmr_to_logical_form
from .operators import Step, UnparseableStep
from .wordnet import WordNetMissing

__all__ = ["LF_EM_INSTALL", "LogicalForm", "Step", "UnparseableStep", "WordNetMissing", "lf_em", "load_resources",
           "logical_form_key", "qdmr_to_logical_form"]
