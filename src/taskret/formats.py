"""The texts the models see, in one place: change a layout here and every stage follows.

- In-context learning (EPR): a demonstration is ``"{input}\\t{output}"``; demonstrations are joined by
  ``"\\n"``, most similar last, then the test input as ``"{input}\\t"``; generation stops at the first
  newline. The scoring LM sees the same layout with one demonstration (``scoring_pair``), so the labels
  EPR learns from are made on the prompts it is later used with.
- Outputs may be shown to the LM in another notation than the task's own (:class:`OutputFormat`):
  Break's QDMR steps become ``"1#) step 2#) step"`` and are mapped back after decoding.
- Instruction-following retrieval (TART): ``"{instruction} [SEP] {query}"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

__all__ = ["DEMO_SEPARATOR", "SEP", "OutputFormat", "BREAK_FORMAT", "break_to_prompt", "break_from_prompt",
           "render_demo", "render_query", "demonstration", "scoring_pair", "format_query", "split_query",
           "normalize_whitespace"]

DEMO_SEPARATOR = "\n"  # between demonstrations, and after the last one; also the generation's stop
SEP = " [SEP] "  # TART: between the instruction and the query

_SPACES = re.compile(r"\s+")


def normalize_whitespace(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def _identity(text: str) -> str:
    return text


@dataclass(frozen=True)
class OutputFormat:
    """How a task's outputs are shown to the LM and read back from its generations.

    ``to_prompt`` turns a gold output into the text placed in a demonstration; ``from_prompt``
    maps a generation back to the task's own notation, so that metrics compare like with like.
    """

    to_prompt: Callable[[str], str] = _identity
    from_prompt: Callable[[str], str] = _identity


# --- Break: QDMR decompositions are shown to the LM as "1#) step 2#) step ..." -----------------

_BREAK_STEP_MARK = re.compile(r"\s*\d+#\)\s*")


def break_to_prompt(decomposition: str) -> str:
    steps = [_SPACES.sub(" ", step).strip() for step in decomposition.split(";")]
    return " ".join(f"{i}#) {step}" for i, step in enumerate(steps, start=1))


def break_from_prompt(text: str) -> str:
    steps = [step.strip() for step in _BREAK_STEP_MARK.split(text) if step.strip()]
    return " ;".join(steps)


BREAK_FORMAT = OutputFormat(to_prompt=break_to_prompt, from_prompt=break_from_prompt)


# --- In-context learning prompts ---------------------------------------------------------------

def render_demo(input_text: str, output_text: str) -> str:
    """One demonstration, without its separator: ``"{input}\\t{output}"`` (output as shown to the LM)."""
    return f"{input_text}\t{output_text}"


def demonstration(input_text: str, output_text: str) -> str:
    """One demonstration as it stands in a prompt, separator included."""
    return render_demo(input_text, output_text) + DEMO_SEPARATOR


def render_query(input_text: str) -> str:
    """The test input at the end of a prompt: the LM continues with the output."""
    return f"{input_text}\t"


def scoring_pair(demo_input: str, demo_output: str, input_text: str, output_text: str) -> tuple[str, str]:
    """EPR's scoring text: (prompt, target) = (one demonstration + the input, the output). Only the target's
    tokens are scored, so ``log P(output | demonstration, input)``; outputs as shown to the LM."""
    return demonstration(demo_input, demo_output) + render_query(input_text), output_text


# --- Instruction-following retrieval -----------------------------------------------------------

def format_query(instruction: str | None, query: str) -> str:
    """TART's input: ``"{instruction} [SEP] {query}"``, or the query alone without an instruction."""
    if instruction is None or not instruction.strip():
        return query
    return f"{instruction.strip()}{SEP}{query}"


def split_query(text: str) -> tuple[str | None, str]:
    """:func:`format_query` undone: ``(instruction, query)``, both stripped, or ``(None, text stripped)`` when no
    instruction leads it. The instruction ends at the first ``" [SEP] "``: one holding that separator itself
    leaves its tail in the query."""
    instruction, sep, query = text.partition(SEP)
    return (instruction.strip(), query.strip()) if sep and instruction.strip() else (None, text.strip())
