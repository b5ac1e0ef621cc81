"""Background sampler of the worker process and of the host CPU, filling the system_events table."""

from __future__ import annotations

import contextlib
import glob
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, Protocol

import psutil
import pyarrow as pa

from aaco.collectors.base import Collector, sampling_period_ns, start_sampler, stop_sampler
from aaco.session.schema import SYSTEM_EVENTS

# Reading the frequency is the one per-sample read whose cost grows with the core count
# (one sysfs file per CPU, or all of /proc/cpuinfo); above this share of one core it is
# read on every k-th sample only, and the rows in between carry null, not a repeated value.
_FREQ_CPU_SHARE = 0.0025
_FREQ_COST_EMA = 0.25

# /proc/<pid>/stat fields counted from the one after "(comm)": field N of proc(5) is N - 3.
_ST_STATE = 0  # field 3
_ST_MINFLT = 7  # field 10
_ST_MAJFLT = 9  # field 12
_ST_UTIME = 11  # field 14, clock ticks
_ST_STIME = 12  # field 15, clock ticks
_ST_THREADS = 17  # field 20
_ST_RSS = 21  # field 24, pages
_GONE_STATES = frozenset({b"Z", b"X", b"x"})

_CPU_DIR = "/sys/devices/system/cpu"
_LINUX = sys.platform.startswith("linux")


class _Gone(Exception):
    """The watched process no longer exists (or is a zombie)."""


class _Denied(Exception):
    """The watched process exists but may not be inspected."""


class _ProcSample(NamedTuple):
    cpu_s: float
    rss: int
    threads: int
    ctx_vol: int
    ctx_invol: int
    minflt: int | None
    majflt: int | None


class _ProcReader(Protocol):
    """What the sampling loop reads the watched process through (one process, or a tree:
    :mod:`aaco.collectors.process_tree`); ``read`` raises ``_Gone`` or ``_Denied``."""

    def read(self) -> _ProcSample: ...

    def close(self) -> None: ...


def cpu_governors() -> dict[str, str] | None:
    """The cpufreq scaling governor of each CPU (``{"cpu0": "performance", ...}``).

    None when the kernel exposes no cpufreq interface (common in VMs and containers).
    """
    paths = glob.glob(os.path.join(_CPU_DIR, "cpu[0-9]*", "cpufreq", "scaling_governor"))
    result: dict[str, str] = {}
    for path in sorted(paths, key=_cpu_index):
        try:
            with open(path, encoding="ascii") as fh:
                result[os.path.basename(os.path.dirname(os.path.dirname(path)))] = fh.read().strip()
        except OSError:
            continue
    return result or None


def _cpu_index(path: str) -> int:
    match = re.search(r"/cpu(\d+)/", path)
    return int(match.group(1)) if match else -1


def _pread_all(fd: int, size: int = 4096) -> bytes:
    """The whole content of a /proc or /sys file kept open, re-read from offset 0."""
    while True:
        data = os.pread(fd, size, 0)
        if len(data) < size:
            return data
        size *= 4


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


# -- the worker process ------------------------------------------------------------------


