"""``aaco profile -- CMD``: run any command, time it, trace it, and make a session bundle of it.

The command runs ``repeat`` times, each run a fresh process, its wall time measured from
just before the process is started to its exit (as ``time`` does). An *iteration* of a
profile bundle is one whole run of the command: the runs are the rows of
``metrics/inference_iters.parquet``, so the latency statistics of every other bundle (median,
CoV, spread, trend) are the runs' wall times here, and ``aaco diff``, ``aaco ls``,
``aaco report`` and the exports read the bundle like any other (``kind: "profile"``).

**Only the first run is traced.** A tracer costs time of its own (rocprofv3 and nsys take
seconds to start and to write their files, the PyTorch profiler slows every operator), and
that cost has nothing to do with the program, so a traced run is not timed with the others:
with ``repeat`` > 1 and a tracer, run 1 is traced and recorded as the ``warmup`` phase (it
also warms the page cache), and runs 2..N run untraced and are the ``measured`` ones. With a
single run, that run is both: it is traced and measured, and the report says its wall time
includes the tracer's overhead. One traced run also means one trace: the kernel tables hold
one execution of the program, not N of them added together.

The tracer (:data:`aaco.tracers.base.TRACERS`, ``--tracer``) is ``auto`` by default:
rocprofv3 when it is on PATH, else nsys when it is on PATH (and registered), else ``torch``
when the command is a Python interpreter that can import torch, else none
(:func:`choose_tracer`); ``session.json`` ``profile.tracer`` records which ran and why.
Telemetry collectors watch each run's process (:data:`DEFAULT_COLLECTORS`: ``process_tree``,
the system sampler over the command's whole process tree, ``sched`` and ``gpu``).

A command that fails (exits non-zero, is killed by a signal, is not found, times out or is
interrupted) makes a *failed* bundle, never an exception: the remaining runs are skipped,
``error`` says what happened, ``profile.exit_status`` is the status ``aaco profile`` exits
with (the command's own; 128 + N for signal N, 127 not found, 126 not executable, 124 a
timeout), and the tail of its output is kept in ``runtime/command_output/``. Ctrl-C (SIGINT),
SIGTERM and SIGHUP are forwarded to the command's process group, once (a second one kills it),
and the bundle is published as failed.

Example::

    from aaco.runners.profile import ProfileOptions, profile_command
    session = profile_command(ProfileOptions(command=["python", "train.py"], repeat=3))
    session.meta["profile"]["exit_status"], session.summary["latency_ms"]["p50"]
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

import pyarrow as pa

from aaco import __version__
from aaco.analysis.gpu import summarize_gpu
from aaco.analysis.sched import summarize_sched
from aaco.analysis.stats import summarize_iterations
from aaco.analysis.telemetry import summarize_system
from aaco.collectors.base import COLLECTORS, Collector, sampling_period_ns
from aaco.collectors.environment import capture_environment
from aaco.diagnose import diagnose_bundle
from aaco.errors import UsageError
from aaco.ingest import ingest_traces
from aaco.report.publish import write_reports
from aaco.runners.launch import kill_process_group, worker_peak_rss
from aaco.runners.profile_analysis import build_analysis
from aaco.runners.rss import own_peak_rss_bytes, self_max_rss_bytes
from aaco.session.bundle import (
    FORMAT_VERSION,
    STATUS_COMPLETED,
    STATUS_FAILED,
    STATUS_RUNNING,
    STATUS_TIMEOUT,
    BundleWriter,
    Session,
    read_json,
    table_handoff,
    utc_now_iso,
)
from aaco.session.paths import (
    ANALYSIS_FILE,
    COMMAND_OUTPUT_DIR,
    ENV_FILE,
    INFERENCE_SUMMARY_FILE,
    SESSION_FILE,
)
from aaco.session.records import add_failure, save_session
from aaco.session.salvage import salvage
from aaco.session.schema import (
    GPU_TELEMETRY,
    INFERENCE_ITERS,
    SCHED_SYSTEM,
    SCHED_THREADS,
    SYSTEM_EVENTS,
)
from aaco.tracers.base import ANY_PROVIDER, TRACERS, Tracer
from aaco.tracers.rocprofv3 import Rocprofv3Tracer
from aaco.tracers.torch import ERROR_SUFFIX

__all__ = [
    "DEFAULT_COLLECTORS",
    "KIND",
    "ProfileOptions",
    "TracerChoice",
    "choose_tracer",
    "exit_status",
    "profile_command",
    "tracer_names",
]

#: ``session.json`` ``kind`` of a profile bundle
KIND = "profile"
#: the collectors attached when none are named: the system sampler over the whole tree
DEFAULT_COLLECTORS = ("process_tree", "sched", "gpu")
#: ``--tracer`` values beside the registered tracers
AUTO, NONE = "auto", "none"
#: bytes of each stream's end kept per run in ``runtime/command_output/``
TAIL_BYTES = 32 * 1024
#: exit statuses of a command that could not run, as a shell gives them
NOT_FOUND, NOT_EXECUTABLE, TIMED_OUT = 127, 126, 124
#: model.name holds the command line clipped to this many characters (profile.command: whole)
_NAME_CHARS = 120
#: how long the output relays may drain after the command exited (a daemon it started may
#: hold the pipes open for ever)
_DRAIN_S = 5.0
#: the longest --timeout (30 days): longer would overflow the timer
MAX_TIMEOUT_S = 30 * 86400.0
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_TORCH_PROBE = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 1)"


@dataclass
class ProfileOptions:
    """The options of ``aaco profile``; ``command`` is the argv run verbatim."""

    command: Sequence[str]
    #: ``auto``, ``none`` or a registered tracer (``rocprofv3``, ``torch``, ``nsys``)
    tracer: str = AUTO
    repeat: int = 1
    #: hardware counters for rocprofv3 (``--pmc``), for the kernel roofline
    counters: tuple[str, ...] = ()
    #: collector names (:data:`aaco.collectors.base.COLLECTORS`); None: DEFAULT_COLLECTORS
    collectors: tuple[str, ...] | None = None
    telemetry: bool = True
    sample_hz: float = 10.0
    #: per run; None: no limit
    timeout_s: float | None = None
    output: Path = Path("sessions")
    tag: str | None = None
    #: the aaco command line recorded in ``session.json`` (None: ``sys.argv``)
    argv: Sequence[str] | None = None
    #: pass the command's stdout/stderr through to this process's (False: keep the tails only)
    echo: bool = True
    auto_calibrate: bool | None = None


@dataclass(frozen=True)
class TracerChoice:
    """The tracer that wraps the traced run, and why it was chosen (``name`` ``none``: no
    tracer)."""

    name: str
    requested: str
    reason: str
    tracer: Tracer | None = None


def tracer_names() -> list[str]:
    """Every ``--tracer`` value: ``auto``, ``none`` and the registered tracers."""
    return [AUTO, NONE, *TRACERS.names()]


def exit_status(session: Session) -> int:
    """The status ``aaco profile`` exits with for ``session``: the command's own (0 when
    every run succeeded); 1 when the bundle does not say (an internal error of AACO)."""
    value = (session.meta.get("profile") or {}).get("exit_status")
    return value if isinstance(value, int) else 1


# -- choosing a tracer --------------------------------------------------------------------------


def resolve_command(command: Sequence[str]) -> tuple[str | None, int | None, str | None]:
    """``(executable path, exit status, why)``: the status and why are set when the command
    cannot run (127 not found, 126 not executable), as a shell would say."""
    exe = command[0]
    named = os.sep in exe or bool(os.altsep and os.altsep in exe)
    path = (exe if os.path.exists(exe) else None) if named else shutil.which(exe)
    if path is None:
        return None, NOT_FOUND, f"command not found: {exe}"
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        return path, NOT_EXECUTABLE, f"permission denied (not an executable file): {exe}"
    return path, None, None


def _python_with_torch(command: Sequence[str], executable: str | None) -> bool:
    """Whether the command's program is a Python interpreter (``python*``) that can import
    torch (a probe of that interpreter, which imports nothing)."""
    if executable is None or not fnmatch.fnmatch(os.path.basename(command[0]), "python*"):
        return False
    try:
        probe = subprocess.run(
            [executable, "-c", _TORCH_PROBE],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _prepared(name: str) -> Tracer:
    tracer = TRACERS.get(name)()
    tracer.prepare(ANY_PROVIDER)
    return tracer


def choose_tracer(
    command: Sequence[str], requested: str, executable: str | None = None
) -> TracerChoice:
    """The tracer for ``--tracer requested``, prepared (a UsageError when a named one cannot
    run here, or the name is unknown). ``auto``: rocprofv3 on PATH, else nsys on PATH, else
    torch for a Python interpreter that has it, else none; the reason says which and why."""
    if requested == NONE:
        return TracerChoice(NONE, requested, "--tracer none")
    if requested != AUTO:
        if requested not in TRACERS:
            raise UsageError(f"unknown --tracer {requested!r}; valid: {', '.join(tracer_names())}")
        return TracerChoice(requested, requested, f"--tracer {requested}", _prepared(requested))
    passed: list[str] = []
    for tool in ("rocprofv3", "nsys"):
        where = shutil.which(tool)
        if where is None:
            continue
        if tool not in TRACERS:
            passed.append(f"{tool} is on PATH but no {tool} tracer is registered")
            continue
        try:
            tracer = _prepared(tool)
        except UsageError as exc:
            passed.append(f"{tool} cannot trace here ({exc})")
            continue
        why = "; ".join([*passed, f"{tool} is on PATH ({where})"])
        return TracerChoice(tool, requested, f"--tracer auto: {why}", tracer)
    if not passed:
        passed.append("no rocprofv3 or nsys on PATH")
    if _python_with_torch(command, executable):
        why = "; ".join([*passed, f"{command[0]} is a Python interpreter that can import torch"])
        return TracerChoice("torch", requested, f"--tracer auto: {why}", _prepared("torch"))
    why = "; ".join([*passed, "the command is not a Python interpreter that can import torch"])
    return TracerChoice(NONE, requested, f"--tracer auto: {why}")


# -- one run ------------------------------------------------------------------------------------


class _Relay:
    """Copies one of the command's output pipes to this process's ``dest`` fd (None: nowhere)
    on a daemon thread, byte for byte, keeping the last ``keep`` bytes."""

    def __init__(self, source: IO[bytes], dest: int | None, keep: int, name: str) -> None:
        self._source = source
        self._dest = dest
        self._keep = keep
        self._tail = bytearray()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fd = self._source.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            if self._dest is not None:
                try:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(self._dest, view) :]
                except OSError:  # our own stdout went away: keep draining the command's
                    self._dest = None
            self._tail += chunk
            if len(self._tail) > 2 * self._keep:
                del self._tail[: -self._keep]

    def finish(self, timeout_s: float) -> bytes:
        """Wait up to ``timeout_s`` for the pipe's end; the tail so far."""
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._source.close()
        return bytes(self._tail[-self._keep :])


