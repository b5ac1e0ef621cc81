"""A runner whose one iteration spins for a known time: the real pipeline, harness and
bundle, with no framework underneath.

``--model`` is ``fake:<microseconds>`` (default 200 µs): each iteration busy-waits at least
that long on ``time.perf_counter_ns``, so every latency is known to be ``>=`` it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from aaco.errors import UsageError
from aaco.runners.base import Runner, RunOptions, RunPlan, RunStage
from aaco.runners.harness import Profiled, Workload
from aaco.runners.launch import LaunchOutcome


def spin(ns: int) -> None:
    """Busy-wait ``ns`` nanoseconds."""
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


class FakeWorkload(Workload):
    def prepare(self, purpose: str) -> Callable[[], Any]:
        self.ctx.stage("load")
        ns = int(self.spec["iteration_ns"])
        self.ctx.result.extra["iteration_ns"] = ns
        return lambda: spin(ns)

    @contextmanager
    def profiled(self) -> Iterator[Profiled | None]:
        ns = int(self.spec["iteration_ns"])
        yield Profiled(lambda: spin(ns))


class FakeRunner(Runner):
    name: ClassVar[str] = "fake"
    description: ClassVar[str] = "spins for a known time per iteration (aaco.testing)"
    workload: ClassVar[str] = "aaco.testing.runner:FakeWorkload"

    def plan(self, opts: RunOptions) -> RunPlan:
        kind, _, us = opts.model.partition(":")
        if kind != "fake" or not (us or "200").isdigit():
            raise UsageError(f"--model {opts.model}: the fake runner takes fake:<microseconds>")
        ns = int(us or "200") * 1_000
        return RunPlan(
            model={"name": opts.model, "path": None, "source": "fake"},
            backend={"name": "fake", "provider": "cpu"},
            spec={"iteration_ns": ns},
            warmup=opts.warmup if opts.warmup is not None else 2,
            iterations=None if opts.duration_s is not None else (opts.iterations or 20),
            batch=opts.batch or 1,  # items per iteration as asked (the spin does not care)
        )

    def finish(
        self, plan: RunPlan, outcome: LaunchOutcome, stage: RunStage, summary: dict[str, Any]
    ) -> None:
        if outcome.result is not None:
            stage.update("run", iteration_ns=outcome.result.get("iteration_ns"))
