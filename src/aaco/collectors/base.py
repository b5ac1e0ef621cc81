"""The small base class every telemetry collector derives from (start, stop, then a table),
and the collector registry.

A collector that watches a workload is built for the worker's pid once the worker has
started (:meth:`Collector.for_process`); the launcher starts it, stops it when the worker
ends, and the pipeline writes its table into the bundle as :attr:`Collector.table_name` and
its :meth:`Collector.info` into ``session.json``. Built-ins and third-party collectors
(entry-point group ``aaco.collectors``) are listed in :data:`COLLECTORS`.
"""

from __future__ import annotations

import importlib.util
import math
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar, TypeVar

import pyarrow as pa

from aaco.errors import UsageError
from aaco.plugins import Registry

_C = TypeVar("_C", bound="Collector")


class Collector:
    """A collector records something while a workload runs and hands back one Arrow table.

    Use it as a context manager (``start`` on enter, ``stop`` on exit, exceptions are not
    swallowed) or call :meth:`start` / :meth:`stop` yourself; :meth:`table` is valid once
    stopped. Subclasses implement ``_start``, ``_stop`` and ``_table``; the state checks
    live here so every collector fails the same way when misused.
    """

    #: short identifier used in logs and in the bundle's collector list
    name: ClassVar[str] = "collector"
    #: importable modules the collector needs; :meth:`available` checks them
    requires: ClassVar[tuple[str, ...]] = ()
    #: the bundle table its rows are written to (a table of :mod:`aaco.session.schema`)
    table_name: ClassVar[str] = ""
    #: the ``session.json`` key its :meth:`info` goes to; None: ``collectors.<name>``
    meta_key: ClassVar[str | None] = None

    @classmethod
    def for_process(cls, pid: int, hz: float) -> Collector:
        """A collector watching process ``pid`` (the worker) at ``hz`` samples per second."""
        raise NotImplementedError(f"collector {cls.name} cannot watch a process")

    def info(self) -> dict[str, Any]:
        """What the collector says about its own run (rate, sample count, cost, why it
        stopped), recorded in ``session.json``; valid once stopped."""
        return {}

    def extra_tables(self) -> dict[str, pa.Table]:
        """Tables beyond :meth:`table` (bundle table name -> table), for a collector whose
        one sampling pass fills several tables (``sched`` fills ``sched_threads`` and
        ``sched_system``); valid once stopped. Most collectors have none."""
        return {}

    def __init__(self) -> None:
        self._started = False
        self._stopped = False

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether this collector can run here, and if not, why (empty string when it can)."""
        for module in cls.requires:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                return False, f"python module {module!r} is not installed"
        return True, ""

    @property
    def running(self) -> bool:
        return self._started and not self._stopped

    def start(self) -> None:
        if self._started:
            raise RuntimeError(f"collector {self.name} was already started")
        self._started = True
        self._start()

    def stop(self) -> None:
        """Stop collecting; calling it again (or before start) does nothing."""
        if not self._started or self._stopped:
            return
        self._stopped = True
        self._stop()

    def table(self) -> pa.Table:
        if not self._stopped:
            raise RuntimeError(f"collector {self.name}: table() is only valid after stop()")
        return self._table()

    def __enter__(self: _C) -> _C:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _start(self) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        raise NotImplementedError

    def _table(self) -> pa.Table:
        raise NotImplementedError


def sampling_period_ns(hz: float) -> int:
    """The period of a ``hz`` sampler in ns (at least 1); a UsageError for anything but a
    positive, finite number of Hz (a bool included)."""
    if isinstance(hz, bool) or not (isinstance(hz, int | float) and math.isfinite(hz) and hz > 0):
        raise UsageError(f"sampling rate must be a positive number of Hz, got {hz!r}")
    return max(1, round(1e9 / float(hz)))


def start_sampler(target: Callable[[], None], name: str) -> threading.Thread:
    """A sampling loop's daemon thread, started (the run never waits on it to exit)."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def stop_sampler(
    thread: threading.Thread | None, stop: threading.Event, timeout_s: float
) -> str | None:
    """Ask the loop to stop and join it for ``timeout_s``: seconds of silence mean it is
    stuck (in the kernel, or in a vendor tool), and the run must not hang on telemetry.
    The reason to record when it did not stop, else None."""
    stop.set()
    if thread is None:
        return None
    thread.join(timeout=timeout_s)
    if thread.is_alive():
        return f"error: sampler thread did not stop within {timeout_s:g} s"
    return None


#: every collector ``aaco run`` can attach (``RunOptions.collectors``): name -> class
COLLECTORS: Registry[Collector] = Registry(
    "collector",
    Collector,
    {
        "system": "aaco.collectors.system:SystemSampler",
        "process_tree": "aaco.collectors.process_tree:ProcessTreeSampler",
        "sched": "aaco.collectors.sched:SchedCollector",
        "gpu": "aaco.collectors.gpu:GpuCollector",
        "nvml": "aaco.collectors.gpu.nvml:NvmlCollector",
        "amdsmi": "aaco.collectors.gpu.amd:AmdSmiCollector",
    },
)
#: the collectors ``aaco run`` attaches when telemetry is on and none are named
DEFAULT_COLLECTORS = ("system", "sched", "gpu")
