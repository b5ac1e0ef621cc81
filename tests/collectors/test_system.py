"""SystemSampler against real child processes whose behaviour is known by construction."""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from aaco.collectors import system as system_mod
from aaco.collectors.base import Collector
from aaco.collectors.system import SystemSampler, cpu_governors
from aaco.errors import UsageError
from aaco.session.schema import SYSTEM_EVENTS

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

HZ = 20.0
WINDOW_S = 1.0

BURNER = """
import time
print("ready", flush=True)
end = time.monotonic() + 30
while time.monotonic() < end:
    pass
"""

SLEEPER = """
import time
print("ready", flush=True)
time.sleep(30)
"""

# Four threads that block for 1 ms at a time (many voluntary switches) while the main
# thread sleeps once (almost none): only a per-thread sum sees the switches.
SWITCHER = """
import threading, time
def worker():
    end = time.monotonic() + 30
    while time.monotonic() < end:
        time.sleep(0.001)
for _ in range(4):
    threading.Thread(target=worker, daemon=True).start()
print("ready", flush=True)
time.sleep(30)
"""

# Threads that come and go all the time: their counts must survive their exit.
CHURNER = """
import threading, time
def worker():
    for _ in range(5):
        time.sleep(0.001)
print("ready", flush=True)
end = time.monotonic() + 30
while time.monotonic() < end:
    ts = [threading.Thread(target=worker) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
"""


@contextlib.contextmanager
def spawn(code: str) -> Iterator[subprocess.Popen[str]]:
    """A child Python process, returned once it has printed "ready"; always reaped."""
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as p:
        try:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready"
            yield p
        finally:
            p.kill()
            p.wait()


@dataclass
class Run:
    burner: pa.Table
    sleeper: pa.Table
    burner_sampler: SystemSampler
    sleeper_sampler: SystemSampler
    t0: int
    t1: int


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    """One second of sampling a CPU burner and a sleeper side by side, at 20 Hz."""
    with spawn(BURNER) as burner, spawn(SLEEPER) as sleeper:
        bs = SystemSampler(burner.pid, hz=HZ)
        ss = SystemSampler(sleeper.pid, hz=HZ)
        t0 = time.perf_counter_ns()
        with bs, ss:
            time.sleep(WINDOW_S)
        t1 = time.perf_counter_ns()
    yield Run(bs.table(), ss.table(), bs, ss, t0, t1)


def _values(table: pa.Table, column: str) -> list[object]:
    return list(table.column(column).to_pylist())


def _numbers(table: pa.Table, column: str) -> list[float]:
    return [float(v) for v in table.column(column).to_pylist() if v is not None]


def _ints(table: pa.Table, column: str) -> list[int]:
    return [int(v) for v in table.column(column).to_pylist() if v is not None]


def test_table_follows_the_schema(run: Run) -> None:
    assert run.burner.schema.equals(SYSTEM_EVENTS.schema)
    assert SYSTEM_EVENTS.conform(run.burner).num_rows == run.burner.num_rows


def test_burner_is_busy_and_sleeper_is_idle(run: Run) -> None:
    burner = _numbers(run.burner, "proc_cpu_pct")
    sleeper = _numbers(run.sleeper, "proc_cpu_pct")
    assert sum(burner) / len(burner) > 50
    assert sum(sleeper) / len(sleeper) < 10


def test_sample_count_matches_rate(run: Run) -> None:
    expected = HZ * WINDOW_S  # plus one at start and one at stop
    for sampler in (run.burner_sampler, run.sleeper_sampler):
        assert 0.7 * expected <= sampler.sample_count <= expected + 3
        assert sampler.stopped_reason == "stopped"
        # every sample but the one taken at stop was scheduled
        assert len(sampler.lateness_ns) == sampler.sample_count - 1