class _LinuxProc:
    """Worker counters from /proc, through files opened once and re-read with pread.

    Keeping the files open avoids a path lookup and an open/close per read (the larger
    part of the cost), and an open /proc/<pid> file keeps referring to that process:
    once it exits reads fail, even if the pid is reused.

    Context switches are summed over all threads: the kernel keeps them per thread and
    /proc/<pid>/status (what psutil reads) shows the main thread's only, which misses an
    ONNX Runtime thread pool entirely. A thread that exits keeps contributing the counts
    last seen for it, so the totals never go down (the switches it made between that
    sample and its exit are missed).
    """

    def __init__(self, pid: int) -> None:
        self._task_dir = f"/proc/{pid}/task"
        self._stat_fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        self._tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._thread_fds: dict[int, int] = {}
        self._last: dict[int, tuple[int, int]] = {}
        self._exited_vol = 0
        self._exited_invol = 0

    def read(self) -> _ProcSample:
        try:
            raw = os.pread(self._stat_fd, 4096, 0)
        except ProcessLookupError as exc:
            raise _Gone from exc
        f = raw[raw.rindex(b")") + 2 :].split()
        if f[_ST_STATE] in _GONE_STATES:
            raise _Gone
        threads = int(f[_ST_THREADS])
        vol, invol = self._ctx_switches(threads)
        return _ProcSample(
            (int(f[_ST_UTIME]) + int(f[_ST_STIME])) * self._tick_s,
            int(f[_ST_RSS]) * self._page,
            threads,
            vol,
            invol,
            int(f[_ST_MINFLT]),
            int(f[_ST_MAJFLT]),
        )

    def _ctx_switches(self, threads: int) -> tuple[int, int]:
        # The thread set only needs listing again when the count moved or a thread vanished.
        if threads != len(self._thread_fds):
            self._relist()
        vol = invol = 0
        vanished = []
        for tid, fd in self._thread_fds.items():
            try:
                data = os.pread(fd, 8192, 0)
            except OSError:
                vanished.append(tid)
                continue
            toks = data[data.rindex(b"\nvoluntary_ctxt_switches:") :].split()
            v, i = int(toks[1]), int(toks[3])
            self._last[tid] = (v, i)
            vol += v
            invol += i
        if vanished:
            for tid in vanished:
                self._drop(tid)
            self._relist()
        # exited threads are summed last, so that one dropped just now still counts
        return vol + self._exited_vol, invol + self._exited_invol

    def _relist(self) -> None:
        try:
            tids = {int(t) for t in os.listdir(self._task_dir)}
        except FileNotFoundError as exc:
            raise _Gone from exc
        for tid in [t for t in self._thread_fds if t not in tids]:
            self._drop(tid)
        for tid in tids - self._thread_fds.keys():
            try:
                self._thread_fds[tid] = os.open(f"{self._task_dir}/{tid}/status", os.O_RDONLY)
            except FileNotFoundError:
                continue

    def _drop(self, tid: int) -> None:
        _close_all([self._thread_fds.pop(tid)])
        v, i = self._last.pop(tid, (0, 0))
        self._exited_vol += v
        self._exited_invol += i

    def close(self) -> None:
        _close_all([self._stat_fd, *self._thread_fds.values()])
        self._thread_fds.clear()


class _PsutilProc:
    """Worker counters through psutil, for platforms without /proc."""

    def __init__(self, pid: int) -> None:
        try:
            self._proc = psutil.Process(pid)
        except psutil.NoSuchProcess as exc:
            raise FileNotFoundError(pid) from exc

    def read(self) -> _ProcSample:
        proc = self._proc
        try:
            with proc.oneshot():
                ct = proc.cpu_times()
                rss = proc.memory_info().rss
                threads = proc.num_threads()
                ctx = proc.num_ctx_switches()
        except psutil.NoSuchProcess as exc:
            raise _Gone from exc
        except psutil.AccessDenied as exc:
            raise _Denied from exc
        return _ProcSample(
            ct.user + ct.system, rss, threads, ctx.voluntary, ctx.involuntary, None, None
        )

    def close(self) -> None:
        pass


# -- the host ----------------------------------------------------------------------------


class _LinuxHost:
    """Per-CPU busy/total ticks from /proc/stat and the load average, via kept-open files."""

    def __init__(self) -> None:
        self._stat_fd = os.open("/proc/stat", os.O_RDONLY)
        self._load_fd = os.open("/proc/loadavg", os.O_RDONLY)
        self._size = 4096

    def cpus(self) -> tuple[list[int], list[int]]:
        data = _pread_all(self._stat_fd, self._size)
        self._size = max(self._size, len(data) + 1)
        busy: list[int] = []
        total: list[int] = []
        for line in data.split(b"\n")[1:]:  # the first line is the all-CPU sum
            if not line.startswith(b"cpu"):
                break
            # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time
            # is already inside user/nice, so only the first eight are summed
            v = line.split()
            u, n, s, idle, io, irq, sirq, st = (int(x) for x in v[1:9])
            tot = u + n + s + idle + io + irq + sirq + st
            busy.append(tot - idle - io)
            total.append(tot)
        return busy, total

    def load_1m(self) -> float | None:
        return float(os.pread(self._load_fd, 128, 0).split(None, 1)[0])

    def close(self) -> None:
        _close_all([self._stat_fd, self._load_fd])


