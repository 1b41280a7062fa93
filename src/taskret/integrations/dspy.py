"""DSPy few-shot demonstrations picked per input from a saved taskret index (needs ``dspy``:
``pip install 'taskret[dspy]'``).

.. code-block:: python

    import dspy
    from taskret.integrations.dspy import TaskretFewShot

    dspy.configure(lm=dspy.LM("openai/gpt-4o-mini"))
    program = dspy.Predict("command -> parse")
    compiled = TaskretFewShot("runs/mtop-epr-index", k=8).compile(program)   # `taskret index` / `epr index` output
    compiled(command="wake me up at 7").parse
    compiled.save("mtop_program.json")                 # the program's state and the index's path, as JSON

    again = TaskretFewShot("runs/mtop-epr-index").compile(dspy.Predict("command -> parse"))
    again.load("mtop_program.json")                    # the index is found again, relative to the JSON file

Why not ``dspy.KNNFewShot``: it embeds the training set in memory with a vectorizer, runs ``BootstrapFewShot`` on
every call (LM calls per input), and its compiled program cannot be saved with its index (stanfordnlp/dspy #1089).
Here the demonstrations are the examples a taskret retriever ranks highest for the input (BM25, SBERT, a trained
EPR dual encoder: any index folder ``taskret index`` or ``taskret epr index`` wrote), read from the folder as they
are: no bootstrapping, no LM call to choose them. They come most similar **last**, next to the input, as taskret's
own prompts place them; outputs are shown as the task's prompts show them (Break: ``1#) step 2#) step``).

Saving: :meth:`TaskretDemos.save` writes DSPy's JSON state (the wrapped program's own instructions and demos)
plus a ``"taskret"`` entry: the index folder's path relative to the JSON file (and its absolute path, tried
second), ``k`` and the two field names. No pickle: ``.pkl`` and ``save_program=True`` are refused, since the index
is a folder of its own, never copied into the program. :meth:`TaskretDemos.load` reads the entry and loads that
index (a moved pair of program file and index folder still loads). The index is loaded once and shared by
copies of the module (DSPy copies modules often); each call sets the demonstrations on a copy of the wrapped
program, so concurrent calls (``dspy.Evaluate`` with threads) do not see each other's demonstrations.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import dspy
from dspy.teleprompt import Teleprompter

from ..retrieval.index import LoadedIndex, load_index

__all__ = ["TaskretFewShot", "TaskretDemos", "STATE_KEY", "STATE_FORMAT"]

#: The key of taskret's entry in a saved program's JSON state, and the format it is written in.
STATE_KEY = "taskret"
STATE_FORMAT = "taskret-dspy/1"


def _load_examples_index(index: str | os.PathLike | LoadedIndex) -> LoadedIndex:
    loaded = index if isinstance(index, LoadedIndex) else load_index(index)
    if loaded.kind != "examples":
        raise ValueError(f"{loaded.directory}: holds {loaded.kind}, not examples (input/output pairs to show as "
                         f"demonstrations); write it with `taskret index` or `taskret epr index`")
    return loaded


def _pick_field(names: list[str], given: str | None, side: str, predictor: str) -> str:
    if given is not None:
        return given
    if len(names) == 1:
        return names[0]
    option = "input_field" if side == "input" else "output_field"
    raise ValueError(f"predictor '{predictor}' has {len(names)} {side} fields ({', '.join(names) or 'none'}): name the "
                     f"one the index's {side}s fill with {option}=")


class TaskretDemos(dspy.Module):
    """``program`` with, on every call, the ``k`` examples of a taskret index that its retriever ranks highest for
    the input as the demonstrations of its predictors.

    ``input_field``: the program's input field whose value is the query and which the examples' inputs fill (default:
    the only input field of the first predictor); ``output_field``: the output field the examples' outputs fill
    (default: its only output field apart from a ChainOfThought's ``reasoning``). Every predictor whose signature has
    both fields gets the demonstrations; they replace the predictor's own demos for that call (as ``KNNFewShot``'s
    do). ``instruction`` (TART indexes): every query becomes ``"{instruction} [SEP] {query}"``.
    """

    def __init__(self, program: dspy.Module, index: str | os.PathLike | LoadedIndex, k: int = 4, *,
                 input_field: str | None = None, output_field: str | None = None, instruction: str | None = None):
        super().__init__()
        if k < 1:
            raise ValueError("k must be at least 1")
        self.program = program
        self.k = k
        self.instruction = instruction
        self._index = _load_examples_index(index)
        predictors = program.named_predictors()
        if not predictors:
            raise ValueError("the program has no predictors (dspy.Predict, dspy.ChainOfThought, ...) to give "
                             "demonstrations to")
        first_name, first = predictors[0]
        self.input_field = _pick_field(list(first.signature.input_fields), input_field, "input", first_name)
        self.output_field = _pick_field([f for f in first.signature.output_fields if f != "reasoning"], output_field,
                                        "output", first_name)
        if not self._targets(program):
            raise ValueError(f"no predictor of the program has input field '{self.input_field}' and output field "
                             f"'{self.output_field}' (predictors: {', '.join(n for n, _ in predictors)})")

    # -- demonstrations -------------------------------------------------------------------------------------

    @property
    def index(self) -> LoadedIndex:
        return self._index

    def _targets(self, program: dspy.Module) -> list[Any]:
        return [p for _, p in program.named_predictors()
                if self.input_field in p.signature.input_fields and self.output_field in p.signature.output_fields]

    def demos_for(self, query: str) -> list[dspy.Example]:
        """The ``k`` examples the index ranks highest for ``query``, as DSPy examples, the most similar last."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"the query ('{self.input_field}') must be a non-empty string")
        if self.instruction:
            from ..formats import format_query

            query = format_query(self.instruction, query)
        index = self._index
        ids = index.retriever.retrieve([query], k=self.k).ids[0]
        records = [index.records[i] for i in reversed(ids)]
        return [dspy.Example(**{self.input_field: r.text, self.output_field: index.prompt_output(r)})
                .with_inputs(self.input_field) for r in records]

    def forward(self, **kwargs):
        if self.input_field not in kwargs:
            raise KeyError(f"input '{self.input_field}' not given (got: {', '.join(kwargs) or 'none'})")
        demos = self.demos_for(kwargs[self.input_field])
        program = self.program.deepcopy()  # this call's demonstrations on a copy: concurrent calls stay apart
        for predictor in self._targets(program):
            predictor.demos = list(demos)
        return program(**kwargs)

    def __deepcopy__(self, memo: dict) -> "TaskretDemos":
        """A copy that shares the loaded index (read-only: retriever, texts) and copies everything else."""
        clone = self.__class__.__new__(self.__class__)
        memo[id(self)] = clone
        for name, value in self.__dict__.items():
            setattr(clone, name, value if name == "_index" else copy.deepcopy(value, memo))
        return clone

    # -- saving -----------------------------------------------------------------------------------------------

    def dump_state(self, json_mode: bool = True) -> dict:
        """DSPy's state of the wrapped program plus the ``"taskret"`` entry (module docstring)."""
        state = super().dump_state(json_mode=json_mode)
        directory = Path(self._index.directory).resolve()
        relative_to = getattr(self, "_saving_to", None)
        try:
            reference = os.path.relpath(directory, relative_to) if relative_to is not None else str(directory)
        except ValueError:  # another drive (Windows): only the absolute path can name it
            reference = str(directory)
        state[STATE_KEY] = {"format": STATE_FORMAT, "index": Path(reference).as_posix(),
                            "index_absolute": str(directory), "k": self.k, "input_field": self.input_field,
                            "output_field": self.output_field, "instruction": self.instruction}
        return state

    def load_state(self, state: dict, **kwargs) -> "TaskretDemos":
        """Load DSPy's state and the index the ``"taskret"`` entry names (relative paths against the folder of the
        file being loaded, else the working directory; then the absolute path)."""
        entry = state.get(STATE_KEY)
        if not isinstance(entry, dict) or entry.get("format") != STATE_FORMAT:
            raise ValueError(f"not the state of a TaskretDemos program: no '{STATE_KEY}' entry in format "
                             f"{STATE_FORMAT} (was it saved by a plain dspy program?)")
        for key in ("index", "index_absolute", "k", "input_field", "output_field"):
            if key not in entry:
                raise ValueError(f"the '{STATE_KEY}' entry of the saved state has no '{key}'")
        base = getattr(self, "_loading_from", None) or Path.cwd()
        tried = [base / entry["index"], Path(entry["index_absolute"])]
        found = next((p for p in tried if (p / "meta.json").is_file()), None)
        if found is None:
            raise FileNotFoundError(f"the program's taskret index is not at {' nor at '.join(map(str, tried))}: move "
                                    f"the index folder back beside the program file, or build it again")
        self._index = _load_examples_index(found)
        self.k = int(entry["k"])
        self.input_field, self.output_field = entry["input_field"], entry["output_field"]
        self.instruction = entry.get("instruction")
        rest = {key: value for key, value in state.items() if key != STATE_KEY}
        super().load_state(rest, **kwargs)
        return self

    def save(self, path: str | os.PathLike, save_program: bool = False, modules_to_serialize: Any = None) -> None:
        """Save the state as JSON (``path`` ends in ``.json``), the index's path relative to that file."""
        path = Path(path)
        if save_program or path.suffix != ".json":
            raise ValueError(f"{path}: a TaskretDemos program is saved as JSON state only (a path ending in .json, "
                             f"save_program=False): its index stays a folder of its own, and pickles are not used")
        self._saving_to = path.resolve().parent
        try:
            super().save(path)
        finally:
            del self._saving_to

    def load(self, path: str | os.PathLike, allow_pickle: bool = False, **kwargs) -> "TaskretDemos":
        """Load a state :meth:`save` wrote, and the index it names."""
        path = Path(path)
        if path.suffix != ".json":
            raise ValueError(f"{path}: a TaskretDemos program is loaded from its JSON state (.json)")
        self._loading_from = path.resolve().parent
        try:
            super().load(path, **kwargs)
        finally:
            del self._loading_from
        return self


class TaskretFewShot(Teleprompter):
    """A DSPy optimizer (teleprompter) whose ``compile(student)`` returns a :class:`TaskretDemos`: the student with
    per-input demonstrations from the index folder ``index``. No training set and no LM calls: the index is the
    pool (``trainset`` is ignored; build the index from it with ``taskret index``). Keyword arguments go to
    :class:`TaskretDemos` (``input_field``, ``output_field``, ``instruction``)."""

    def __init__(self, index: str | os.PathLike | LoadedIndex, k: int = 4, **options: Any):
        super().__init__()
        self.index = _load_examples_index(index)
        self.k = k
        self.options = options

    def compile(self, student: dspy.Module, *, trainset: list | None = None, teacher: Any = None,
                valset: list | None = None, **kwargs: Any) -> TaskretDemos:
        return TaskretDemos(student.deepcopy(), self.index, self.k, **self.options)
