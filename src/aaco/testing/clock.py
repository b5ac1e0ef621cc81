"""A deterministic clock: each reading is the previous one plus a fixed step (ns)."""

from __future__ import annotations


class FakeClock:
    """Callable like ``time.perf_counter_ns``; ``step_ns`` per reading, :meth:`advance` to jump.

    >>> clock = FakeClock(start_ns=100, step_ns=10)
    >>> clock(), clock()
    (100, 110)
    """

    def __init__(self, start_ns: int = 0, step_ns: int = 1_000) -> None:
        self.now_ns = start_ns
        self.step_ns = step_ns
        self.readings = 0

    def __call__(self) -> int:
        now = self.now_ns
        self.now_ns += self.step_ns
        self.readings += 1
        return now

    def advance(self, ns: int) -> None:
        self.now_ns += ns