def test_timestamps_monotonic_and_inside_window(run: Run) -> None:
    ts = _ints(run.burner, "ts_ns")
    assert len(ts) == run.burner.num_rows
    assert all(a < b for a, b in itertools.pairwise(ts))
    assert run.t0 <= ts[0] and ts[-1] <= run.t1


def test_first_row_has_null_rates(run: Run) -> None:
    first = run.burner.slice(0, 1).to_pylist()[0]
    assert first["proc_cpu_pct"] is None
    assert first["sys_cpu_pct"] is None
    assert first["sys_cpu_pct_per_core"] is None
    # the non-rate columns are there from the first sample on
    assert first["proc_rss_bytes"] > 0
    assert first["proc_threads"] >= 1


def test_counters_never_decrease(run: Run) -> None:
    for table in (run.burner, run.sleeper):
        for column in (
            "proc_ctx_voluntary",
            "proc_ctx_involuntary",
            "proc_minor_faults",
            "proc_major_faults",
        ):
            values = _values(table, column)
            if sys.platform.startswith("linux") or "faults" not in column:
                assert None not in values, column
            present = _ints(table, column)
            assert all(a <= b for a, b in itertools.pairwise(present)), column


def test_system_columns_are_sane(run: Run) -> None:
    cores = os.cpu_count()
    for pct in _numbers(run.burner, "sys_cpu_pct"):
        assert 0.0 <= pct <= 100.0
    rows = [r for r in _values(run.burner, "sys_cpu_pct_per_core") if r is not None]
    assert rows
    for row in rows:
        assert isinstance(row, list) and len(row) == cores
        assert all(v is None or 0.0 <= v <= 100.0 for v in row)
    assert all(v >= 0 for v in _numbers(run.burner, "load_1m"))
    assert all(v > 0 for v in _numbers(run.burner, "cpu_freq_mhz"))


def test_overhead_is_measured(run: Run) -> None:
    s = run.burner_sampler
    assert 0.0 < s.overhead_cpu_s < 0.25 * WINDOW_S


def test_stop_is_prompt_and_short_final_interval_has_null_rates() -> None:
    with spawn(SLEEPER) as child:
        sampler = SystemSampler(child.pid, hz=0.5)  # next deadline 2 s away
        sampler.start()
        time.sleep(0.1)
        t = time.perf_counter()
        sampler.stop()
        assert time.perf_counter() - t < 1.0
    rows = sampler.table().to_pylist()
    assert len(rows) == 2  # the first sample and the one taken at stop
    assert rows[1]["proc_cpu_pct"] is None  # 0.1 s is under half a 2 s period
    assert rows[1]["proc_rss_bytes"] is not None


@pytest.mark.parametrize("reaped", [False, True], ids=["zombie", "reaped"])
def test_process_exit_mid_run_keeps_samples(reaped: bool) -> None:
    code = 'import time\nprint("ready", flush=True)\ntime.sleep(0.3)\n'
    with spawn(code) as child:
        reaper = threading.Thread(target=child.wait) if reaped else None
        sampler = SystemSampler(child.pid, hz=HZ)
        sampler.start()
        if reaper is not None:
            reaper.start()
        deadline = time.monotonic() + 5
        while sampler.stopped_reason is None and time.monotonic() < deadline:
            time.sleep(0.02)
        sampler.stop()
        if reaper is not None:
            reaper.join()
    assert sampler.stopped_reason == "process_exited"
    table = sampler.table()
    assert 2 <= table.num_rows <= HZ * 5
    assert table.schema.equals(SYSTEM_EVENTS.schema)


def test_missing_process() -> None:
    with subprocess.Popen([sys.executable, "-c", "pass"]) as p:
        pid = p.pid
    with SystemSampler(pid, hz=HZ) as sampler:
        time.sleep(0.05)
    assert sampler.stopped_reason in ("process_not_found", "process_exited")
    assert sampler.table().num_rows == 0