class _PsutilHost:
    """Per-CPU busy/total seconds through psutil, for platforms without /proc."""

    def __init__(self) -> None:
        names = psutil.cpu_times()._fields
        self._idle = tuple(names.index(f) for f in ("idle", "iowait") if f in names)
        self._guest = tuple(names.index(f) for f in ("guest", "guest_nice") if f in names)

    def cpus(self) -> tuple[list[float], list[float]]:
        busy: list[float] = []
        total: list[float] = []
        for t in psutil.cpu_times(percpu=True):
            tot = sum(t) - sum(t[i] for i in self._guest)
            busy.append(tot - sum(t[i] for i in self._idle))
            total.append(tot)
        return busy, total

    def load_1m(self) -> float | None:
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else None

    def close(self) -> None:
        pass


class _Freq:
    """Mean current CPU frequency in MHz, read as cheaply as this host allows."""

    def __init__(self) -> None:
        self._fds: list[int] = []
        self._cpuinfo_fd: int | None = None
        if not _LINUX:
            return
        paths = glob.glob(os.path.join(_CPU_DIR, "cpu[0-9]*", "cpufreq", "scaling_cur_freq"))
        for path in sorted(paths, key=_cpu_index):
            try:
                self._fds.append(os.open(path, os.O_RDONLY))
            except OSError:
                continue
        if not self._fds:
            try:
                self._cpuinfo_fd = os.open("/proc/cpuinfo", os.O_RDONLY)
            except OSError:
                self._cpuinfo_fd = None

    def read(self) -> float | None:
        if self._fds:
            values = []
            for fd in self._fds:
                try:
                    values.append(int(os.pread(fd, 32, 0)))
                except (OSError, ValueError):
                    continue
            return sum(values) / len(values) / 1000.0 if values else None  # kHz
        if self._cpuinfo_fd is not None:
            found = re.findall(rb"^cpu MHz\s*:\s*([0-9.]+)", _pread_all(self._cpuinfo_fd), re.M)
            mhz = [float(m) for m in found if float(m) > 0]
            return sum(mhz) / len(mhz) if mhz else None
        if _LINUX:
            return None
        try:
            freq = psutil.cpu_freq()
        except Exception:  # psutil raises assorted errors on exotic platforms
            return None
        return float(freq.current) if freq is not None and freq.current > 0 else None

    def close(self) -> None:
        _close_all(self._fds)
        if self._cpuinfo_fd is not None:
            _close_all([self._cpuinfo_fd])


# -- the collector -----------------------------------------------------------------------


