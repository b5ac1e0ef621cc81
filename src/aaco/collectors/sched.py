"""Run-queue evidence without root: how long the watched process's threads waited for a CPU,
and what else kept the machine's CPUs busy (tables ``sched_threads`` and ``sched_system``).

The headline source is ``/proc/PID/task/TID/schedstat``: the kernel's per-thread time on a
CPU and time runnable but waiting on a run queue (``sum_exec_runtime`` and
``sched_info.run_delay``), readable by the process's owner without root or tracing. Around
it, the machine: pressure stall information (``/proc/pressure/*``), the run-queue length and
per-CPU busy time (``/proc/stat``), and the CPUs the process may use. A deeper, costly
source is opt-in: :class:`PerfSchedRecorder` runs ``perf sched record`` system-wide and
reads ``perf sched latency`` for the watched threads (root and ``perf`` needed; enable it
with ``SchedCollector(..., perf=True)`` or ``AACO_SCHED_PERF=1``).

Example::

    with SchedCollector(pid, hz=10) as c:
        ...  # the workload runs
    threads, system = c.table(), c.extra_tables()["sched_system"]
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, NamedTuple

import pyarrow as pa

from aaco.collectors.base import Collector, sampling_period_ns, start_sampler, stop_sampler
from aaco.session.schema import SCHED_SYSTEM, SCHED_THREADS

__all__ = [
    "PERF_ENV",
    "PSI_RESOURCES",
    "PerfSchedRecorder",
    "SchedCollector",
    "capabilities",
    "parse_perf_latency",
    "perf_sched_support",
    "run_queue_latency",
    "top_cpu_processes",
    "unavailable_reason",
]

#: set to 1 to add the ``perf sched`` run-queue latency to the ``sched`` collector's info
PERF_ENV = "AACO_SCHED_PERF"
#: the pressure files read from ``/proc/pressure``
PSI_RESOURCES = ("cpu", "memory", "io")

_LINUX = sys.platform.startswith("linux")
_PROC = "/proc"
_TRACEFS = ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")

# /proc/<pid>/stat fields counted from the one after "(comm)": field N of proc(5) is N - 3.
_ST_STATE = 0  # field 3
_ST_UTIME = 11  # field 14, clock ticks
_ST_STIME = 12  # field 15, clock ticks
_ST_THREADS = 17  # field 20
_ST_START = 19  # field 22, clock ticks after boot
_ST_PROCESSOR = 36  # field 39
_GONE_STATES = frozenset({b"Z", b"X", b"x"})

# How many processes top_other_processes lists.
_TOP_PROCESSES = 5


class _Gone(Exception):
    """The watched process no longer exists (or is a zombie)."""


def _pread_all(fd: int, size: int = 4096) -> bytes:
    """The whole content of a /proc file kept open, re-read from offset 0."""
    while True:
        data = os.pread(fd, size, 0)
        if len(data) < size:
            return data
        size *= 4


def _close_all(fds: Iterable[int | None]) -> None:
    for fd in fds:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _open(path: str) -> int | None:
    try:
        return os.open(path, os.O_RDONLY)
    except OSError:
        return None


def _split_stat(raw: bytes) -> tuple[str, list[bytes]]:
    """comm and the fields after it of a /proc/.../stat line (comm may hold spaces and ")")."""
    close = raw.rindex(b")")
    comm = raw[raw.index(b"(") + 1 : close].decode("utf-8", "replace")
    return comm, raw[close + 2 :].split()


# -- what the kernel offers -------------------------------------------------------------


def unavailable_reason(proc_root: str = _PROC) -> str:
    """Why the collector cannot read scheduler statistics here; "" when it can."""
    if not _LINUX:
        return f"needs Linux /proc (this is {sys.platform})"
    try:
        with open(os.path.join(proc_root, "self", "stat"), "rb") as fh:
            fh.read()
    except OSError as exc:
        return f"{proc_root} is not readable ({exc.strerror or exc})"
    return ""


def capabilities(proc_root: str = _PROC) -> dict[str, Any]:
    """What this kernel exposes: per-thread schedstat (CONFIG_SCHED_INFO) and which PSI files
    (CONFIG_PSI, not disabled with ``psi=0``). ``schedstat_nonzero`` is False where the file
    exists but reads ``0 0 0`` (older kernels with schedstats and delay accounting off)."""
    schedstat: bool = False
    nonzero: bool | None = None
    try:
        with open(os.path.join(proc_root, "self", "schedstat"), "rb") as fh:
            values = [int(v) for v in fh.read().split()[:3]]
        schedstat = True
        nonzero = any(values)
    except (OSError, ValueError):
        pass
    psi = [r for r in PSI_RESOURCES if os.access(os.path.join(proc_root, "pressure", r), os.R_OK)]
    return {"schedstat": schedstat, "schedstat_nonzero": nonzero, "psi": psi}


# -- the watched process ----------------------------------------------------------------


class _ThreadRow(NamedTuple):
    tid: int
    comm: str
    run_ns: int | None
    wait_ns: int | None
    timeslices: int | None
    ctx_voluntary: int | None
    ctx_involuntary: int | None
    last_cpu: int | None


class _Thread:
    """The three per-thread files, opened once: an open /proc file keeps referring to that
    thread, so once it exits reads fail even if its tid is reused."""

    __slots__ = ("schedstat", "stat", "status", "tid")

    def __init__(self, task_dir: str, tid: int) -> None:
        self.tid = tid
        self.stat = os.open(f"{task_dir}/{tid}/stat", os.O_RDONLY)
        self.schedstat = _open(f"{task_dir}/{tid}/schedstat")
        self.status = _open(f"{task_dir}/{tid}/status")

    def read(self) -> _ThreadRow:
        """One row; OSError when the thread is gone."""
        comm, f = _split_stat(os.pread(self.stat, 4096, 0))
        if f[_ST_STATE] in _GONE_STATES:
            raise ProcessLookupError(self.tid)
        run = wait = slices = None
        if self.schedstat is not None:
            s = os.pread(self.schedstat, 128, 0).split()
            run, wait, slices = int(s[0]), int(s[1]), int(s[2])
        vol = invol = None
        if self.status is not None:
            data = os.pread(self.status, 8192, 0)
            toks = data[data.rindex(b"\nvoluntary_ctxt_switches:") :].split()
            vol, invol = int(toks[1]), int(toks[3])
        return _ThreadRow(self.tid, comm, run, wait, slices, vol, invol, int(f[_ST_PROCESSOR]))

    def close(self) -> None:
        _close_all((self.stat, self.schedstat, self.status))


class _Proc:
    """The watched process and its threads, through files opened once and re-read with pread.

    The thread set is listed again only when the thread count in ``/proc/PID/stat`` moved or
    a thread's read failed, which finds every thread alive at a sample (a thread that
    replaced an exited one makes the exited one's read fail). Measured on this project's
    2-core VM for a 10-thread process: a sample costs ~170 µs of CPU (~12 µs per thread:
    three preads, the ``status`` file the dearest), a ``listdir`` of the task folder ~7 µs,
    a relist that reopens every thread's files ~100 µs: listing is cheap, reopening is not.
    A thread that starts and exits between two samples is not seen.
    """

    def __init__(self, pid: int, proc_root: str) -> None:
        self.pid = pid
        self._task_dir = f"{proc_root}/{pid}/task"
        self._stat_fd = os.open(f"{proc_root}/{pid}/stat", os.O_RDONLY)
        self._tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
        self.threads: dict[int, _Thread] = {}
        self.seen: dict[int, str] = {}
        self.relists = 0

    def cpu_s(self) -> float:
        """User + system CPU time of the whole process (all threads, exited ones included)."""
        try:
            _, f = _split_stat(os.pread(self._stat_fd, 4096, 0))
        except (ProcessLookupError, ValueError, IndexError) as exc:  # gone, or read empty
            raise _Gone from exc
        if f[_ST_STATE] in _GONE_STATES:
            raise _Gone
        if int(f[_ST_THREADS]) != len(self.threads):
            self._relist()
        return (int(f[_ST_UTIME]) + int(f[_ST_STIME])) * self._tick_s

    def read_threads(self) -> list[_ThreadRow]:
        rows: list[_ThreadRow] = []
        vanished: list[int] = []
        for tid, thread in self.threads.items():
            try:
                rows.append(thread.read())
            except (OSError, ValueError, IndexError):
                vanished.append(tid)
        if vanished:
            for tid in vanished:
                self.threads.pop(tid).close()
            known = set(self.threads)
            self._relist()
            for tid in self.threads.keys() - known:  # a thread that replaced a vanished one
                with contextlib.suppress(OSError, ValueError, IndexError):
                    rows.append(self.threads[tid].read())
        for row in rows:
            self.seen[row.tid] = row.comm
        return rows

    def _relist(self) -> None:
        self.relists += 1
        try:
            tids = {int(t) for t in os.listdir(self._task_dir)}
        except FileNotFoundError as exc:
            raise _Gone from exc
        for tid in [t for t in self.threads if t not in tids]:
            self.threads.pop(tid).close()
        for tid in tids - self.threads.keys():
            with contextlib.suppress(OSError):
                self.threads[tid] = _Thread(self._task_dir, tid)

    def close(self) -> None:
        _close_all([self._stat_fd])
        for thread in self.threads.values():
            thread.close()
        self.threads.clear()


# -- the machine -------------------------------------------------------------------------


class _SystemRow(NamedTuple):
    psi: tuple[int | None, ...]  # (cpu some, cpu full, memory some, ..., io full), µs
    procs_running: int | None
    procs_blocked: int | None
    busy: dict[int, int]  # CPU -> busy ticks (steal not included)
    total: dict[int, int]  # CPU -> all ticks
    steal: dict[int, int]  # CPU -> ticks the hypervisor ran something else


class _System:
    """PSI totals and /proc/stat, through files kept open."""

    def __init__(self, proc_root: str) -> None:
        self._stat_fd = os.open(f"{proc_root}/stat", os.O_RDONLY)
        self._size = 4096
        self._psi_fds = [_open(f"{proc_root}/pressure/{r}") for r in PSI_RESOURCES]

    @property
    def psi_resources(self) -> list[str]:
        return [r for r, fd in zip(PSI_RESOURCES, self._psi_fds, strict=True) if fd is not None]

    def read(self) -> _SystemRow:
        psi: list[int | None] = []
        for fd in self._psi_fds:
            some = full = None
            if fd is not None:
                with contextlib.suppress(OSError, ValueError):
                    for line in os.pread(fd, 512, 0).split(b"\n"):
                        if b"total=" not in line:
                            continue
                        value = int(line.rsplit(b"total=", 1)[1])
                        if line.startswith(b"some"):
                            some = value
                        elif line.startswith(b"full"):
                            full = value
            psi += [some, full]
        data = _pread_all(self._stat_fd, self._size)
        self._size = max(self._size, len(data) + 1)
        busy: dict[int, int] = {}
        total: dict[int, int] = {}
        steal: dict[int, int] = {}
        for line in data.split(b"\n", 1)[1].split(b"\n"):  # the first line sums all CPUs
            if not line.startswith(b"cpu"):
                break
            # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time
            # is already inside user/nice, so only the first eight are summed
            v = line.split()
            u, n, s, idle, io, irq, sirq, st = (int(x) for x in v[1:9])
            cpu = int(v[0][3:])
            tot = u + n + s + idle + io + irq + sirq + st
            # steal is time the vCPU had work and the host ran another guest: not other
            # tasks of this machine, so it is counted apart (steal_pct)
            busy[cpu] = tot - idle - io - st
            total[cpu] = tot
            steal[cpu] = st
        return _SystemRow(
            tuple(psi),
            _stat_field(data, b"procs_running"),
            _stat_field(data, b"procs_blocked"),
            busy,
            total,
            steal,
        )

    def close(self) -> None:
        _close_all([self._stat_fd, *self._psi_fds])


def _stat_field(data: bytes, key: bytes) -> int | None:
    at = data.find(b"\n" + key + b" ")
    if at < 0:
        return None
    return int(data[at + len(key) + 2 : data.index(b"\n", at + 1)])


# -- other processes ---------------------------------------------------------------------


def _scan_cpu(proc_root: str) -> dict[tuple[int, int], tuple[str, int]]:
    """(pid, start time) -> (comm, user + system ticks) of every process now."""
    out: dict[tuple[int, int], tuple[str, int]] = {}
    try:
        names = os.listdir(proc_root)
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{proc_root}/{name}/stat", "rb") as fh:
                comm, f = _split_stat(fh.read())
            out[(int(name), int(f[_ST_START]))] = (comm, int(f[_ST_UTIME]) + int(f[_ST_STIME]))
        except (OSError, ValueError, IndexError):
            continue
    return out


def top_cpu_processes(
    before: dict[tuple[int, int], tuple[str, int]],
    after: dict[tuple[int, int], tuple[str, int]],
    window_s: float,
    exclude: Iterable[int] = (),
    n: int = _TOP_PROCESSES,
) -> list[dict[str, Any]]:
    """The ``n`` processes that used the most CPU between two :func:`_scan_cpu` scans.

    A process started in between counts from 0; one that exited in between is not seen
    (its time went to its parent when reaped, if the parent waited for it).
    """
    tick_s = 1.0 / os.sysconf("SC_CLK_TCK") if _LINUX else 0.01
    skip = set(exclude)
    used: list[tuple[float, int, str]] = []
    for key, (comm, ticks) in after.items():
        if key[0] in skip:
            continue
        delta = ticks - before.get(key, (comm, 0))[1]
        if delta > 0:
            used.append((delta * tick_s, key[0], comm))
    used.sort(reverse=True)
    me = os.getpid()
    return [
        {
            "pid": pid,
            "name": comm,
            "cpu_s": round(cpu, 3),
            "share": round(cpu / window_s, 4) if window_s > 0 else None,
            "is_collector": pid == me,
        }
        for cpu, pid, comm in used[:n]
    ]


# -- perf sched (optional, root) ---------------------------------------------------------


def _perf_paranoid() -> int | None:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid", encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def perf_sched_support() -> tuple[bool, str]:
    """Whether ``perf sched record`` can trace the scheduler here, and if not, why.

    It needs Linux, a ``perf`` binary on PATH, and system-wide tracepoints: root (or
    ``kernel.perf_event_paranoid = -1``) and the ``sched:sched_switch`` / ``sched_wakeup``
    tracepoints under tracefs. Root's perf mounts tracefs itself where it is not mounted.
    """
    if not _LINUX:
        return False, f"needs Linux (this is {sys.platform})"
    if shutil.which("perf") is None:
        return False, "perf is not on PATH"
    root = os.geteuid() == 0
    paranoid = _perf_paranoid()
    if not root and (paranoid is None or paranoid > -1):
        return False, (
            "system-wide scheduler tracepoints need root or kernel.perf_event_paranoid = -1 "
            f"(it is {paranoid})"
        )
    traced = any(
        os.access(os.path.join(d, "events", "sched", "sched_switch"), os.R_OK) for d in _TRACEFS
    )
    if not traced and not root:
        return False, "the sched tracepoints are not readable under tracefs"
    return True, ""


_LATENCY_ROW = re.compile(
    r"^\s*(?P<comm>.*):(?P<tid>\d+)\s*\|\s*(?P<run>[\d.]+) ms\s*\|\s*(?P<switches>\d+)\s*\|"
    r"\s*avg:\s*(?P<avg>[\d.]+) ms\s*\|\s*max:\s*(?P<max>[\d.]+) ms"
)


def parse_perf_latency(text: str) -> list[dict[str, Any]]:
    """The task rows of ``perf sched latency -p`` output (``comm:tid | runtime | switches |
    avg delay | max delay``); ``delay_ms`` is the total, avg x switches, as perf computes
    the average from it."""
    rows = []
    for line in text.splitlines():
        m = _LATENCY_ROW.match(line)
        if m is None:
            continue
        switches = int(m["switches"])
        avg = float(m["avg"])
        rows.append(
            {
                "tid": int(m["tid"]),
                "comm": m["comm"].strip(),
                "runtime_ms": float(m["run"]),
                "switches": switches,
                "avg_delay_ms": avg,
                "max_delay_ms": float(m["max"]),
                "delay_ms": avg * switches,
            }
        )
    return rows


class PerfSchedRecorder:
    """``perf sched record`` of the whole machine between :meth:`start` and :meth:`stop`,
    summarised by ``perf sched latency`` for the given threads.

    The delay ``perf sched latency`` reports is the time from a wakeup, or from a
    preemption that left the task runnable, to the task running again: the same quantity
    as schedstat's wait time, measured from events instead of the kernel's counter, and with
    its distribution (average and maximum per thread). It costs: every context switch and
    wakeup of the machine is written to a file (about 100 bytes each), so it is opt-in and
    bounded by ``max_s``. Recording starts about 0.2 s after :meth:`start` (perf's set-up).
    """

    def __init__(self, max_s: float = 300.0) -> None:
        self.max_s = max_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None
        self._t0 = 0.0
        self._reason = ""

    def start(self) -> None:
        ok, why = perf_sched_support()
        if not ok:
            self._reason = why
            return
        self._dir = tempfile.mkdtemp(prefix="aaco-perf-sched-")
        try:
            self._proc = subprocess.Popen(
                [
                    "perf",
                    "sched",
                    "record",
                    "-o",
                    f"{self._dir}/perf.data",
                    "--",
                    "sleep",
                    str(self.max_s),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,  # a Ctrl-C at the terminal is the run's, not perf's
            )
        except OSError as exc:
            self._reason = f"could not start perf: {exc}"
        self._t0 = time.perf_counter()

    def stop(self, tids: Iterable[int]) -> dict[str, Any]:
        """Stop recording; the run-queue latency of ``tids`` (status ``ok``, ``unavailable``
        or ``failed`` with a ``reason``)."""
        try:
            return self._stop(set(tids))
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
                self._dir = None

    def _stop(self, tids: set[int]) -> dict[str, Any]:
        proc = self._proc
        if proc is None:
            return {
                "status": "unavailable" if self._dir is None else "failed",
                "reason": self._reason,
            }
        wall_s = time.perf_counter() - self._t0
        early = proc.poll() is not None
        if not early:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return {"status": "failed", "reason": "perf sched record did not stop in 15 s"}
        data = f"{self._dir}/perf.data"
        if not os.path.isfile(data) or os.path.getsize(data) == 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()
            return {
                "status": "failed",
                "reason": "perf sched record: " + (tail[-1] if tail else "no data"),
            }
        size = os.path.getsize(data)
        try:
            out = subprocess.run(
                ["perf", "sched", "latency", "-p", "-i", data],
                capture_output=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return {"status": "failed", "reason": f"perf sched latency: {exc}"}
        rows = parse_perf_latency(out.stdout.decode("utf-8", "replace"))
        if not rows:
            tail = out.stderr.decode("utf-8", "replace").strip().splitlines()
            return {
                "status": "failed",
                "reason": "perf sched latency: " + (tail[-1] if tail else "no task rows"),
            }
        mine = [r for r in rows if r["tid"] in tids]
        others = sorted((r for r in rows if r["tid"] not in tids), key=lambda r: -r["runtime_ms"])
        run_ms = sum(r["runtime_ms"] for r in mine)
        delay_ms = sum(r["delay_ms"] for r in mine)
        return {
            "status": "ok",
            "reason": "max_s reached before stop" if early else "",
            "wall_s": round(wall_s, 3),
            "data_bytes": size,
            "runtime_ms": round(run_ms, 3),
            "delay_ms": round(delay_ms, 3),
            "wait_share": delay_ms / (run_ms + delay_ms) if run_ms + delay_ms > 0 else None,
            "max_delay_ms": max((r["max_delay_ms"] for r in mine), default=None),
            "threads": sorted(mine, key=lambda r: -r["delay_ms"]),
            "top_other_tasks": [
                {k: r[k] for k in ("tid", "comm", "runtime_ms", "delay_ms")} for r in others[:5]
            ],
        }


def run_queue_latency(pid: int, duration_s: float, proc_root: str = _PROC) -> dict[str, Any]:
    """``perf sched`` run-queue latency of ``pid``'s threads over the next ``duration_s``
    (blocks that long); ``status`` says whether it worked and ``reason`` why not.

    Example::

        run_queue_latency(1234, 2.0)["wait_share"]   # 0.48 with a CPU hog beside it
    """

    def tids() -> set[int]:
        try:
            return {int(t) for t in os.listdir(f"{proc_root}/{pid}/task")}
        except OSError:
            return set()

    seen = tids()
    rec = PerfSchedRecorder(max_s=duration_s + 30)
    rec.start()
    time.sleep(duration_s)
    return rec.stop(seen | tids())


# -- the collector -----------------------------------------------------------------------


def _env_perf() -> bool:
    return os.environ.get(PERF_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


class SchedCollector(Collector):
    """Samples the scheduler's view of the watched process and of its CPUs at ``hz``.

    :meth:`table` is :data:`~aaco.session.schema.SCHED_THREADS` (one row per sample per
    thread), :meth:`extra_tables` holds :data:`~aaco.session.schema.SCHED_SYSTEM` (one row
    per sample). :func:`aaco.analysis.sched.summarize_sched` turns them into the window's
    run-queue wait share.

    * Threads are found through ``/proc/PID/task``; a thread that exits keeps its last row
      (its counters from then to its exit are not seen).
    * ``affinity_busy_pct`` and ``other_cpu_pct`` are rates since the previous sample; like
      the ``system`` collector's, they are null on the first row and on a row less than half
      a period after the previous one (the sample taken at stop), because /proc/stat moves in
      clock ticks (10 ms).
    * At start and at stop it also scans ``/proc/*/stat`` once to name the processes that
      used the most CPU meanwhile (``info()["top_other_processes"]``), a cost paid twice,
      not per sample.
    * With ``perf=True`` (default: ``AACO_SCHED_PERF=1`` in the environment) it also runs a
      :class:`PerfSchedRecorder`; its result is ``info()["perf_sched"]``.

    Off Linux, or with /proc unreadable, it starts and stops without error and produces
    empty tables; ``info()["unavailable"]`` says why. ``stopped_reason`` is as for the
    ``system`` collector (``stopped``, ``process_exited``, ``process_not_found``,
    ``unavailable``, ``error: ...``).
    """

    name: ClassVar[str] = "sched"
    table_name: ClassVar[str] = SCHED_THREADS.name
    meta_key: ClassVar[str | None] = None

    @classmethod
    def available(cls) -> tuple[bool, str]:
        why = unavailable_reason()
        return not why, why

    @classmethod
    def for_process(cls, pid: int, hz: float) -> SchedCollector:
        return cls(pid, hz=hz)

    def __init__(
        self,
        pid: int,
        hz: float = 10.0,
        *,
        proc_root: str = _PROC,
        perf: bool | None = None,
        perf_max_s: float = 300.0,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        super().__init__()
        period_ns = sampling_period_ns(hz)
        self.pid = pid
        self.hz = float(hz)
        self.proc_root = proc_root
        self._clock = clock
        self._period_ns = period_ns
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._unavailable = ""
        self._stopped_reason: str | None = None
        self._perf = (
            PerfSchedRecorder(perf_max_s) if (_env_perf() if perf is None else perf) else None
        )
        self._perf_result: dict[str, Any] | None = None
        self._threads: dict[str, list[Any]] = {c: [] for c in SCHED_THREADS.column_names}
        self._system: dict[str, list[Any]] = {c: [] for c in SCHED_SYSTEM.column_names}
        self._seen: dict[int, str] = {}
        self._relists = 0
        self._sampler_cpu_s = 0.0
        self._sampler_wall_s = 0.0
        self._caps: dict[str, Any] = {}
        self._scan: dict[tuple[int, int], tuple[str, int]] = {}
        self._scan_t = 0.0
        self._scan_s = 0.0
        self._top: list[dict[str, Any]] | None = None

    # -- read-outs ---------------------------------------------------------------------

    @property
    def sample_count(self) -> int:
        return len(self._system["ts_ns"])

    @property
    def stopped_reason(self) -> str | None:
        return self._stopped_reason

    def info(self) -> dict[str, Any]:
        ts = self._system["ts_ns"]
        span_s = (ts[-1] - ts[0]) / 1e9 if len(ts) > 1 else 0.0
        rows = self._threads["run_ns"]
        nonzero = any(v for v in rows if v) if rows else None
        caps = dict(self._caps)
        if caps and nonzero is not None:
            caps["schedstat_nonzero"] = nonzero
        return {
            "hz": self.hz,
            "samples": self.sample_count,
            "rate_hz": round((len(ts) - 1) / span_s, 3) if span_s > 0 else None,
            "sampler_cpu_s": round(self._sampler_cpu_s, 6),
            "sampler_cpu_share": (
                round(self._sampler_cpu_s / self._sampler_wall_s, 6)
                if self._sampler_wall_s > 0
                else None
            ),
            "threads_seen": len(self._seen),
            "thread_relists": self._relists,
            "stopped_reason": self._stopped_reason,
            "unavailable": self._unavailable or None,
            "capabilities": caps or None,
            "top_other_processes": self._top,
            "process_scan_s": round(self._scan_s, 6),
            "perf_sched": self._perf_result,
        }

    def extra_tables(self) -> dict[str, pa.Table]:
        if not self._stopped:
            raise RuntimeError(f"collector {self.name}: extra_tables() is only valid after stop()")
        return {SCHED_SYSTEM.name: _build(SCHED_SYSTEM.from_columns, self._system)}

    # -- Collector hooks ---------------------------------------------------------------

    def _start(self) -> None:
        self._unavailable = unavailable_reason(self.proc_root)
        if self._unavailable:
            self._stopped_reason = "unavailable"
            if self._perf is not None:
                self._perf_result = {"status": "unavailable", "reason": self._unavailable}
                self._perf = None
            return
        if self._perf is not None:
            self._perf.start()
        self._thread = start_sampler(self._run, f"aaco-sched-sampler-{self.pid}")

    def _stop(self) -> None:
        # a sample is a few preads per thread: 5 s is far beyond any
        stuck = stop_sampler(self._thread, self._stop_event, 5.0)
        if stuck and self._stopped_reason is None:
            self._stopped_reason = stuck
        if self._perf is not None:
            try:
                self._perf_result = self._perf.stop(self._seen)
            except Exception as exc:  # telemetry must never take the run down
                self._perf_result = {"status": "failed", "reason": repr(exc)}

    def _table(self) -> pa.Table:
        return _build(SCHED_THREADS.from_columns, self._threads)

    # -- the sampling thread -----------------------------------------------------------

    def _run(self) -> None:
        cpu0 = time.thread_time()
        wall0 = time.perf_counter()
        reason = "stopped"
        proc: _Proc | None = None
        system: _System | None = None
        try:
            self._caps = capabilities(self.proc_root)
            self._scan_before()
            try:
                proc = _Proc(self.pid, self.proc_root)
            except (FileNotFoundError, ProcessLookupError):
                reason = "process_not_found"
                return
            system = _System(self.proc_root)
            self._caps["psi"] = system.psi_resources  # what actually opened
            reason = self._loop(proc, system)
        except PermissionError:
            reason = "access_denied"
        except Exception as exc:  # telemetry must never take the run down
            reason = f"error: {exc!r}"
        finally:
            if proc is not None:
                self._seen = dict(proc.seen)
                self._relists = proc.relists
                proc.close()
            if system is not None:
                system.close()
            with contextlib.suppress(Exception):
                self._scan_after()
            self._sampler_cpu_s = time.thread_time() - cpu0
            self._sampler_wall_s = time.perf_counter() - wall0
            if self._stopped_reason is None:
                self._stopped_reason = reason

    def _scan_before(self) -> None:
        t = time.perf_counter()
        self._scan = _scan_cpu(self.proc_root)
        self._scan_t = time.perf_counter()
        self._scan_s += self._scan_t - t

    def _scan_after(self) -> None:
        t = time.perf_counter()
        after = _scan_cpu(self.proc_root)
        self._scan_s += time.perf_counter() - t
        self._top = top_cpu_processes(self._scan, after, t - self._scan_t, exclude=[self.pid])
        self._scan = {}

    def _loop(self, proc: _Proc, system: _System) -> str:
        perf_ns = time.perf_counter_ns
        wait = self._stop_event.wait
        period = self._period_ns
        half_period = period // 2
        clock = None if self._clock is time.perf_counter_ns else self._clock
        tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
        th = self._threads
        sy = self._system
        th_cols = [th[c].append for c in SCHED_THREADS.column_names]
        psi_cols = [sy[f"psi_{r}_{k}_us"].append for r in PSI_RESOURCES for k in ("some", "full")]
        pid = self.pid

        prev_mono: int | None = None
        prev_cpu_s = 0.0
        prev: _SystemRow | None = None
        carry_s = 0.0
        deadline = perf_ns()
        final = False
        while True:
            mono = perf_ns()
            ts = mono if clock is None else clock()
            try:
                cpu_s = proc.cpu_s()
                rows = proc.read_threads()
            except _Gone:
                return "process_exited"
            try:
                affinity: list[int] | None = sorted(os.sched_getaffinity(pid))
            except OSError:
                affinity = None
            s = system.read()

            busy_pct: float | None = None
            other_pct: float | None = None
            steal_pct: float | None = None
            if (
                prev is not None
                and prev_mono is not None
                and affinity
                and mono - prev_mono >= half_period
            ):
                cpus = [c for c in affinity if c in s.total and c in prev.total]
                d_busy = sum(s.busy[c] - prev.busy[c] for c in cpus)
                d_total = sum(s.total[c] - prev.total[c] for c in cpus)
                if d_total > 0:
                    busy_pct = min(100.0, max(0.0, 100.0 * d_busy / d_total))
                    d_steal = sum(s.steal[c] - prev.steal[c] for c in cpus)
                    steal_pct = min(100.0, max(0.0, 100.0 * d_steal / d_total))
                    elapsed_s = (mono - prev_mono) / 1e9
                    # Both terms move in whole clock ticks, so over one period their
                    # difference jitters by a tick either way; clamping each row at 0 would
                    # bias the mean upwards (+10 points at 20 Hz on an idle CPU). A negative
                    # remainder is carried into the next row instead: rows stay >= 0 and
                    # their time-weighted mean keeps the true total.
                    other_s = d_busy * tick_s - (cpu_s - prev_cpu_s) + carry_s
                    carry_s = min(0.0, other_s)
                    other_pct = 100.0 * max(0.0, other_s) / elapsed_s

            for r in rows:
                for append, value in zip(th_cols, (ts, pid, *r), strict=True):
                    append(value)
            sy["ts_ns"].append(ts)
            for append, v in zip(psi_cols, s.psi, strict=True):
                append(v)
            sy["procs_running"].append(s.procs_running)
            sy["procs_blocked"].append(s.procs_blocked)
            sy["affinity"].append(affinity)
            sy["affinity_busy_pct"].append(busy_pct)
            sy["other_cpu_pct"].append(other_pct)
            sy["steal_pct"].append(steal_pct)

            prev, prev_mono, prev_cpu_s = s, mono, cpu_s
            if final:
                return "stopped"
            deadline += period
            now = perf_ns()
            if now >= deadline:
                # overran: skip to the next deadline still ahead, keeping the grid's phase
                deadline += ((now - deadline) // period + 1) * period
            if wait((deadline - now) / 1e9):
                final = True


def _build(
    make: Callable[[dict[str, list[Any]]], pa.Table], cols: dict[str, list[Any]]
) -> pa.Table:
    # the row count is that of the shortest column, in case a stuck thread was left behind
    # half-way through appending a row
    n = min(len(v) for v in cols.values())
    return make({k: v[:n] for k, v in cols.items()})
