"""Start a worker process, watch it (timeout, collectors), and say how it ended."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from aaco.collectors.base import Collector
from aaco.runners.rss import own_peak_rss_bytes, self_max_rss_bytes
from aaco.runners.spec import MEASURE_FILES, WorkerFiles, WorkerResult
from aaco.session.bundle import STATUS_COMPLETED, STATUS_FAILED, STATUS_TIMEOUT

# Linux keeps RSS in per-CPU counters that ru_maxrss and VmHWM read approximately (a few
# pages per CPU): a worker's ru_maxrss only this far above the parent's is not told apart.
_RSS_COUNTER_SLACK = 64 * 2**20


@dataclass
class LaunchOutcome:
    """How the worker ended, seen from the parent."""

    status: str  # completed | failed | timeout
    error: str | None
    returncode: int | None
    result: WorkerResult | None
    wall_ns: int
    stage: str | None
    #: each attached collector's table and its own account of its run, by collector name
    telemetry: dict[str, pa.Table] = field(default_factory=dict)
    telemetry_info: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the further tables some collectors write (the scheduler's system table), by table name
    extra_telemetry: dict[str, pa.Table] = field(default_factory=dict)
    # cpu_user_s, cpu_system_s, max_rss_bytes and max_rss_source (worker_peak_rss), and
    # wait4_max_rss_bytes: ru_maxrss as wait4 gave it, which may be the parent's peak
    usage: dict[str, Any] | None = None


def _last_stage(bundle_dir: Path, files: WorkerFiles) -> str | None:
    try:
        lines = (bundle_dir / files.progress).read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return str(json.loads(line)["stage"])
        except (ValueError, KeyError):
            continue
    return None


def _log_tail(bundle_dir: Path, files: WorkerFiles, n: int = 3) -> str:
    try:
        lines = [
            ln.strip() for ln in (bundle_dir / files.log).read_text(errors="replace").splitlines()
        ]
    except OSError:
        return ""
    lines = [ln for ln in lines if ln]
    return " | ".join(lines[-n:])[:400]


def kill_process_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group a worker leads (its children too), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _wait_with_usage(
    proc: subprocess.Popen[bytes], timeout_s: float | None
) -> dict[str, float] | None:
    """Wait for the worker and return its resource usage from the kernel (``wait4``): the CPU
    time of its whole life, and ``ru_maxrss``, which on Linux is the larger of the worker's
    own peak RSS and the parent's at the ``exec`` (see :mod:`aaco.runners.rss`)."""
    if not hasattr(os, "wait4"):
        proc.wait(timeout=timeout_s)
        return None
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    delay = 0.002
    while True:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            # ru_maxrss is in KiB on Linux, bytes on macOS.
            scale = 1 if sys.platform == "darwin" else 1024
            return {
                "wait4_max_rss_bytes": float(ru.ru_maxrss * scale),
                "cpu_user_s": ru.ru_utime,
                "cpu_system_s": ru.ru_stime,
            }
        if deadline is not None and time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout_s or 0.0)
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _max_sampled_rss(table: pa.Table) -> int | None:
    """The highest ``proc_rss_bytes`` the sampler read from the worker, or None."""
    if "proc_rss_bytes" not in table.column_names or not table.num_rows:
        return None
    import pyarrow.compute as pc

    top = pc.max(table.column("proc_rss_bytes")).as_py()
    return int(top) if top is not None else None


def worker_peak_rss(
    own: int | None, wait4_max_rss: float | None, parent_max_rss_at_launch: int | None
) -> tuple[int | None, str | None]:
    """The worker's own peak RSS in bytes and where it comes from, or (None, None).

    ``own``: what the worker read about itself as it ended (``worker``). Without it (the
    worker was killed), ``wait4``'s ``ru_maxrss`` is the worker's own only when it exceeds
    everything the parent could have passed on through ``exec``, its own peak at launch
    (``wait4``), by more than the kernel's RSS counters may be off; otherwise it may be the
    parent's, and the peak is unknown.
    """
    if own is not None:
        return own, "worker"
    if (
        wait4_max_rss is not None
        and parent_max_rss_at_launch is not None
        and wait4_max_rss > parent_max_rss_at_launch + _RSS_COUNTER_SLACK
    ):
        return int(wait4_max_rss), "wait4"
    return None, None