class _Forwarder:
    """The signal handler while a run is under way: the first SIGINT/SIGTERM/SIGHUP goes to
    the command's process group as it is, any later one as SIGKILL."""

    def __init__(self) -> None:
        self.pgid: int | None = None
        self.received: list[int] = []

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        self._send(signum if len(self.received) == 1 else signal.SIGKILL)

    def attach(self, pgid: int) -> None:
        """The command started: forward what arrived before it did."""
        self.pgid = pgid
        if self.received:
            self._send(self.received[0] if len(self.received) == 1 else signal.SIGKILL)

    def _send(self, sig: int) -> None:
        if self.pgid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)


@dataclass
class _RunResult:
    """One run as the bundle records it (``profile.runs[]``)."""

    run: int
    traced: bool
    phase: str
    start_ns: int
    end_ns: int
    status: str
    exit_status: int
    returncode: int | None
    error: str | None = None
    signal: str | None = None
    interrupted_by: str | None = None
    pid: int | None = None
    cpu_user_s: float | None = None
    cpu_system_s: float | None = None
    max_rss_bytes: int | None = None
    max_rss_source: str | None = None
    stdout_tail: str | None = None
    stderr_tail: str | None = None
    telemetry: dict[str, pa.Table] = field(default_factory=dict, repr=False)
    telemetry_info: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    extra_tables: dict[str, pa.Table] = field(default_factory=dict, repr=False)
    failures: list[dict[str, str]] = field(default_factory=list, repr=False)

    @property
    def wall_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "traced": self.traced,
            "phase": self.phase,
            "pid": self.pid,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "wall_s": self.wall_s,
            "status": self.status,
            "exit_status": self.exit_status,
            "returncode": self.returncode,
            "signal": self.signal,
            "interrupted_by": self.interrupted_by,
            "error": self.error,
            "cpu_user_s": self.cpu_user_s,
            "cpu_system_s": self.cpu_system_s,
            "max_rss_bytes": self.max_rss_bytes,
            "max_rss_source": self.max_rss_source,
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
        }


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _last_lines(tail: bytes, n: int = 3) -> str:
    lines = [ln.strip() for ln in tail.decode(errors="replace").splitlines() if ln.strip()]
    return " | ".join(lines[-n:])[:400]


