"""Shared examples of the EPR tests."""

from __future__ import annotations

from taskret.data import Example

TOPICS = ["weather", "alarm", "music", "timer"]


def make_examples(n: int) -> list[Example]:
    return [Example(f"e{i}", f"{TOPICS[i % 4]} request {i} for the {['morning', 'evening', 'weekend'][i % 3]}",
                    f"INTENT_{TOPICS[i % 4].upper()} slot {i} {['morning', 'evening', 'weekend'][i % 3]}")
            for i in range(n)]
