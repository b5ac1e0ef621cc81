"""Where one command spent its own time: wall seconds and peak memory per stage.

``aaco import --timings`` (and any caller) opens a :func:`recording`; the stages of the
pipeline mark themselves with :func:`stage` (``read``, ``tables``, ``analysis:roofline``,
``report:html``...). Outside a recording :func:`stage` costs one context-variable read, so
the marks stay in place for every run. Stages nest: an inner stage's name is prefixed with
its parent's (``analyses/analysis:critical_path``). Only the CLI prints them.

Example::

    with recording() as rec:
        import_new(paths, root)
    for s in rec.stages:
        print(s.name, s.seconds, s.peak_rss_mib)
"""

from __future__ import annotations

import contextlib
import resource
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

__all__ = ["Recording", "StageTime", "recording", "stage"]


@dataclass(frozen=True)
class StageTime:
    """One finished stage: ``name`` (parents first, ``/``-joined), when it began (seconds
    since the recording opened), its wall time in seconds, its depth, and the process's peak
    resident memory when it ended (MiB; the peak so far, never less than the previous
    stage's)."""

    name: str
    start_s: float
    seconds: float
    depth: int
    peak_rss_mib: float


@dataclass
class Recording:
    """The stages finished so far, in the order they ended (inner stages before their
    parent), and the total since the recording opened (``total_s``, set when it closes)."""

    stages: list[StageTime] = field(default_factory=list)
    total_s: float | None = None
    t0: float = field(default_factory=time.perf_counter)
    _open: list[str] = field(default_factory=list)

    def in_start_order(self) -> list[StageTime]:
        """The stages as they began: a parent before its children."""
        return sorted(self.stages, key=lambda st: (st.start_s, st.depth))


_CURRENT: ContextVar[Recording | None] = ContextVar("aaco_stage_recording", default=None)


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # bytes on macOS, KiB elsewhere
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """Record the stages run inside the block."""
    rec = Recording()
    token = _CURRENT.set(rec)
    try:
        yield rec
    finally:
        rec.total_s = time.perf_counter() - rec.t0
        _CURRENT.reset(token)


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as stage ``name`` when a recording is open (else do nothing)."""
    rec = _CURRENT.get()
    if rec is None:
        yield
        return
    full = "/".join([*rec._open, name])
    rec._open.append(name)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        dt = time.perf_counter() - t0
        rec._open.pop()
        rec.stages.append(StageTime(full, t0 - rec.t0, dt, len(rec._open), _peak_rss_mib()))