def _wait(proc: subprocess.Popen[bytes]) -> dict[str, float] | None:
    """Wait for the command (signals keep being handled meanwhile); its ``wait4`` usage: CPU
    time of it and of every descendant it waited for, and ``ru_maxrss`` (bytes)."""
    if not hasattr(os, "wait4"):
        proc.wait()
        return None
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    scale = 1 if sys.platform == "darwin" else 1024
    return {
        "cpu_user_s": ru.ru_utime,
        "cpu_system_s": ru.ru_stime,
        "wait4_max_rss_bytes": float(ru.ru_maxrss * scale),
    }


class _Runner:
    """Runs the command once per :meth:`run` call, with the collectors watching it."""

    def __init__(
        self,
        opts: ProfileOptions,
        collectors: dict[str, type[Collector]],
        output_dir: Path,
    ) -> None:
        self.opts = opts
        self.collectors = collectors
        self.output_dir = output_dir
        self.forwarder = _Forwarder()

    def run(
        self,
        index: int,
        phase: str,
        traced: bool,
        prefix: Sequence[str] = (),
        env: dict[str, str] | None = None,
    ) -> _RunResult:
        """Run the command once (under ``prefix``, with ``env`` added to its environment)."""
        if self.forwarder.received:  # interrupted between two runs: start no more
            now = time.perf_counter_ns()
            first = self.forwarder.received[0]
            return _RunResult(
                run=index,
                traced=False,
                phase=phase,
                start_ns=now,
                end_ns=now,
                status=STATUS_FAILED,
                exit_status=128 + first,
                returncode=None,
                error=f"interrupted by {_signal_name(first)} before this run started",
                interrupted_by=_signal_name(first),
            )
        argv = [*prefix, *self.opts.command]
        full_env = {**os.environ, **env} if env else None
        sys.stdout.flush()
        sys.stderr.flush()
        parent_rss = own_peak_rss_bytes() or self_max_rss_bytes()
        start = time.perf_counter_ns()
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=full_env,
            )
        except OSError as exc:
            end = time.perf_counter_ns()
            code = NOT_FOUND if isinstance(exc, FileNotFoundError) else NOT_EXECUTABLE
            return _RunResult(
                run=index,
                traced=traced,
                phase=phase,
                start_ns=start,
                end_ns=end,
                status=STATUS_FAILED,
                exit_status=code,
                returncode=None,
                error=f"could not start {argv[0]}: {exc.strerror or exc}",
            )
        self.forwarder.attach(proc.pid)
        assert proc.stdout is not None and proc.stderr is not None
        relays = (
            _Relay(proc.stdout, 1 if self.opts.echo else None, TAIL_BYTES, "aaco-stdout"),
            _Relay(proc.stderr, 2 if self.opts.echo else None, TAIL_BYTES, "aaco-stderr"),
        )
        running: dict[str, Collector] = {}
        failures: list[dict[str, str]] = []
        for name, cls in self.collectors.items():
            try:
                collector = cls.for_process(proc.pid, self.opts.sample_hz)
                collector.start()
                running[name] = collector
            except Exception as exc:  # telemetry must never take the run down
                failures.append({"stage": f"collector {name}", "error": f"{exc}"[:400]})
        timed_out = threading.Event()
        timer = None
        if self.opts.timeout_s is not None:
            timer = threading.Timer(self.opts.timeout_s, self._expire, (proc.pid, timed_out))
            timer.daemon = True
            timer.start()
        usage: dict[str, float] | None = None
        try:
            usage = _wait(proc)
        finally:
            end = time.perf_counter_ns()
            if timer is not None:
                timer.cancel()
            if proc.returncode is None:  # unwinding: never leave the command running
                kill_process_group(proc)
            # a signal from now on must not reach a process group whose id may be reused
            self.forwarder.pgid = None
            for collector in running.values():
                collector.stop()
            # one deadline for both pipes: a background child holding them open costs
            # _DRAIN_S once, not once per pipe
            deadline = time.monotonic() + _DRAIN_S
            stdout, stderr = (r.finish(max(0.0, deadline - time.monotonic())) for r in relays)
        result = _RunResult(
            run=index,
            traced=traced,
            phase=phase,
            start_ns=start,
            end_ns=end,
            status=STATUS_COMPLETED,
            exit_status=0,
            returncode=proc.returncode,
            pid=proc.pid,
            failures=failures,
        )
        self._outcome(result, timed_out.is_set(), stderr)
        if usage is not None:
            result.cpu_user_s = usage["cpu_user_s"]
            result.cpu_system_s = usage["cpu_system_s"]
            result.max_rss_bytes, result.max_rss_source = worker_peak_rss(
                None, usage["wait4_max_rss_bytes"], parent_rss
            )
        result.stdout_tail = self._keep_tail(index, "stdout", stdout)
        result.stderr_tail = self._keep_tail(index, "stderr", stderr)
        for name, collector in running.items():
            try:
                result.telemetry[name] = collector.table()
                result.telemetry_info[name] = collector.info()
                result.extra_tables.update(collector.extra_tables())
            except Exception as exc:
                failures.append({"stage": f"collector {name}", "error": f"{exc}"[:400]})
        return result

    def _outcome(self, result: _RunResult, timed_out: bool, stderr: bytes) -> None:
        rc = result.returncode
        tail = _last_lines(stderr)
        said = f": {tail}" if tail else ""
        if timed_out:
            result.status, result.exit_status = STATUS_TIMEOUT, TIMED_OUT
            result.error = f"timed out after {self.opts.timeout_s:g} s and was killed"
        elif self.forwarder.received:
            first = _signal_name(self.forwarder.received[0])
            result.status, result.exit_status = STATUS_FAILED, 128 + self.forwarder.received[0]
            result.interrupted_by = first
            how = f"exited with status {rc}" if rc is not None and rc >= 0 else "was killed"
            if rc is not None and rc < 0:
                how = f"was killed by {_signal_name(-rc)}"
            result.error = f"interrupted: {first} was forwarded to the command, which {how}"
        elif rc is not None and rc < 0:
            result.signal = _signal_name(-rc)
            result.status, result.exit_status = STATUS_FAILED, 128 - rc
            result.error = f"killed by {result.signal}{said}"
        elif rc:
            result.status, result.exit_status = STATUS_FAILED, rc
            result.error = f"exited with status {rc}{said}"

    def _keep_tail(self, index: int, stream: str, tail: bytes) -> str | None:
        if not tail:
            return None
        rel = f"{COMMAND_OUTPUT_DIR}/run{index}.{stream}"
        path = self.output_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(tail)
        return rel

    @staticmethod
    def _expire(pgid: int, flag: threading.Event) -> None:
        flag.set()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