def test_clock_is_injectable() -> None:
    fake = itertools.count(10**15, 1000)
    with SystemSampler(os.getpid(), hz=HZ, clock=lambda: next(fake)) as sampler:
        time.sleep(0.25)
    ts = _values(sampler.table(), "ts_ns")
    assert len(ts) >= 3
    assert ts == [10**15 + 1000 * i for i in range(len(ts))]
    # rates still come from the real clock
    assert any(v is not None for v in _values(sampler.table(), "proc_cpu_pct"))


@linux_only
def test_context_switches_include_all_threads() -> None:
    with spawn(SWITCHER) as child, SystemSampler(child.pid, hz=HZ) as sampler:
        time.sleep(0.5)
        with open(f"/proc/{child.pid}/status") as fh:
            main_only = next(
                int(line.split()[1]) for line in fh if line.startswith("voluntary_ctxt_switches")
            )
    table = sampler.table()
    threads = _ints(table, "proc_threads")
    voluntary = _ints(table, "proc_ctx_voluntary")
    assert max(threads) >= 5
    # 4 threads blocking every ~1 ms for 0.5 s: hundreds of switches the main thread lacks
    assert voluntary[-1] - main_only > 200


@linux_only
def test_counters_survive_threads_exiting() -> None:
    with spawn(CHURNER) as child, SystemSampler(child.pid, hz=50.0) as sampler:
        time.sleep(0.5)
    table = sampler.table()
    for column in ("proc_ctx_voluntary", "proc_ctx_involuntary"):
        values = _ints(table, column)
        assert all(a <= b for a, b in itertools.pairwise(values)), column
    assert _ints(table, "proc_ctx_voluntary")[-1] > 50


@pytest.mark.parametrize("hz", [0, -1.0, math.nan, math.inf, True])
def test_bad_rate_is_a_usage_error(hz: float) -> None:
    with pytest.raises(UsageError):
        SystemSampler(os.getpid(), hz=hz)


def test_collector_protocol() -> None:
    assert SystemSampler.available() == (True, "")
    sampler = SystemSampler(os.getpid(), hz=HZ)
    with pytest.raises(RuntimeError):
        sampler.table()
    sampler.stop()  # before start: nothing to do
    with sampler:
        assert sampler.running
        with pytest.raises(RuntimeError):
            sampler.start()
    assert not sampler.running
    sampler.stop()  # idempotent
    assert sampler.table().num_rows >= 1

    class Needy(Collector):
        name = "needy"
        requires = ("aaco_no_such_module_xyz",)

    ok, why = Needy.available()
    assert not ok and "aaco_no_such_module_xyz" in why


def test_exception_in_body_still_stops() -> None:
    sampler = SystemSampler(os.getpid(), hz=HZ)
    with pytest.raises(KeyError), sampler:
        raise KeyError("boom")
    assert sampler.stopped_reason == "stopped"


def _fake_cpu_dir(root: Path, files: dict[str, str]) -> None:
    for cpu, content in files.items():
        d = root / cpu / "cpufreq"
        d.mkdir(parents=True)
        for name, value in (line.split("=") for line in content.split(";")):
            (d / name).write_text(value + "\n")


def test_cpu_governors_reads_sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cpu_dir(
        tmp_path,
        {
            "cpu10": "scaling_governor=powersave;scaling_cur_freq=1000000",
            "cpu2": "scaling_governor=performance;scaling_cur_freq=3000000",
        },
    )
    (tmp_path / "cpufreq").mkdir()  # the policy directory is not a CPU
    monkeypatch.setattr(system_mod, "_CPU_DIR", str(tmp_path))
    assert cpu_governors() == {"cpu2": "performance", "cpu10": "powersave"}
    assert list(cpu_governors() or {}) == ["cpu2", "cpu10"]
    freq = system_mod._Freq()
    try:
        if sys.platform.startswith("linux"):
            assert freq.read() == pytest.approx(2000.0)
    finally:
        freq.close()


def test_cpu_governors_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(system_mod, "_CPU_DIR", str(tmp_path))
    assert cpu_governors() is None
