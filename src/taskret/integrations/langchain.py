"""A LangChain example selector backed by a taskret retriever (needs ``langchain-core``).

.. code-block:: python

    from langchain_core.prompts import FewShotPromptTemplate, PromptTemplate
    from taskret.integrations.langchain import TaskretExampleSelector

    selector = TaskretExampleSelector.from_index("runs/mtop-bm25-index", k=4)   # `taskret index` output
    prompt = FewShotPromptTemplate(example_selector=selector,
                                   example_prompt=PromptTemplate.from_template("{input}\\t{output}"),
                                   suffix="{input}\\t", example_separator="\\n", input_variables=["input"])
    prompt.format(input="wake me up at 7")

The examples come back most similar **last**, next to the test input, as taskret's own prompts place them,
so the template above renders exactly the prompt ``PromptBuilder`` builds from the same k demonstrations.

Braces in the examples (bash ``find . -exec rm {} \\;``, JSON, code) are shown literally: a
``FewShotPromptTemplate`` substitutes the example values into ``example_prompt`` and then reads the joined
text as a template once more, so the selector escapes the values for that second pass. ``template_format``
names the format of the prompt the examples go into: ``"f-string"`` (default, as LangChain's),
``"jinja2"``, or ``None`` for prompts that do not re-read the examples (``FewShotChatMessagePromptTemplate``)
and for using :meth:`select_examples` directly.

Set selection: a retriever trained for a selection (an EPR run with ``set_training``, CEIL's DPP) is selected with
it by default, as ``taskret evaluate`` and the service's ``/prompt`` select: the k chosen from its top
``n_candidates`` by :mod:`taskret.icl.selection` (an index built from the run records it; ``from_examples("epr:DIR")``
reads it from the run). ``select=None`` takes the ranking's top k; ``select=Selection("mmr", 0.7)`` (or ``dpp``)
selects any retriever's results. :attr:`TaskretExampleSelector.selection` says which applies.

``add_example``: a selector made with :meth:`TaskretExampleSelector.from_examples` owns its pool and
supports it (the example is appended and the pool re-indexed: fine for BM25 and small pools; a dense
retriever re-encodes every example). A selector over a saved index folder (:meth:`from_index`) is
read-only, like the folder, and raises ``NotImplementedError``: re-create the index with
``taskret index`` to change it.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Literal, Mapping, Sequence

from langchain_core.example_selectors import BaseExampleSelector

from ..data import Example
from ..icl.selection import RECORDED, BoundSelection, Selection, resolve_selection, trained_for
from ..retrieval import Retriever, make_retriever

__all__ = ["TaskretExampleSelector"]


def _escape_f_string(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _escape_jinja2(text: str) -> str:
    # every tag, expression and comment opens with "{": print each one as a string literal
    return text.replace("{", "{{ '{' }}")


# FewShotPromptTemplate formats the joined examples once more in its template_format: escape them for that pass
_ESCAPES = {"f-string": _escape_f_string, "jinja2": _escape_jinja2, None: lambda text: text}


class TaskretExampleSelector(BaseExampleSelector):
    """Select the k examples a taskret retriever ranks highest for the input, most similar last.

    ``input_key``/``output_key`` name the keys of the returned dicts (the example prompt's variables);
    the query is ``input_variables[query_key]`` (default: ``input_key``, or the only variable given).
    ``instruction`` (TART) prefixes every query as ``"{instruction} [SEP] {query}"``.
    ``template_format`` is the ``FewShotPromptTemplate``'s (``"f-string"``, ``"jinja2"``): the returned values
    are escaped for it, so that the prompt shows the examples' braces literally; ``None`` returns them as they are
    (``FewShotChatMessagePromptTemplate``, or reading the examples yourself).
    ``selection``: choose the k as a set from the retriever's top ``selection.n_candidates``
    (:class:`~taskret.icl.selection.Selection`, as ``taskret evaluate --select``); None: its top k.
    """

    def __init__(self, retriever: Retriever, examples: Sequence[Example], *, k: int = 4, input_key: str = "input",
                 output_key: str = "output", query_key: str | None = None, instruction: str | None = None,
                 prompt_output=None, mutable: bool = False,
                 template_format: Literal["f-string", "jinja2"] | None = "f-string",
                 selection: Selection | None = None):
        if k < 1:
            raise ValueError("k must be at least 1")
        if template_format not in _ESCAPES:
            raise ValueError(f"template_format must be 'f-string', 'jinja2' or None (got {template_format!r})")
        pool = {e.id: e for e in examples}
        if not retriever.ids:
            raise ValueError("the retriever has no index: index the examples first, or use from_examples()")
        missing = next((i for i in retriever.ids if i not in pool), None)
        if missing is not None:
            raise ValueError(f"the retriever's index holds id '{missing}' that is not among the examples")
        self.retriever = retriever
        self.examples = list(examples)
        self._pool = pool
        self.k = k
        self.input_key = input_key
        self.output_key = output_key
        self.query_key = query_key
        self.instruction = instruction
        self.prompt_output = prompt_output or (lambda e: e.output)
        self.mutable = mutable
        self.template_format = template_format
        self.selection = selection
        self._bound: BoundSelection | None = None  # the selection's vectors, bound when first asked

    # -- construction ----------------------------------------------------------------------------------

    @classmethod
    def from_examples(cls, examples: Iterable[Mapping[str, Any]], retriever: str | Retriever = "bm25", *,
                      k: int = 4, input_key: str = "input", output_key: str = "output", id_key: str | None = None,
                      select=RECORDED, **kwargs) -> "TaskretExampleSelector":
        """Index LangChain-style example dicts (``{input_key: ..., output_key: ...}``) with a retriever spec
        (``bm25``, ``sbert``, ``dense:ENCODER``, ``epr:DIR``, ...) or an un-indexed :class:`Retriever`.
        ``select``: by default the selection the spec was trained for (``epr:DIR`` of a set-training run: its DPP,
        :func:`~taskret.icl.selection.trained_for`); None: the ranking's top k; or a
        :class:`~taskret.icl.selection.Selection`."""
        pool = [cls._to_example(row, i, input_key, output_key, id_key) for i, row in enumerate(examples)]
        if not pool:
            raise ValueError("no examples to select from")
        selection = resolve_selection(select, trained_for(retriever) if isinstance(retriever, str) else None)
        ret = make_retriever(retriever) if isinstance(retriever, str) else retriever
        ret.index(pool)
        return cls(ret, pool, k=k, input_key=input_key, output_key=output_key, mutable=True, selection=selection,
                   **kwargs)

    @classmethod
    def from_index(cls, index_dir: str | os.PathLike, *, k: int = 4, input_key: str = "input",
                   output_key: str = "output", select=RECORDED, **kwargs) -> "TaskretExampleSelector":
        """A read-only selector over an index folder written by ``taskret index`` (checked as the service
        checks it). Outputs are shown as the task's prompts show them (Break: ``1#) step 2#) step``).
        ``select``: by default the selection the index records (an EPR run trained for CEIL's DPP), as the
        service's ``/prompt`` applies it; None: the ranking's top k; or a
        :class:`~taskret.icl.selection.Selection`."""
        from ..retrieval.index import load_index

        index = load_index(index_dir)
        if index.kind != "examples":
            raise ValueError(f"{index_dir}: holds {index.kind}, not examples; write it with `taskret index` or "
                             f"`taskret epr index`")
        records = index.records
        return cls(index.retriever, index.examples(), k=k, input_key=input_key, output_key=output_key,
                   prompt_output=lambda e: index.prompt_output(records[e.id]), mutable=False,
                   selection=resolve_selection(select, index.selection), **kwargs)

    @staticmethod
    def _to_example(row: Mapping[str, Any], position: int, input_key: str, output_key: str,
                    id_key: str | None) -> Example:
        for key in (input_key, output_key):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise ValueError(f"example {position}: '{key}' must be a non-empty string (got {row.get(key)!r})")
        example_id = str(row[id_key]) if id_key is not None and row.get(id_key) is not None else f"example-{position}"
        return Example(example_id, row[input_key], row[output_key])

    # -- BaseExampleSelector -----------------------------------------------------------------------------

    def _query(self, input_variables: Mapping[str, Any]) -> str:
        key = self.query_key or self.input_key
        if key in input_variables:
            value = input_variables[key]
        elif self.query_key is None and len(input_variables) == 1:
            value = next(iter(input_variables.values()))
        else:
            raise KeyError(f"input variable '{key}' not given (got: {', '.join(input_variables) or 'none'}); "
                           f"set query_key to the variable that holds the query")
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"the query ('{key}') must be a non-empty string")
        if self.instruction:
            from ..formats import format_query

            return format_query(self.instruction, value)
        return value

    def select_examples(self, input_variables: dict[str, str]) -> list[dict]:
        """The top-k examples as ``{input_key, output_key}`` dicts, the most similar last; with a selection, the k
        it chooses from the top ``n_candidates``, by the retriever's order."""
        query = self._query(input_variables)
        if self.selection is None:
            ids = self.retriever.retrieve([query], k=self.k).ids[0]
        else:
            if self._bound is None:
                self._bound = BoundSelection(self.selection, self.retriever, self._pool)
            ranked = self.retriever.retrieve([query], k=self.selection.n_candidates)
            kept = self._bound.select(ranked.ids[0], ranked.scores[0], lambda ordered: ordered[: self.k])
            ids = [ranked.ids[0][i] for i in kept]
        chosen = [self._pool[i] for i in ids]
        chosen.reverse()
        escape = _ESCAPES[self.template_format]
        return [{self.input_key: escape(e.input), self.output_key: escape(self.prompt_output(e))} for e in chosen]

    def add_example(self, example: dict[str, str]) -> str:
        """Add an example to a selector that owns its pool (from_examples) and re-index; returns its id."""
        if not self.mutable:
            raise NotImplementedError("this selector reads a saved index folder, which is immutable; re-create the "
                                      "index with `taskret index` (or use TaskretExampleSelector.from_examples) "
                                      "to add examples")
        example_id = f"example-{len(self.examples)}"
        while example_id in self._pool:
            example_id += "+"
        added = self._to_example(example, len(self.examples), self.input_key, self.output_key, None)
        added = Example(example_id, added.input, added.output)
        pool = [*self.examples, added]
        self.retriever.index(pool)  # rebuilds the whole index (bm25s and FAISS flat have no cheap append here)
        self.examples = pool
        self._pool[example_id] = added
        self._bound = None  # a dense retriever's vectors are those of the new index
        return example_id