class _Signals:
    """The forwarder installed as the handler of SIGINT/SIGTERM/SIGHUP for a ``with`` block
    (main thread only: elsewhere the process's handlers stay as they are)."""

    def __init__(self, forwarder: _Forwarder) -> None:
        self._forwarder = forwarder
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in _FORWARDED:
                self._saved[sig] = signal.signal(sig, self._forwarder)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)


# -- the bundle ---------------------------------------------------------------------------------


def _validate(opts: ProfileOptions) -> None:
    if not opts.command or not opts.command[0]:
        raise UsageError("give the command to profile after '--', e.g. aaco profile -- ./app")
    if opts.repeat < 1:
        raise UsageError(f"--repeat must be >= 1, got {opts.repeat}")
    if opts.timeout_s is not None and not 0 < opts.timeout_s <= MAX_TIMEOUT_S:
        raise UsageError(
            f"--timeout must be > 0 and at most {MAX_TIMEOUT_S:g} s (30 days), "
            f"got {opts.timeout_s:g}"
        )
    if opts.telemetry:
        sampling_period_ns(opts.sample_hz)
        if opts.sample_hz > 1000:
            raise UsageError(f"--sample-hz must be <= 1000, got {opts.sample_hz:g}")


def _collector_classes(opts: ProfileOptions) -> dict[str, type[Collector]]:
    if not opts.telemetry:
        return {}
    names = opts.collectors if opts.collectors is not None else DEFAULT_COLLECTORS
    classes = {name: COLLECTORS.get(name) for name in names}
    tables = [cls.table_name for cls in classes.values()]
    doubled = sorted({t for t in tables if tables.count(t) > 1})
    if doubled:
        raise UsageError(
            f"--collectors {','.join(names)}: more than one writes {', '.join(doubled)} "
            "(system watches the command's own process, process_tree its whole tree: pick one)"
        )
    return classes


