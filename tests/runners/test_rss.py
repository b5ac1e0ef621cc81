"""Tests of aaco.runners.rss: a process's own peak RSS, not the one exec carried over."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aaco.runners.rss import own_peak_rss_bytes

MIB = 2**20


def test_vmhwm_is_read_in_kib(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmPeak:\t 999999 kB\nVmHWM:\t 2048 kB\nVmRSS:\t 1 kB\n")
    assert own_peak_rss_bytes(status) == 2048 * 1024


@pytest.mark.parametrize(
    "text", ["Name:\tpython\nVmRSS:\t 1024 kB\n", "VmHWM:\t 12 MB\n", "VmHWM:\n", ""]
)
def test_no_or_odd_vmhwm_is_unknown(tmp_path: Path, text: str) -> None:
    status = tmp_path / "status"
    status.write_text(text)
    assert own_peak_rss_bytes(status) is None


def test_missing_status_file_is_unknown(tmp_path: Path) -> None:
    assert own_peak_rss_bytes(tmp_path / "absent") is None


def test_child_reads_its_own_peak_not_its_parents() -> None:
    """A parent that once held 600 MiB starts a child that holds 100 MiB: on Linux the
    child's ru_maxrss says 600 MiB (exec keeps the high-water mark), VmHWM says ~100."""
    if own_peak_rss_bytes() is None:
        pytest.skip("no /proc/self/status VmHWM on this system")
    child = (
        "import numpy as np; from aaco.runners.rss import own_peak_rss_bytes, self_max_rss_bytes;"
        "a = np.ones(100 * 2**20 // 8); print(own_peak_rss_bytes(), self_max_rss_bytes())"
    )
    parent = (
        "import subprocess, sys; import numpy as np;"
        "a = np.ones(600 * 2**20 // 8); del a;"
        f"subprocess.run([sys.executable, '-c', {child!r}], check=True)"
    )
    out = subprocess.run(
        [sys.executable, "-c", parent], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    own, maxrss = int(out[0]), int(out[1])
    assert 100 * MIB <= own < 250 * MIB
    assert maxrss > 0