def launch_worker(
    bundle_dir: Path,
    module: str,
    timeout_s: float | None,
    collectors: Mapping[str, Callable[[int], Collector]] | None = None,
    *,
    args: Sequence[str] = (),
    wrapper: Sequence[str] = (),
    files: WorkerFiles = MEASURE_FILES,
    cpus: Collection[int] | None = None,
    env: Mapping[str, str] | None = None,
) -> LaunchOutcome:
    """Run ``[*wrapper] python -m <module> <bundle_dir> [*args]`` and wait, with a collector
    from each of ``collectors`` (name -> a factory given the worker's pid) watching it; the
    outcome's tables and infos are keyed by those names.

    The worker runs in its own process group so a timeout kills it with every thread and
    child it started (a ``wrapper`` such as rocprofv3 included). Its stdout and stderr go
    to ``files.log`` (``runtime/worker.log``); it reports in ``files.result``.

    ``cpus`` pins the worker to those CPUs (``--isolate``) and ``env`` adds variables to its
    environment (the thread counts that go with the pinning).
    """
    log_path = bundle_dir / files.log
    log_path.parent.mkdir(parents=True, exist_ok=True)
    worker_env = dict(os.environ)
    worker_env.setdefault("PYTHONUNBUFFERED", "1")
    worker_env.update(env or {})
    # Pinned between fork and exec (preexec_fn), not by the worker once it runs: the mask
    # is then in place before the interpreter starts, and every thread the worker ever
    # starts inherits it, the BLAS pool numpy starts at import included; the worker could
    # only pin itself after those imports. The child runs this one system call and nothing
    # else before exec.
    pin = functools.partial(os.sched_setaffinity, 0, frozenset(cpus)) if cpus else None
    start = time.perf_counter_ns()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*wrapper, sys.executable, "-m", module, str(bundle_dir), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=worker_env,
            preexec_fn=pin,
        )
        # What exec passed on to the worker is this process's own high-water mark at the
        # time (VmHWM: its ru_maxrss may hold its own parent's), and Popen returns after the
        # exec, so this reading bounds it; off Linux, ru_maxrss is the bound at hand.
        parent_max_rss = own_peak_rss_bytes() or self_max_rss_bytes()
        running: dict[str, Collector] = {}
        timed_out = False
        raw_usage: dict[str, float] | None = None
        try:
            for name, make in (collectors or {}).items():
                collector = make(proc.pid)
                collector.start()
                running[name] = collector
            try:
                raw_usage = _wait_with_usage(proc, timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_process_group(proc)
        except BaseException:
            kill_process_group(proc)
            raise
        finally:
            for collector in running.values():
                collector.stop()
    wall = time.perf_counter_ns() - start
    tables = {name: c.table() for name, c in running.items()}
    telemetry_info = {name: c.info() for name, c in running.items()}
    extra_tables: dict[str, pa.Table] = {}
    for c in running.values():
        extra_tables.update(c.extra_tables())
    # the worker's own process sampler: its RSS readings bound the worker's peak below
    table = next((t for t in tables.values() if "proc_rss_bytes" in t.column_names), None)
    result = None
    if (bundle_dir / files.result).is_file():
        try:
            result = WorkerResult.from_json(json.loads((bundle_dir / files.result).read_text()))
        except (OSError, ValueError, TypeError):
            result = None
    usage: dict[str, Any] | None = None
    if raw_usage is not None:
        rss, source = worker_peak_rss(
            result.peak_rss_bytes if result is not None else None,
            raw_usage["wait4_max_rss_bytes"],
            parent_max_rss,
        )
        if rss is not None and source == "worker" and table is not None:
            # the worker reads its VmHWM just before writing its result; the interpreter's
            # exit after that can still add a little (1.5 MiB seen), which a telemetry sample
            # may catch: the peak is at least every RSS sampled from the worker
            sampled = _max_sampled_rss(table)
            if sampled is not None and sampled > rss:
                rss = sampled
        usage = {**raw_usage, "max_rss_bytes": rss, "max_rss_source": source}
    stage = result.stage if result is not None else _last_stage(bundle_dir, files)
    rc = proc.returncode
    if timed_out:
        status = STATUS_TIMEOUT
        error = (
            f"worker exceeded the {timeout_s:g} s timeout during stage "
            f"'{stage or 'start'}' and was killed"
        )
    elif result is not None and result.status == STATUS_COMPLETED and rc == 0:
        status, error = STATUS_COMPLETED, None
    elif result is not None and result.error:
        status, error = STATUS_FAILED, result.error
    elif rc is not None and rc < 0:
        try:
            signame = signal.Signals(-rc).name
        except ValueError:
            signame = f"signal {-rc}"
        hint = " (out of memory?)" if signame == "SIGKILL" else ""
        status = STATUS_FAILED
        error = f"worker killed by {signame} during stage '{stage or 'start'}'{hint}"
    else:
        tail = _log_tail(bundle_dir, files)
        status = STATUS_FAILED
        error = f"worker exited with code {rc} during stage '{stage or 'start'}'" + (
            f": {tail}" if tail else ""
        )
    return LaunchOutcome(
        status=status,
        error=error,
        returncode=rc,
        result=result,
        wall_ns=wall,
        stage=stage,
        telemetry=tables,
        telemetry_info=telemetry_info,
        extra_telemetry=extra_tables,
        usage=usage,
    )