def _initial_meta(
    writer: BundleWriter,
    opts: ProfileOptions,
    choice: TracerChoice,
    executable: str | None,
    phases: list[str],
) -> dict[str, Any]:
    name = shlex.join([os.path.basename(opts.command[0]), *opts.command[1:]])
    if len(name) > _NAME_CHARS:
        name = name[: _NAME_CHARS - 1] + "…"
    tracer = choice.tracer
    return {
        "format_version": FORMAT_VERSION,
        "aaco_version": __version__,
        "session_id": writer.session_id,
        "kind": KIND,
        "created_utc": utc_now_iso(),
        "finished_utc": None,
        "status": STATUS_RUNNING,
        "error": None,
        "tag": opts.tag,
        "command_line": list(opts.argv if opts.argv is not None else sys.argv),
        "model": {"name": name, "path": executable, "source": "command"},
        "backend": {
            "name": "no tracer" if tracer is None else f"{choice.name} tracer",
            "provider": None,
        },
        "run": {
            "framework": None,
            "batch": None,
            "warmup": phases.count("warmup"),
            "iterations": phases.count("measured"),
            "profile": tracer is not None,
            "telemetry": opts.telemetry,
            "sample_hz": opts.sample_hz if opts.telemetry else None,
            "timeout_s": opts.timeout_s,
        },
        "clock": {
            "name": "perf_counter_ns (CLOCK_MONOTONIC)",
            "epoch_offset_ns": time.time_ns() - time.perf_counter_ns(),
        },
        "phases": {},
        "failures": [],
        "profile": {
            "command": list(opts.command),
            "executable": executable,
            "cwd": os.getcwd(),
            "iteration": "one whole run of the command (its wall time)",
            "repeat": opts.repeat,
            "tracer": {
                "name": choice.name,
                "requested": choice.requested,
                "reason": choice.reason,
                "traced_runs": [],  # the runs that ran under the tracer (run 1)
                # the output folder relative to the bundle, which is renamed when published
                "prefix": tracer.command(Path(tracer.output_dir)) if tracer else [],
                "environment": sorted(tracer.environment(Path(tracer.output_dir)))
                if tracer
                else [],
                "counters": list(opts.counters),
                "output_dir": tracer.output_dir if tracer else None,
                "status": None,
                "error": None,
                "files": [],
                "rows": None,
            },
            "runs": [],
            "exit_status": None,
            "exit_statuses": [],
        },
    }


