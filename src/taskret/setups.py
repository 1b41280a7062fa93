"""Named setups: the retrieval pipelines the benchmarks recommend, by a short name.

A setup is a retriever spec plus, for some, a reranker and where the instruction goes. Its name is accepted
wherever a retriever spec is (``taskret tart evaluate/index``, ``taskret index``, :func:`taskret.make_retriever`,
``Setup``'s own :meth:`Setup.retriever` / :meth:`Setup.reranker`); the commands print the full spec it stands
for, and an index built from a setup records it, so ``taskret tart search`` and ``taskret serve`` rerank as it
says without being asked.

==================  =========  ================================================================================
name                for        what it is
==================  =========  ================================================================================
``docs-fast``       documents  BM25 + MiniLM-L6, min-max scores fused 0.4 / 0.6; no training, no LM. The first
                               stage reads the query alone: an instruction's words cost both components on
                               tasks they were not trained for.
``docs-rerank``     documents  ``docs-fast``, its top 10 reranked by SmolLM2-135M as a zero-shot query-likelihood
                               (UPR) reranker, fused 0.1 / 0.9 with the first stage; the instruction is read by
                               the reranker only.
``examples-bm25``   examples   BM25 over the examples' inputs (EPR's baseline).
``examples-epr:D``  examples   A trained EPR retriever: ``epr:D`` (an EPR work folder or its saved index).
==================  =========  ================================================================================

Quality and cost of each are measured by ``benchmarks/documents/setups.py`` (``benchmarks/results/setups.json``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["SETUPS", "Setup", "resolve_setup", "setup_names"]

_HYBRID = "hybrid:bm25+dense:minilm-l6?fusion=convex&weight=0.4&read_instruction=0,0"


@dataclass(frozen=True)
class Setup:
    """A named pipeline: ``retriever`` (a :func:`~taskret.retrieval.make_retriever` spec), and optionally a
    reranker (a :func:`~taskret.rerank.load_reranker` spec) reordering the first stage's top ``rerank_depth``,
    fused with it at the first stage's share ``rerank_weight``. The reranker reads the instructed query; the
    first stage reads what its spec says (``read_instruction``)."""

    name: str
    kind: str  # "documents" or "examples"
    retriever: str
    rerank: str | None = None
    rerank_depth: int = 10
    rerank_weight: float | None = None
    summary: str = ""

    @property
    def spec(self) -> str:
        """The full spec it stands for, as a user would type it."""
        if self.rerank is None:
            return self.retriever
        weight = f" --rerank-weight {self.rerank_weight}" if self.rerank_weight is not None else ""
        return f"{self.retriever} --rerank {self.rerank} --rerank-depth {self.rerank_depth}{weight}"

    def describe(self) -> str:
        """One line for a terminal: the name, the full spec, and what it is."""
        return f"{self.name} = {self.spec} ({self.summary})"

    def search_settings(self) -> dict:
        """What an index records so that search and serve apply the setup unasked (``index_info.json``)."""
        return {"setup": self.name, "rerank": self.rerank, "rerank_depth": self.rerank_depth if self.rerank else None,
                "rerank_weight": self.rerank_weight}

    def to_dict(self) -> dict:
        return {**asdict(self), "spec": self.spec}


SETUPS: dict[str, Setup] = {s.name: s for s in (
    Setup("docs-fast", "documents", _HYBRID,
          summary="BM25 + MiniLM-L6 fused; no training, no LM; the query alone reaches the first stage"),
    Setup("docs-rerank", "documents", _HYBRID, rerank="upr:smollm2-135m", rerank_depth=10, rerank_weight=0.1,
          summary="docs-fast, its top 10 reranked by SmolLM2-135M query likelihood; the instruction at the "
          "reranker only"),
    Setup("examples-bm25", "examples", "bm25", summary="BM25 over the examples' inputs"),
    Setup("examples-epr", "examples", "epr:{arg}", summary="a trained EPR retriever (examples-epr:DIR, DIR an EPR "
          "work folder or its saved index)"),
)}


def setup_names() -> list[str]:
    return [name + (":DIR" if "{arg}" in s.retriever else "") for name, s in SETUPS.items()]


def resolve_setup(spec: str) -> Setup | None:
    """The setup ``spec`` names (``docs-fast``, ``examples-epr:runs/epr``, ...), or None when it names none
    (then it is a plain retriever spec). A setup that takes an argument gets it after ``:``."""
    name, sep, arg = str(spec).partition(":")
    setup = SETUPS.get(name)
    if setup is None:
        return None
    takes_arg = "{arg}" in setup.retriever
    if takes_arg and not arg:
        raise ValueError(f"setup '{name}' needs a folder: {name}:DIR (an EPR work folder or its saved index)")
    if not takes_arg and sep:
        raise ValueError(f"setup '{name}' takes no argument (got '{spec}'); named setups: {', '.join(setup_names())}")
    if takes_arg:
        return Setup(f"{name}:{arg}", setup.kind, setup.retriever.format(arg=arg), setup.rerank, setup.rerank_depth,
                     setup.rerank_weight, setup.summary)
    return setup
