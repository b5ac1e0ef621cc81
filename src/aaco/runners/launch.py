"""Start a worker process, watch it (timeout, telemetry), and say how it ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from aaco.runners.spec import MEASURE_FILES, WorkerFiles, WorkerResult
from aaco.session.bundle import STATUS_COMPLETED, STATUS_FAILED, STATUS_TIMEOUT


@dataclass
class LaunchOutcome:
    """How the worker ended, seen from the parent."""

    status: str  # completed | failed | timeout
    error: str | None
    returncode: int | None
    result: WorkerResult | None
    wall_ns: int
    stage: str | None
    telemetry: pa.Table | None = None
    telemetry_info: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, float] | None = None


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


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _wait_with_usage(
    proc: subprocess.Popen[bytes], timeout_s: float | None
) -> dict[str, float] | None:
    """Wait for the worker and return its resource usage from the kernel (``wait4``): the
    exact peak RSS and CPU time of its whole life, which sampling cannot give."""
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
                "max_rss_bytes": float(ru.ru_maxrss * scale),
                "cpu_user_s": ru.ru_utime,
                "cpu_system_s": ru.ru_stime,
            }
        if deadline is not None and time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(proc.args, timeout_s or 0.0)
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def launch_worker(
    bundle_dir: Path,
    module: str,
    timeout_s: float | None,
    telemetry_hz: float | None,
    *,
    wrapper: Sequence[str] = (),
    files: WorkerFiles = MEASURE_FILES,
) -> LaunchOutcome:
    """Run ``[*wrapper] python -m <module> <bundle_dir>`` and wait, sampling telemetry about it.

    The worker runs in its own process group so a timeout kills it with every thread and
    child it started (a ``wrapper`` such as rocprofv3 included). Its stdout and stderr go
    to ``files.log`` (``runtime/worker.log``); it reports in ``files.result``.
    """
    log_path = bundle_dir / files.log
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    start = time.perf_counter_ns()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*wrapper, sys.executable, "-m", module, str(bundle_dir)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        sampler = None
        telemetry_info: dict[str, Any] = {}
        timed_out = False
        usage: dict[str, float] | None = None
        try:
            if telemetry_hz:
                from aaco.collectors.system import SystemSampler

                sampler = SystemSampler(proc.pid, hz=telemetry_hz)
                sampler.__enter__()
            try:
                usage = _wait_with_usage(proc, timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill(proc)
        except BaseException:
            _kill(proc)
            raise
        finally:
            if sampler is not None:
                sampler.__exit__(None, None, None)
    wall = time.perf_counter_ns() - start
    table = None
    if sampler is not None:
        table = sampler.table()
        telemetry_info = {
            "hz": telemetry_hz,
            "samples": sampler.sample_count,
            "sampler_cpu_s": sampler.overhead_cpu_s,
            "stopped_reason": sampler.stopped_reason,
        }
    result = None
    if (bundle_dir / files.result).is_file():
        try:
            result = WorkerResult.from_json(json.loads((bundle_dir / files.result).read_text()))
        except (OSError, ValueError, TypeError):
            result = None
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
        telemetry=table,
        telemetry_info=telemetry_info,
        usage=usage,
    )