def _phases(repeat: int, traced: bool) -> list[str]:
    """The phase of each run: with a tracer and more than one run, the traced run 1 is the
    warmup and the untraced others are measured; otherwise every run is measured."""
    if traced and repeat > 1:
        return ["warmup", *["measured"] * (repeat - 1)]
    return ["measured"] * repeat


def profile_command(opts: ProfileOptions) -> Session:
    """Run ``opts.command`` ``opts.repeat`` times and return the published bundle, whatever
    the command did: a failure of the command is the bundle's status, not an exception.

    Usage errors (no command, an unknown or unusable tracer or collector, --counters without
    rocprofv3) raise before any bundle exists.
    """
    _validate(opts)
    executable, cannot_run, why_not = resolve_command(opts.command)
    choice = (
        TracerChoice(NONE, opts.tracer, f"--tracer {opts.tracer}: {why_not}; nothing ran")
        if cannot_run is not None and opts.tracer in (AUTO, NONE)
        else choose_tracer(opts.command, opts.tracer, executable)
    )
    if opts.counters:
        if not isinstance(choice.tracer, Rocprofv3Tracer):
            raise UsageError(
                f"--counters are collected by rocprofv3; the tracer here is {choice.name} "
                f"({choice.reason})"
            )
        choice.tracer.counters = tuple(opts.counters)
    classes = _collector_classes(opts)
    writer = BundleWriter(opts.output)
    try:
        with table_handoff():  # the analyses and reports get the tables written here
            return _profile_into(writer, opts, choice, classes, executable, cannot_run, why_not)
    except BaseException as exc:
        # only AACO's own bug or an interrupt outside the runs gets here: keep the bundle
        salvage(writer, exc)
        raise


def _profile_into(
    writer: BundleWriter,
    opts: ProfileOptions,
    choice: TracerChoice,
    classes: dict[str, type[Collector]],
    executable: str | None,
    cannot_run: int | None,
    why_not: str | None,
) -> Session:
    tracer = choice.tracer
    phases = _phases(opts.repeat, tracer is not None)
    meta = _initial_meta(writer, opts, choice, executable, phases)
    save_session(writer.path, meta)
    env = _attempt(meta, "environment", capture_environment, meta["command_line"], [])
    if env is not None:
        writer.write_json(ENV_FILE, env)
        meta["fingerprint"] = env.get("fingerprint")

    results: list[_RunResult] = []
    if cannot_run is not None:
        now = time.perf_counter_ns()
        results.append(
            _RunResult(1, False, phases[0], now, now, STATUS_FAILED, cannot_run, None, why_not)
        )
    else:
        out = writer.path / tracer.output_dir if tracer is not None else None
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        runner = _Runner(opts, classes, writer.path)
        with _Signals(runner.forwarder):
            for i, phase in enumerate(phases, start=1):
                if tracer is not None and out is not None and i == 1:
                    result = runner.run(
                        i, phase, True, tracer.command(out), tracer.environment(out)
                    )
                else:
                    result = runner.run(i, phase, False)
                results.append(result)
                meta["failures"].extend(result.failures)
                if result.status != STATUS_COMPLETED:
                    break
    _finish_runs(writer, meta, results, classes, opts)
    if tracer is not None and cannot_run is None:
        _import_trace(writer, meta, tracer)
    _finish(writer, meta, opts)
    writer.publish()
    return write_reports(writer.final_path)


