"""Tests of aaco.runners.launch: how the parent accounts for a real worker process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from aaco.runners.launch import _max_sampled_rss, worker_peak_rss
from aaco.runners.rss import own_peak_rss_bytes

MIB = 2**20

# A worker that holds WORKER_MIB of touched memory, then reports (or, told so, dies without
# a word, as an out-of-memory kill would leave it).
_WORKER = """
import json, os, sys
from pathlib import Path
import numpy as np
from aaco.runners.rss import own_peak_rss_bytes
from aaco.runners.spec import RESULT_FILE, WorkerResult
block = np.ones(int(os.environ["WORKER_MIB"]) * 2**20 // 8)
if os.environ.get("WORKER_SILENT"):
    os._exit(3)
result = WorkerResult(status="completed", stage="done", peak_rss_bytes=own_peak_rss_bytes())
path = Path(sys.argv[1]) / RESULT_FILE
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text(json.dumps(result.to_json()))
"""

# A parent that first holds PARENT_MIB, frees it, then launches the worker.
_PARENT = """
import json, sys
from pathlib import Path
import numpy as np
from aaco.runners.launch import launch_worker
block = np.ones(int(sys.argv[2]) * 2**20 // 8)
del block
out = launch_worker(Path(sys.argv[1]), "rss_probe_worker", timeout_s=120)
print(json.dumps({"status": out.status, **(out.usage or {})}))
"""


def _launch(tmp_path: Path, parent_mib: int, worker_mib: int, silent: bool) -> dict[str, Any]:
    if own_peak_rss_bytes() is None:
        pytest.skip("no /proc/self/status VmHWM on this system")
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "rss_probe_worker.py").write_text(textwrap.dedent(_WORKER))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "WORKER_MIB": str(worker_mib)}
    if silent:
        env["WORKER_SILENT"] = "1"
    out = subprocess.run(
        [sys.executable, "-c", _PARENT, str(tmp_path / "bundle"), str(parent_mib)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env=env,
    )
    usage: dict[str, Any] = json.loads(out.stdout)
    return usage


def test_worker_peak_is_the_workers_not_the_parents(tmp_path: Path) -> None:
    """Known by construction: a worker holding 100 MiB under a parent that held 1 GiB."""
    usage = _launch(tmp_path, parent_mib=1024, worker_mib=100, silent=False)
    assert usage["status"] == "completed"
    assert usage["max_rss_source"] == "worker"
    assert 100 * MIB <= usage["max_rss_bytes"] < 250 * MIB
    # wait4's ru_maxrss is at least the worker's own peak (on Linux, the parent's 1 GiB too)
    assert usage["wait4_max_rss_bytes"] >= usage["max_rss_bytes"]


def test_silent_worker_peak_from_wait4_only_when_it_cannot_be_the_parents(
    tmp_path: Path,
) -> None:
    big = _launch(tmp_path / "a", parent_mib=0, worker_mib=600, silent=True)
    assert big["status"] == "failed"
    assert big["max_rss_source"] == "wait4" and big["max_rss_bytes"] >= 600 * MIB

    small = _launch(tmp_path / "b", parent_mib=1024, worker_mib=100, silent=True)
    assert small["status"] == "failed"
    assert small["max_rss_bytes"] is None and small["max_rss_source"] is None


def test_worker_peak_rss_sources() -> None:
    assert worker_peak_rss(500, 10e9, 10 * 2**30) == (500, "worker")
    assert worker_peak_rss(None, 2e9, 2**30) == (2_000_000_000, "wait4")
    assert worker_peak_rss(None, 2**30 + 2**20, 2**30) == (None, None)  # within the slack
    assert worker_peak_rss(None, 2**30, 2**30) == (None, None)
    assert worker_peak_rss(None, None, 2**30) == (None, None)
    assert worker_peak_rss(None, 2e9, None) == (None, None)


def test_max_sampled_rss_reads_the_telemetry_column() -> None:
    import pyarrow as pa

    t = pa.table({"proc_rss_bytes": pa.array([3_043_328, None, 176_603_136, 175_079_424])})
    assert _max_sampled_rss(t) == 176_603_136
    assert _max_sampled_rss(pa.table({"proc_rss_bytes": pa.array([None], pa.int64())})) is None
    assert _max_sampled_rss(pa.table({"other": [1]})) is None
