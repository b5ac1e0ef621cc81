"""The system sampler over a whole process tree: the watched process and every descendant.

``aaco profile -- CMD`` watches a command that may do its work in children (``sh -c``,
``make``, ``torchrun``, a tracer such as rocprofv3 wrapping the program): the ``process_tree``
collector samples like ``system`` (:class:`~aaco.collectors.system.SystemSampler`, the same
``system_events`` table, host columns included) but its ``proc_*`` columns add up the tree
under the watched pid, found afresh at every sample:

* ``proc_cpu_pct``: CPU time of the tree's processes over the interval; a process that
  ended keeps counting the CPU time last read from it, so the cumulative figure never goes
  down (what it used between that reading and its exit is missed, and so is a process that
  started and ended between two samples: the whole run's exact CPU time is ``wait4``'s, in
  ``aaco profile``'s per-run record);
* ``proc_rss_bytes``: the sum of the live processes' resident sets (pages shared between
  them, after a fork, count once per process, so this is an upper bound of the memory the
  tree held); its maximum is the tree's sampled peak;
* ``proc_threads``: threads of the live processes; context switches (summed over each
  process's threads) and page faults: cumulative over every process seen, ended ones
  included.

Descendants are read from ``/proc/PID/task/TID/children`` where the kernel has it, else
through psutil. ``info()`` adds ``scope: "process_tree"``, ``processes_max`` (most processes
alive at one sample) and ``processes_seen`` to the system sampler's account.

Example::

    with ProcessTreeSampler(pid, hz=10) as c:
        ...  # the command runs
    c.table()  # system_events rows, proc_* over the tree
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, ClassVar

import psutil

from aaco.collectors.system import (
    _LINUX,
    SystemSampler,
    _Denied,
    _Gone,
    _LinuxProc,
    _ProcReader,
    _ProcSample,
    _PsutilProc,
)

__all__ = ["ProcessTreeSampler", "descendants"]


def _has_children_files() -> bool:
    """Whether this kernel lists a task's children (``CONFIG_PROC_CHILDREN``)."""
    pid = os.getpid()
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


def _children_proc(pid: int) -> list[int]:
    """Children of every thread of ``pid``, from ``/proc`` (empty once it is gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(x) for x in fh.read().split())
        except OSError:
            continue
    return out


def _children_psutil(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def descendants(pid: int, children: Callable[[int], list[int]] | None = None) -> list[int]:
    """Every descendant of ``pid`` alive now (children first, then theirs), without ``pid``."""
    if children is None:
        children = _children_proc if _LINUX and _has_children_files() else _children_psutil
    seen: set[int] = {pid}
    out: list[int] = []
    queue = [pid]
    while queue:
        for child in children(queue.pop(0)):
            if child not in seen:
                seen.add(child)
                out.append(child)
                queue.append(child)
    return out


class _TreeProc:
    """The counters of the tree under ``pid``, one :class:`_ProcReader` per process.

    ``read`` raises ``_Gone`` / ``_Denied`` only for the root: the tree is watched as long as
    the process the run waits for lives."""

    def __init__(self, pid: int) -> None:
        self._open: Callable[[int], _ProcReader] = _LinuxProc if _LINUX else _PsutilProc
        self._children = _children_proc if _LINUX and _has_children_files() else _children_psutil
        self._root = pid
        self._procs: dict[int, _ProcReader] = {pid: self._open(pid)}
        self._last: dict[int, _ProcSample] = {}
        # what the processes that ended last read: cumulative counters never go down
        self._gone_cpu_s = 0.0
        self._gone_ctx = [0, 0]
        self._gone_faults: list[int | None] = [0, 0]
        self.processes_max = 0
        self.processes_seen = 1

    def read(self) -> _ProcSample:
        samples = {self._root: self._procs[self._root].read()}
        for pid in descendants(self._root, self._children):
            proc = self._procs.get(pid)
            if proc is None:
                try:
                    proc = self._procs[pid] = self._open(pid)
                except (OSError, psutil.Error):
                    continue  # ended, or not ours to read
                self.processes_seen += 1
            try:
                samples[pid] = proc.read()
            except (_Gone, _Denied):
                continue
        for pid in [p for p in self._procs if p not in samples]:
            self._retire(pid)
        self._last = samples
        self.processes_max = max(self.processes_max, len(samples))
        live = samples.values()
        minflt = [s.minflt for s in live]
        majflt = [s.majflt for s in live]
        return _ProcSample(
            cpu_s=sum(s.cpu_s for s in live) + self._gone_cpu_s,
            rss=sum(s.rss for s in live),
            threads=sum(s.threads for s in live),
            ctx_vol=sum(s.ctx_vol for s in live) + self._gone_ctx[0],
            ctx_invol=sum(s.ctx_invol for s in live) + self._gone_ctx[1],
            minflt=_total(minflt, self._gone_faults[0]),
            majflt=_total(majflt, self._gone_faults[1]),
        )

    def _retire(self, pid: int) -> None:
        self._procs.pop(pid).close()
        last = self._last.get(pid)
        if last is None:
            return
        self._gone_cpu_s += last.cpu_s
        self._gone_ctx[0] += last.ctx_vol
        self._gone_ctx[1] += last.ctx_invol
        self._gone_faults = [
            None if g is None or v is None else g + v
            for g, v in zip(self._gone_faults, (last.minflt, last.majflt), strict=True)
        ]

    def close(self) -> None:
        for proc in self._procs.values():
            proc.close()
        self._procs.clear()


def _total(values: list[int | None], gone: int | None) -> int | None:
    """The sum, or None when any part is unknown (no /proc page-fault counters)."""
    if gone is None or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None) + gone


class ProcessTreeSampler(SystemSampler):
    """:class:`~aaco.collectors.system.SystemSampler` with its ``proc_*`` columns over the
    watched process and all its descendants (module docstring)."""

    name: ClassVar[str] = "process_tree"

    def __init__(self, pid: int, hz: float = 10.0, **kwargs: Any) -> None:
        super().__init__(pid, hz, **kwargs)
        self._tree: _TreeProc | None = None

    def info(self) -> dict[str, Any]:
        tree = self._tree
        return {
            **super().info(),
            "scope": "process_tree",
            "processes_max": tree.processes_max if tree is not None else None,
            "processes_seen": tree.processes_seen if tree is not None else None,
        }

    def _open_process(self) -> _ProcReader:
        self._tree = _TreeProc(self.pid)
        return self._tree