def _attempt(meta: dict[str, Any], stage: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # a side product failed: record it, keep the session
        meta["failures"].append({"stage": stage, "error": f"{type(exc).__name__}: {exc}"[:400]})
        return None


def _finish_runs(
    writer: BundleWriter,
    meta: dict[str, Any],
    results: list[_RunResult],
    classes: dict[str, type[Collector]],
    opts: ProfileOptions,
) -> None:
    """Status, error, the iterations table, phases, telemetry and the summary."""
    prof = meta["profile"]
    prof["runs"] = [r.to_json() for r in results]
    prof["tracer"]["traced_runs"] = [r.run for r in results if r.traced and r.pid is not None]
    prof["exit_statuses"] = [r.exit_status for r in results]
    last = results[-1]
    failed = next((r for r in results if r.status != STATUS_COMPLETED), None)
    prof["exit_status"] = failed.exit_status if failed is not None else 0
    meta["status"] = failed.status if failed is not None else STATUS_COMPLETED
    if failed is not None:
        skipped = opts.repeat - len(results)
        meta["error"] = {
            "message": f"run {failed.run} of {opts.repeat}: {failed.error}"
            + (f" ({skipped} more run(s) skipped)" if skipped else ""),
            "stage": "run",
            "returncode": failed.exit_status if failed.returncode is None else failed.returncode,
        }
    meta["finished_utc"] = utc_now_iso()
    ran = [r for r in results if r.pid is not None]
    if ran:
        meta["worker"] = {
            "wall_s": sum(r.wall_s for r in ran),
            "returncode": last.returncode,
            "cpu_user_s": _sum([r.cpu_user_s for r in ran]),
            "cpu_system_s": _sum([r.cpu_system_s for r in ran]),
            "max_rss_bytes": _max([r.max_rss_bytes for r in ran]),
            "max_rss_source": "wait4" if _max([r.max_rss_bytes for r in ran]) else None,
        }

    # the iterations table: one row per run that ran to its end and succeeded (a run that
    # failed, timed out or was interrupted has no wall time of the program's to report)
    rows: list[dict[str, Any]] = []
    counters = {"warmup": 0, "measured": 0}
    for r in ran:
        if r.status != STATUS_COMPLETED:
            continue
        rows.append(
            {
                "phase": r.phase,
                "iteration": counters[r.phase],
                "start_ns": r.start_ns,
                "end_ns": r.end_ns,
                "latency_ns": r.end_ns - r.start_ns,
                "preprocess_ns": None,
            }
        )
        counters[r.phase] += 1
    iters = INFERENCE_ITERS.from_rows(rows)
    if rows:
        writer.write_table(INFERENCE_ITERS.name, iters)
    for phase in ("warmup", "measured"):
        spans = [(r.start_ns, r.end_ns) for r in ran if r.phase == phase]
        if spans:
            meta["phases"][phase] = [min(s for s, _ in spans), max(e for _, e in spans)]

    # telemetry: each collector's tables of every run, one after the other
    tables: dict[str, pa.Table] = {}
    for name, cls in classes.items():
        parts = [r.telemetry[name] for r in ran if name in r.telemetry]
        infos = [r.telemetry_info[name] for r in ran if name in r.telemetry_info]
        if parts:
            table = pa.concat_tables(parts)
            tables[cls.table_name] = table
            if table.num_rows:
                writer.write_table(cls.table_name, table)
        info = _merge_infos(infos)
        if cls.meta_key is not None:
            meta[cls.meta_key] = info
        else:
            meta.setdefault("collectors", {})[name] = info
    extra: dict[str, list[pa.Table]] = {}
    for r in ran:
        for table_name, table in r.extra_tables.items():
            extra.setdefault(table_name, []).append(table)
    for table_name, parts in extra.items():
        table = pa.concat_tables(parts)
        tables[table_name] = table
        if table.num_rows:
            writer.write_table(table_name, table)

    summary = _summary(meta, results, iters, tables)
    writer.write_json(INFERENCE_SUMMARY_FILE, summary)
    save_session(writer.path, meta)


def _sum(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _max(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _merge_infos(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """One collector's account over the runs: the last run's, counts and costs added up."""
    if not infos:
        return {}
    merged = dict(infos[-1])
    for key in ("samples", "sampler_cpu_s", "processes_seen"):
        values = [i.get(key) for i in infos]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            merged[key] = sum(values)  # type: ignore[arg-type]
    values = [i.get("processes_max") for i in infos]
    if all(isinstance(v, int) for v in values):
        merged["processes_max"] = max(values)  # type: ignore[type-var]
    if len(infos) > 1:
        merged["runs"] = len(infos)
    return merged


def _summary(
    meta: dict[str, Any],
    results: list[_RunResult],
    iters: pa.Table,
    tables: dict[str, pa.Table],
) -> dict[str, Any]:
    """``metrics/inference_summary.json``: the run statistics (iterations = runs), the
    command's resource usage, and the telemetry over the measured runs."""
    summary: dict[str, Any] = {"status": meta["status"]}
    worker = meta.get("worker")
    summary["worker"] = (
        {k: worker[k] for k in ("max_rss_bytes", "max_rss_source", "cpu_user_s", "cpu_system_s")}
        | {"wall_s": worker["wall_s"]}
        if worker
        else None
    )
    if iters.num_rows:
        summary.update(summarize_iterations(iters, None))
    else:
        summary.update(
            {"latency_ms": None, "throughput": None, "warmup": None, "noise": None, "warnings": []}
        )
    summary["profile"] = None
    window = meta["phases"].get("measured")
    span = (int(window[0]), int(window[1])) if window else None
    system = tables.get(SYSTEM_EVENTS.name)
    summary["telemetry"] = (
        summarize_system(system, span) if system is not None and system.num_rows else None
    )
    gpu = tables.get(GPU_TELEMETRY.name)
    threads = tables.get(SCHED_THREADS.name)
    summary["gpu"] = summarize_gpu(gpu, span, None) if gpu is not None and gpu.num_rows else None
    summary["sched"] = (
        summarize_sched(threads, tables.get(SCHED_SYSTEM.name), span, None)
        if threads is not None and threads.num_rows
        else None
    )
    summary["warnings"] = [*_tracer_notes(meta, results), *summary["warnings"]]
    return summary


def _tracer_notes(meta: dict[str, Any], results: list[_RunResult]) -> list[str]:
    """What the report must say about the tracer: which ran, why, and what it did to the
    wall times."""
    tracer = meta["profile"]["tracer"]
    if tracer["name"] == NONE:
        if tracer["requested"] != AUTO:
            return []
        return [f"no tracer ran ({tracer['reason']}): wall time, exit status and telemetry only"]
    ran = [r for r in results if r.pid is not None]
    if not ran:
        return []
    head = f"run 1 was traced by {tracer['name']} ({tracer['reason']})"
    if len(ran) == 1:
        return [f"{head}: its wall time includes the tracer's overhead"]
    return [
        f"{head}: it is the warmup row, timed with the tracer's overhead; the "
        f"{len(ran) - 1} measured run(s) ran untraced"
    ]


def _import_trace(writer: BundleWriter, meta: dict[str, Any], tracer: Tracer) -> None:
    """Import what the tracer wrote (a failure is recorded, the session kept)."""
    record = meta["profile"]["tracer"]
    out = writer.path / tracer.output_dir
    files = sorted(str(p.relative_to(writer.path)) for p in out.rglob("*") if p.is_file())
    record["files"] = files
    for f in files:
        if f.endswith(ERROR_SUFFIX):
            meta["failures"].append(
                {"stage": "tracer", "error": f"{tracer.name} reported an error: see {f}"}
            )
    why = tracer.check_output(files)
    if why is not None:
        record["status"], record["error"] = STATUS_FAILED, why
        meta["failures"].append({"stage": "tracer", "error": why[:400]})
        return
    imported = _attempt(meta, "trace_import", ingest_traces, writer.path, [out])
    if imported is None:
        record["status"] = STATUS_FAILED
        record["error"] = meta["failures"][-1]["error"]
        return
    record["status"], record["rows"] = STATUS_COMPLETED, imported.get("rows")
    meta["imports"] = [{k: imported[k] for k in ("imported_utc", "importers", "events", "rows")}]
    meta["native_ops_rows"] = 0


def _finish(writer: BundleWriter, meta: dict[str, Any], opts: ProfileOptions) -> None:
    """The analyses (a completed session only, as for ``aaco run``), then ``analysis.json``."""
    save_session(writer.path, meta)
    if meta["status"] == STATUS_COMPLETED:
        try:
            diagnose_bundle(writer.path, auto_calibrate=opts.auto_calibrate)
        except Exception as exc:  # an analysis failed: record it, keep the bundle
            add_failure(writer.path, "diagnose", f"{type(exc).__name__}: {exc}")
        meta["failures"] = read_json(writer.path / SESSION_FILE).get("failures", [])
    meta["aaco_process"] = {"max_rss_bytes": own_peak_rss_bytes()}
    save_session(writer.path, meta)
    analysis = _attempt(
        meta, "analysis", build_analysis, Session.load(writer.path), writer.final_path
    )
    if analysis is not None:
        writer.write_json(ANALYSIS_FILE, analysis)
    else:
        save_session(writer.path, meta)
