"""Reconnect delay: exponential with full jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """Attempt n (from 0) waits a uniform time in [0, min(max, base * 2**n))."""

    base: float = 0.1
    max: float = 5.0

    def delay(self, attempt: int, draw: float) -> float:
        """Pure: draw is a uniform number in [0, 1)."""
        ceiling = self.base
        for _ in range(attempt):
            if ceiling >= self.max:
                break
            ceiling *= 2
        return draw * min(ceiling, self.max)

    def next(self, attempt: int) -> float:
        return self.delay(attempt, random.random())
