"""ProcessTreeSampler against a real process tree whose work is known by construction: a shell
that does nothing itself while its children burn CPU and hold memory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow.compute as pc
import pytest

from aaco.collectors.base import COLLECTORS
from aaco.collectors.process_tree import ProcessTreeSampler, descendants
from aaco.collectors.system import SystemSampler
from aaco.session.schema import SYSTEM_EVENTS

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# each child holds ~64 MiB and burns a CPU for about a second; the shell itself only waits
CHILD = (
    "import time; b = bytearray(64 * 2**20); b[::4096] = b'x' * len(b[::4096]); "
    "end = time.monotonic() + 1.0\nwhile time.monotonic() < end: pass"
)


def _tree() -> subprocess.Popen[bytes]:
    script = f'"{sys.executable}" -c "$CHILD" & "{sys.executable}" -c "$CHILD" & wait'
    return subprocess.Popen(["sh", "-c", script], env=dict(os.environ, CHILD=CHILD))


@linux_only
def test_tree_counts_the_children_the_root_alone_misses() -> None:
    proc = _tree()
    tree = ProcessTreeSampler.for_process(proc.pid, 20.0)
    root = SystemSampler.for_process(proc.pid, 20.0)
    with tree, root:
        proc.wait()
    t, r = tree.table(), root.table()
    assert t.schema == SYSTEM_EVENTS.schema
    tree_cpu = pc.max(t.column("proc_cpu_pct")).as_py()
    root_cpu = pc.max(r.column("proc_cpu_pct")).as_py() or 0.0
    assert tree_cpu > 60.0  # two busy children: at least most of one CPU on a loaded machine
    assert root_cpu < 20.0  # the shell only waits
    # two children of 64 MiB each at the same time, and never less than the shell alone
    assert pc.max(t.column("proc_rss_bytes")).as_py() > 100 * 2**20
    assert pc.max(r.column("proc_rss_bytes")).as_py() < 32 * 2**20
    info = tree.info()
    assert info["scope"] == "process_tree"
    assert info["processes_max"] >= 3 and info["processes_seen"] >= 3
    assert info["stopped_reason"] == "process_exited"
    # cumulative counters never go down, though children end
    for col in ("proc_ctx_voluntary", "proc_minor_faults"):
        values = [v for v in t.column(col).to_pylist() if v is not None]
        assert values == sorted(values), col


@linux_only
def test_descendants_walks_the_whole_tree() -> None:
    # sh -> a subshell (two commands: it cannot exec the first) -> sleep
    proc = subprocess.Popen(["sh", "-c", "(sleep 5; true) & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        found: list[int] = []
        while time.monotonic() < deadline and len(found) < 2:
            found = descendants(proc.pid)
            time.sleep(0.02)
        assert len(found) == 2
        assert proc.pid not in found
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_registered_as_process_tree() -> None:
    assert COLLECTORS.get("process_tree") is ProcessTreeSampler
    assert ProcessTreeSampler.table_name == "system_events"
    assert ProcessTreeSampler.meta_key == "telemetry"


def test_a_pid_that_does_not_exist() -> None:
    c = ProcessTreeSampler(2**22 + 12345, hz=50)
    c.start()
    c.stop()
    assert c.table().num_rows == 0
    assert c.info()["stopped_reason"] == "process_not_found"
    assert c.info()["processes_max"] is None