class SystemSampler(Collector):
    """Samples the worker process and the host at ``hz`` on a background daemon thread.

    Each row of :data:`~aaco.session.schema.SYSTEM_EVENTS` is one sample:

    * ``proc_cpu_pct``: user + system CPU time of the worker process, all its threads
      together, over the monotonic time elapsed since the previous sample; 100 = one
      core. Children of the worker are *not* included: ONNX Runtime runs in-process,
      and children's times only reach the parent when a child is reaped, which would
      show as spikes at unrelated moments. The kernel counts CPU time in clock ticks
      (usually 10 ms), so one 100 ms interval is accurate to about ±10 points; the
      error does not accumulate, so averages over many samples are accurate.
    * RSS and thread count of the worker; voluntary / involuntary context switches
      summed over all its threads; minor / major page faults of the whole process. All
      counters are cumulative since the worker started. Page faults (from
      ``/proc/<pid>/stat``) are null where /proc does not exist.
    * ``sys_cpu_pct`` / ``sys_cpu_pct_per_core``: busy share of all CPUs / of each CPU
      from the kernel's per-CPU time counters (``/proc/stat``, the source of
      ``psutil.cpu_times(percpu=True)``) differenced between samples; busy = total -
      idle - iowait, guest time not counted twice. Not ``psutil.cpu_percent()``, whose
      hidden module state would be shared with any other caller.
    * ``load_1m``, and ``cpu_freq_mhz`` (mean over CPUs of the current frequency; null
      when not readable). Where reading the frequency is expensive (many CPUs) it is
      read on every k-th sample only, so that it costs under 0.25 % of a core, and the
      other rows carry null.

    Rate columns (``proc_cpu_pct``, ``sys_cpu_pct``, ``sys_cpu_pct_per_core``) are null,
    never 0, in the first row (nothing to difference against) and in a row taken less
    than half a period after the previous one (in practice only the sample taken at
    stop), because counters that move in whole clock ticks cannot give a rate over a few
    milliseconds. A per-core entry is null when that CPU's counters did not move at all.

    Cost: on Linux the /proc files are opened once and re-read with ``pread``; a sample
    is a few reads plus one per worker thread (context switches) and one per CPU where
    the frequency comes from sysfs. ``overhead_cpu_s`` reports what the thread used.

    Samples are scheduled on absolute deadlines ``start + k / hz`` so the rate does not
    drift; when a sample overruns, missed deadlines are skipped rather than caught up in
    a burst. :meth:`stop` wakes the thread at once (an :class:`threading.Event`) and it
    takes one last sample. If the worker exits, sampling ends on its own and what was
    collected is kept.

    ``stopped_reason`` is None until sampling ends, then one of ``"stopped"`` (stop was
    called), ``"process_exited"`` (the worker exited or became a zombie),
    ``"process_not_found"`` (no such pid at start), ``"access_denied"`` or
    ``"error: ..."`` (an unexpected failure; the thread never raises into the run).

    ``clock`` stamps the rows (``ts_ns``); scheduling and the CPU-rate denominators use
    ``time.perf_counter_ns`` so that an injected clock cannot disturb them.
    """

    name: ClassVar[str] = "system"
    requires: ClassVar[tuple[str, ...]] = ("psutil",)
    table_name: ClassVar[str] = "system_events"
    meta_key: ClassVar[str | None] = "telemetry"

    @classmethod
    def for_process(cls, pid: int, hz: float) -> SystemSampler:
        return cls(pid, hz=hz)

    def info(self) -> dict[str, Any]:
        return {
            "hz": self.hz,
            "samples": self.sample_count,
            "sampler_cpu_s": self.overhead_cpu_s,
            "stopped_reason": self.stopped_reason,
        }

    def __init__(
        self,
        pid: int,
        hz: float = 10.0,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        super().__init__()
        period_ns = sampling_period_ns(hz)
        self.pid = pid
        self.hz = float(hz)
        self._clock = clock
        self._period_ns = period_ns
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped_reason: str | None = None
        self._overhead_cpu_s = 0.0
        self._lateness_ns: list[int] = []
        self._cols: dict[str, list[object]] = {c: [] for c in SYSTEM_EVENTS.column_names}

    # -- read-outs ---------------------------------------------------------------------

    @property
    def sample_count(self) -> int:
        return len(self._cols["ts_ns"])

    @property
    def stopped_reason(self) -> str | None:
        return self._stopped_reason

    @property
    def overhead_cpu_s(self) -> float:
        """CPU seconds the sampling thread itself used (``time.thread_time`` in the thread).

        Set when the thread ends (0.0 while it runs): reading the thread's CPU clock is a
        system call, not worth paying on every sample.
        """
        return self._overhead_cpu_s

    @property
    def lateness_ns(self) -> list[int]:
        """For each scheduled sample, how long after its deadline it was taken (ns, >= 0).

        The final sample taken at stop is not scheduled and is not listed.
        """
        return list(self._lateness_ns)

    # -- Collector hooks ---------------------------------------------------------------

    def _start(self) -> None:
        self._thread = start_sampler(self._run, f"aaco-system-sampler-{self.pid}")

    def _stop(self) -> None:
        # a sample is a handful of /proc reads: 5 s is far beyond any
        stuck = stop_sampler(self._thread, self._stop_event, 5.0)
        if stuck and self._stopped_reason is None:
            self._stopped_reason = stuck

    def _table(self) -> pa.Table:
        # The row count is that of the shortest column, in case a stuck thread was
        # left behind half-way through appending a row.
        n = min(len(v) for v in self._cols.values())
        return SYSTEM_EVENTS.from_columns({k: v[:n] for k, v in self._cols.items()})

    # -- the sampling thread -----------------------------------------------------------

    def _run(self) -> None:
        cpu0 = time.thread_time()
        reason = "stopped"
        closers: list[Callable[[], None]] = []
        try:
            try:
                proc = self._open_process()
            except (FileNotFoundError, ProcessLookupError):
                reason = "process_not_found"
                return
            closers.append(proc.close)
            host: _LinuxHost | _PsutilHost = _LinuxHost() if _LINUX else _PsutilHost()
            closers.append(host.close)
            freq = _Freq()
            closers.append(freq.close)
            reason = self._loop(proc, host, freq)
        except PermissionError:
            reason = "access_denied"
        except Exception as exc:  # telemetry must never take the run down
            reason = f"error: {exc!r}"
        finally:
            for close in closers:
                close()
            self._overhead_cpu_s = time.thread_time() - cpu0
            if self._stopped_reason is None:
                self._stopped_reason = reason

    def _open_process(self) -> _ProcReader:
        """The reader of the watched process (FileNotFoundError when there is none)."""
        return _LinuxProc(self.pid) if _LINUX else _PsutilProc(self.pid)

    def _loop(
        self,
        proc: _ProcReader,
        host: _LinuxHost | _PsutilHost,
        freq: _Freq,
    ) -> str:
        perf_ns = time.perf_counter_ns
        thread_time = time.thread_time
        wait = self._stop_event.wait
        period = self._period_ns
        half_period = period // 2
        clock = None if self._clock is time.perf_counter_ns else self._clock
        cols = self._cols
        app_ts = cols["ts_ns"].append
        app_pcpu = cols["proc_cpu_pct"].append
        app_rss = cols["proc_rss_bytes"].append
        app_thr = cols["proc_threads"].append
        app_cv = cols["proc_ctx_voluntary"].append
        app_ci = cols["proc_ctx_involuntary"].append
        app_minf = cols["proc_minor_faults"].append
        app_majf = cols["proc_major_faults"].append
        app_scpu = cols["sys_cpu_pct"].append
        app_core = cols["sys_cpu_pct_per_core"].append
        app_load = cols["load_1m"].append
        app_freq = cols["cpu_freq_mhz"].append
        late = self._lateness_ns.append

        freq_stride = 1
        freq_cost_s: float | None = None
        prev_mono: int | None = None
        prev_cpu_s = 0.0
        prev_busy: list[int] | list[float] = []
        prev_total: list[int] | list[float] = []
        index = 0
        deadline = perf_ns()
        final = False

        while True:
            mono = perf_ns()
            if not final:
                late(max(0, mono - deadline))
            ts = mono if clock is None else clock()
            try:
                p = proc.read()
            except _Gone:
                return "process_exited"
            except _Denied:
                return "access_denied"
            busy, total = host.cpus()
            load = host.load_1m()

            mhz: float | None = None
            if index % freq_stride == 0:
                # Timing the read costs two syscalls itself, so it is timed on the first
                # samples and then now and then; the very first read pays for cold caches
                # and is not representative.
                if index < 8 or index % 64 == 0:
                    c0 = thread_time()
                    mhz = freq.read()
                    cost = thread_time() - c0
                    if index > 0:
                        freq_cost_s = (
                            cost
                            if freq_cost_s is None
                            else freq_cost_s + _FREQ_COST_EMA * (cost - freq_cost_s)
                        )
                        freq_stride = max(1, math.ceil(freq_cost_s * self.hz / _FREQ_CPU_SHARE))
                else:
                    mhz = freq.read()

            # Rates need an interval of at least half a period: CPU counters move in whole
            # clock ticks, so the few milliseconds between the last scheduled sample and
            # the one taken at stop would give 0 % or several hundred % at random.
            pcpu: float | None = None
            scpu: float | None = None
            per_core: list[float | None] | None = None
            if prev_mono is not None and mono - prev_mono >= half_period:
                pcpu = max(0.0, (p.cpu_s - prev_cpu_s) * 1e11 / (mono - prev_mono))
                if len(prev_total) == len(total):
                    per_core = []
                    sum_busy = 0.0
                    sum_total = 0.0
                    for b, t, pb, pt in zip(busy, total, prev_busy, prev_total, strict=True):
                        dt = t - pt
                        db = b - pb
                        sum_busy += db
                        sum_total += dt
                        per_core.append(min(100.0, max(0.0, 100.0 * db / dt)) if dt > 0 else None)
                    if sum_total > 0:
                        scpu = min(100.0, max(0.0, 100.0 * sum_busy / sum_total))

            app_ts(ts)
            app_pcpu(pcpu)
            app_rss(p.rss)
            app_thr(p.threads)
            app_cv(p.ctx_vol)
            app_ci(p.ctx_invol)
            app_minf(p.minflt)
            app_majf(p.majflt)
            app_scpu(scpu)
            app_core(per_core)
            app_load(load)
            app_freq(mhz)

            prev_mono = mono
            prev_cpu_s = p.cpu_s
            prev_busy = busy
            prev_total = total
            index += 1

            if final:
                return "stopped"
            deadline += period
            now = perf_ns()
            if now >= deadline:
                # overran: skip to the next deadline still ahead, keeping the grid's phase
                deadline += ((now - deadline) // period + 1) * period
            if wait((deadline - now) / 1e9):
                final = True
