"""What every GPU telemetry source shares: the sampler thread, the row layout, the throttle
vocabulary, per-call error handling and the cost accounting.

A *source* (NVML, the amdsmi library, the ``amd-smi`` or ``rocm-smi`` command) is opened in
the sampler thread and asked for one row per device on every sample; the collectors in
:mod:`aaco.collectors.gpu` only choose which sources to try and in what order.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import pyarrow as pa

from aaco.collectors.base import Collector, sampling_period_ns, start_sampler, stop_sampler
from aaco.session.schema import GPU_TELEMETRY

__all__ = [
    "COLUMNS",
    "THROTTLE_VOCABULARY",
    "GpuSamplerBase",
    "Probe",
    "ProbeRunner",
    "Source",
    "SourceUnavailable",
    "WatchedPids",
    "names_from_mask",
    "new_row",
]

#: every name ``throttle_names`` may hold, in AACO's vocabulary (docs/metrics.md maps each
#: vendor's reasons onto it)
THROTTLE_VOCABULARY: tuple[str, ...] = (
    "power_cap",
    "sw_thermal",
    "hw_thermal",
    "hw_slowdown",
    "hw_power_brake",
    "sw_power",
    "sync_boost",
    "prochot",
    "other",
)

COLUMNS: tuple[str, ...] = tuple(GPU_TELEMETRY.column_names)
_EMPTY_ROW: dict[str, Any] = dict.fromkeys(COLUMNS)

# A source that fails on this many samples in a row is broken, not flaky: the thread stops
# rather than spin on it for the rest of the run.
_MAX_FAILED_SAMPLES = 50
# psutil lists a process's children by reading every process of the machine; the re-listing
# is spaced so that it costs at most this share of one core (and is done every 2 s at most).
_CHILDREN_CPU_SHARE = 0.002
_CHILDREN_MIN_INTERVAL_NS = 2_000_000_000


def new_row(ts_ns: int, device: int, source: str, name: str | None) -> dict[str, Any]:
    """A row of :data:`~aaco.session.schema.GPU_TELEMETRY` with every measured column null."""
    row = _EMPTY_ROW.copy()
    row["ts_ns"] = ts_ns
    row["device"] = device
    row["source"] = source
    row["name"] = name
    return row


def names_from_mask(mask: int, bits: Sequence[tuple[int, str | None]]) -> list[str]:
    """The vocabulary names of the bits set in ``mask``.

    ``bits`` maps single-bit masks to a name, or to None for a bit that is not throttling
    (idle, a clock setting); a set bit ``bits`` does not list is ``other``. Each name
    appears once, in vocabulary order.
    """
    found: set[str] = set()
    known = 0
    for bit, name in bits:
        known |= bit
        if mask & bit and name is not None:
            found.add(name)
    if mask & ~known:
        found.add("other")
    return [n for n in THROTTLE_VOCABULARY if n in found]


class SourceUnavailable(Exception):
    """This source cannot run here; the message says why, in a few words."""


class Probe:
    """One library call (or a few that stand or fall together) filling columns of a row.

    ``fn`` writes into the row only once every call it makes has succeeded, so a failure
    leaves that probe's columns null. ``fallback`` is switched on when this probe is
    switched off as unsupported (e.g. NVML's older throttle-reason call).
    """

    __slots__ = ("enabled", "fallback", "fn", "name")

    def __init__(
        self,
        name: str,
        fn: Callable[[dict[str, Any]], None],
        *,
        enabled: bool = True,
        fallback: Probe | None = None,
    ) -> None:
        self.name = name
        self.fn = fn
        self.enabled = enabled
        self.fallback = fallback


class ProbeRunner:
    """Runs probes, telling an unsupported call from a failed one.

    ``classify(exc)`` returns a short reason when ``exc`` means the call can never succeed
    on this device (not supported, no permission, missing from the installed binding):
    the probe is then switched off for the rest of the run, since asking again costs a
    call per sample for nothing. Any other exception leaves the probe's columns null on
    that row and is counted under the probe's name (the first message of each is kept).
    """

    def __init__(self, classify: Callable[[BaseException], str | None]) -> None:
        self._classify = classify
        self.errors: Counter[str] = Counter()
        self.error_examples: dict[str, str] = {}
        self.unsupported: dict[str, dict[str, str]] = {}

    def run(self, device: int, probes: Iterable[Probe], row: dict[str, Any]) -> None:
        for probe in probes:
            if not probe.enabled:
                continue
            try:
                probe.fn(row)
            except Exception as exc:  # a vendor library raises its own error classes
                self.failed(device, probe, exc)

    def failed(self, device: int, probe: Probe, exc: BaseException) -> None:
        reason = self._classify(exc)
        if reason is not None:
            self.switch_off(device, probe, reason)
        else:
            self.errors[probe.name] += 1
            self.error_examples.setdefault(probe.name, _describe(exc))

    def switch_off(self, device: int, probe: Probe, reason: str) -> None:
        probe.enabled = False
        self.unsupported.setdefault(str(device), {})[probe.name] = reason
        if probe.fallback is not None:
            probe.fallback.enabled = True

    def info(self) -> dict[str, Any]:
        return {
            "errors": dict(self.errors),
            "error_examples": dict(self.error_examples),
            "unsupported": {d: dict(v) for d, v in self.unsupported.items()},
        }


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class WatchedPids:
    """The watched process and its descendants, as a set of pids.

    Children are listed with psutil, which reads every process of the machine, so the
    list is refreshed now and then rather than on every sample: at most every 2 s, and
    less often when listing is slow, so that it stays under 0.2 % of one core. A child
    started in between is seen at the next refresh. ``pids()`` is None when no process is
    watched.
    """

    def __init__(self, pid: int | None, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        self.pid = pid
        self._clock = clock
        self._pids: frozenset[int] | None = None if pid is None else frozenset({pid})
        self._next_ns = 0
        self._interval_ns = _CHILDREN_MIN_INTERVAL_NS

    def pids(self) -> frozenset[int] | None:
        if self.pid is None:
            return None
        now = self._clock()
        if now >= self._next_ns:
            self._refresh(now)
        return self._pids

    def _refresh(self, now: int) -> None:
        import psutil  # deferred: only a watched run pays for it

        assert self.pid is not None
        c0 = time.thread_time_ns()
        pids = {self.pid}
        # gone or hidden: the pid itself is still the best answer
        with contextlib.suppress(psutil.Error, OSError):
            pids.update(p.pid for p in psutil.Process(self.pid).children(recursive=True))
        cost = time.thread_time_ns() - c0
        self._pids = frozenset(pids)
        self._interval_ns = max(_CHILDREN_MIN_INTERVAL_NS, int(cost / _CHILDREN_CPU_SHARE))
        self._next_ns = now + self._interval_ns


class Source:
    """One way of reading the GPUs. Opening it (the constructor) raises
    :class:`SourceUnavailable` when it cannot work here; :meth:`read` appends one complete
    row per device to ``out``; :meth:`close` releases the library.

    ``min_period_ns`` is the shortest interval between samples the source allows (0 for a
    library; a command's measured run time for the command-line tools).
    """

    #: the table's ``source`` value
    name: ClassVar[str] = ""

    def __init__(self) -> None:
        self.device_names: list[str | None] = []
        self.min_period_ns = 0

    def read(self, out: list[dict[str, Any]], period_ns: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def info(self) -> dict[str, Any]:
        return {}


#: an opener makes a source for the watched processes, or raises SourceUnavailable
Opener = Callable[[WatchedPids], Source]


class GpuSamplerBase(Collector):
    """Samples GPUs at ``hz`` on a background daemon thread, one row per device per sample.

    The thread first opens a source, trying :meth:`openers` in order and keeping the first
    that works; when none does it ends at once, the table is empty and :meth:`info` says
    why (``unavailable``, and ``tried``: each source's reason). Samples are then taken on
    absolute deadlines ``start + k * period`` on ``time.perf_counter_ns`` (CLOCK_MONOTONIC,
    the clock of the iteration timestamps); a sample that overruns skips the deadlines it
    missed rather than catching up in a burst. The period is ``1 / hz``, or longer when
    the source needs it (a command-line tool is run no faster than its own run time
    allows). :meth:`stop` wakes the thread and it takes one last sample, so that the end
    of the measured window is bracketed.

    Cost accounting (:meth:`info`): ``samples`` (sweeps over the devices) and ``rows``,
    ``achieved_hz`` over the scheduled samples, ``sampler_cpu_s`` (``time.thread_time`` of
    the thread, opening included) and ``cpu_share``: the thread's CPU time while sampling
    over the wall time it sampled, as a share of one core (0.01 = 1 %).
    """

    table_name: ClassVar[str] = "gpu_telemetry"

    @classmethod
    def for_process(cls, pid: int, hz: float) -> GpuSamplerBase:
        return cls(pid, hz=hz)

    def __init__(self, pid: int | None = None, hz: float = 10.0) -> None:
        super().__init__()
        period_ns = sampling_period_ns(hz)
        self.pid = pid
        self.hz = float(hz)
        self._period_ns = period_ns
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._rows: list[dict[str, Any]] = []
        self._source: Source | None = None
        self._tried: dict[str, str] = {}
        self._unavailable: str | None = None
        self._stopped_reason: str | None = None
        self._samples = 0
        self._scheduled = 0
        self._first_ns: int | None = None
        self._last_ns: int | None = None
        self._failed_samples = 0
        self._sample_error: str | None = None
        self._cpu_s = 0.0
        self._open_cpu_s = 0.0
        self._open_s = 0.0
        self._loop_cpu_s = 0.0
        self._loop_wall_s = 0.0
        self._source_info: dict[str, Any] = {}
        self._close_error: str | None = None

    # -- what subclasses choose ------------------------------------------------------

    def openers(self) -> list[tuple[str, Opener]]:
        """The sources to try, in order: (label, opener)."""
        raise NotImplementedError

    def unavailable_message(self, tried: dict[str, str]) -> str:
        """The one line :meth:`info` gives when no source opened."""
        return "no GPU telemetry source: " + ", ".join(tried.values())

    # -- read-outs ---------------------------------------------------------------------

    @property
    def source(self) -> str | None:
        """The source that was opened (its table name), None before or when none could be."""
        return None if self._source is None else self._source.name

    @property
    def stopped_reason(self) -> str | None:
        return self._stopped_reason

    @property
    def sample_count(self) -> int:
        return self._samples

    def info(self) -> dict[str, Any]:
        span_s = (
            (self._last_ns - self._first_ns) / 1e9
            if self._first_ns is not None and self._last_ns is not None
            else 0.0
        )
        src = self._source
        out: dict[str, Any] = {
            "source": None if src is None else src.name,
            "devices": 0 if src is None else len(src.device_names),
            "device_names": [] if src is None else list(src.device_names),
            "hz": self.hz,
            "samples": self._samples,
            "rows": len(self._rows),
            "achieved_hz": (self._scheduled - 1) / span_s if span_s > 0 else None,
            "open_s": self._open_s,
            "open_cpu_s": self._open_cpu_s,
            "sampler_cpu_s": self._cpu_s,
            "cpu_share": (self._loop_cpu_s / self._loop_wall_s if self._loop_wall_s > 0 else None),
            "failed_samples": self._failed_samples,
            "unavailable": self._unavailable,
            "tried": dict(self._tried),
            "stopped_reason": self._stopped_reason,
        }
        if self._sample_error is not None:
            out["sample_error"] = self._sample_error
        if self._close_error is not None:
            out["close_error"] = self._close_error
        out.update(self._source_info)
        return out

    # -- Collector hooks ---------------------------------------------------------------

    def _start(self) -> None:
        self._thread = start_sampler(self._run, f"aaco-{self.name}-sampler")

    def _stop(self) -> None:
        # a command-line tool may be half-way through a run of a few seconds
        stuck = stop_sampler(self._thread, self._stop_event, 15.0)
        if stuck and self._stopped_reason is None:
            self._stopped_reason = stuck

    def _table(self) -> pa.Table:
        rows = list(self._rows)  # a stuck thread may still append; rows are whole
        if not rows:
            return GPU_TELEMETRY.empty()
        return GPU_TELEMETRY.from_columns({c: [r[c] for r in rows] for c in COLUMNS})

    # -- the sampling thread -----------------------------------------------------------

    def _open(self, watched: WatchedPids) -> Source | None:
        for label, opener in self.openers():
            if self._stop_event.is_set():
                self._tried[label] = "not tried: stopped first"
                continue
            try:
                return opener(watched)
            except SourceUnavailable as exc:
                self._tried[label] = str(exc)
            except Exception as exc:  # a broken install must not take the run down
                self._tried[label] = f"{label} failed to open ({_describe(exc)})"
        return None

    def _run(self) -> None:
        thread_time = time.thread_time
        perf_ns = time.perf_counter_ns
        cpu0 = thread_time()
        wall0 = perf_ns()
        reason = "stopped"
        source: Source | None = None
        try:
            watched = WatchedPids(self.pid)
            source = self._open(watched)
            if source is not None:
                watched.pids()  # the first listing (and psutil's import) is part of opening
            cpu1 = thread_time()
            wall1 = perf_ns()
            self._open_cpu_s = cpu1 - cpu0
            self._open_s = (wall1 - wall0) / 1e9
            if source is None:
                self._unavailable = self.unavailable_message(self._tried)
                reason = "unavailable"
                return
            self._source = source
            try:
                reason = self._loop(source)
            finally:
                self._loop_cpu_s = thread_time() - cpu1
                self._loop_wall_s = (perf_ns() - wall1) / 1e9
        except Exception as exc:  # telemetry must never take the run down
            reason = f"error: {_describe(exc)}"
        finally:
            if source is not None:
                try:
                    source.close()
                except Exception as exc:
                    self._close_error = _describe(exc)
                try:
                    self._source_info = source.info()
                except Exception as exc:
                    self._source_info = {"info_error": _describe(exc)}
            self._cpu_s = thread_time() - cpu0
            if self._stopped_reason is None:
                self._stopped_reason = reason

    def _loop(self, source: Source) -> str:
        perf_ns = time.perf_counter_ns
        wait = self._stop_event.wait
        rows = self._rows
        deadline = perf_ns()
        final = False
        failing = 0
        while True:
            start = perf_ns()
            if not final:
                self._scheduled += 1
                if self._first_ns is None:
                    self._first_ns = start
                self._last_ns = start
            period = max(self._period_ns, source.min_period_ns)
            try:
                source.read(rows, period)
            except Exception as exc:
                self._failed_samples += 1
                self._sample_error = _describe(exc)
                failing += 1
                if failing >= _MAX_FAILED_SAMPLES:
                    return f"error: {self._sample_error}"
            else:
                self._samples += 1
                failing = 0
            if final:
                return "stopped"
            # the period may have grown during the read (a command's measured run time)
            period = max(self._period_ns, source.min_period_ns)
            deadline += period
            now = perf_ns()
            if now >= deadline:
                deadline += ((now - deadline) // period + 1) * period
            if wait((deadline - now) / 1e9):
                final = True
