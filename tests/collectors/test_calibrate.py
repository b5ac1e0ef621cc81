"""Calibration microbenchmarks: the stability loop on known sequences, contention judged
from /proc/stat readings (built by hand, and recorded on a real machine), the cache
hierarchy from sysfs, and real quick runs."""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aaco.collectors.calibrate import (
    BUSY_SHARE,
    CacheLevel,
    ContentionProbe,
    Measurement,
    ProcStatReplay,
    best_of_stable,
    cache_levels,
    calibrate,
    first_run_calibration,
    level_plan,
    level_roofs,
    llc_bytes,
    measure_until_stable,
    parse_proc_stat,
)
from aaco.errors import BusyError, UsageError

FIXTURES = Path(__file__).parent / "fixtures"


class FakeTime:
    """A clock that only moves when the measured function runs: each call takes the next
    of ``durations`` seconds."""

    def __init__(self, durations: list[float]) -> None:
        self.t = 0.0
        self.durations = iter(durations)

    def clock(self) -> float:
        return self.t

    def call(self) -> None:
        self.t += next(self.durations)


def test_stops_when_the_window_is_stable() -> None:
    # rates 100/2, 100/1.5, then five calls of 1 s: the last five rates are all 100 (CV 0)
    ft = FakeTime([2.0, 1.5, 1.0, 1.0, 1.0, 1.0, 1.0, 5.0])
    m = measure_until_stable(ft.call, 100.0, window=5, cv_target=0.03, clock=ft.clock)
    assert m.stable and m.repeats == 7 and m.value == 100.0 and m.cv == 0.0
    assert m.rates[:2] == [50.0, 100.0 / 1.5]


def test_gives_up_at_the_budget_and_says_so() -> None:
    # alternating 1 s / 2 s never gets a CV under 3 %; after the 7th call 10 s have passed
    # (1+2+1+2+1+2+1) but the budget check needs more than 10 s: the 8th call (2 s) ends it
    ft = FakeTime([1.0, 2.0] * 20)
    m = measure_until_stable(ft.call, 10.0, window=5, budget_s=10.0, clock=ft.clock)
    assert not m.stable and m.repeats == 8
    # the last window: rates 5, 10, 5, 10, 5 -> median 5
    assert m.value == 5.0 and m.cv > 0.03


def _m(value: float, stable: bool) -> Measurement:
    return Measurement("x", "FLOP/s", value, 0.0, 5, stable, "", [value] * 5)


def test_best_of_stable_prefers_stable_figures() -> None:
    # an unstable 300 loses to the stable 200 and 100; with nothing stable, the max wins
    assert best_of_stable([_m(100, True), _m(300, False), _m(200, True)]) == 200
    assert best_of_stable([_m(100, False), _m(300, False)]) == 300


def test_quick_cpu_calibration_is_real_and_sane() -> None:
    # allow_busy: this test checks the figures' shape, not the machine's quietness (the
    # development machine is shared); a refused calibration is tested below
    c = calibrate("cpu", quick=True, allow_busy=True)
    assert c.source == "calibrated" and c.backend == "cpu" and c.fingerprint
    assert c.mode == "quick" and c.contention in ("quiet", "disturbed")
    assert (c.contention == "disturbed") == bool(c.details["disturbed_figures"])
    assert c.flops_per_s["float32"] > 1e8  # any CPU of this decade, even when shared
    assert c.flops_per_s["float64"] > 0.5e8
    assert c.bytes_per_s is not None and 0.1e9 < c.bytes_per_s < 5e11
    by = {m["name"]: m for m in c.details["measurements"]}
    levels = cache_levels()
    planned = {lv.name.lower() for lv, _ in level_plan(levels, levels[0].instances)}
    expected = {
        "numpy_gemm_float32", "onnxruntime_gemm_float32", "numpy_gemm_float64",
        "onnxruntime_gemm_float64", "onnxruntime_gemm_int8", "numpy_copy_bandwidth",
        "numpy_add_bandwidth",
        "onnxruntime_add_bandwidth",
        *(f"numpy_reduce_{n}_bandwidth" for n in planned),
        f"onnxruntime_add_{levels[-1].name.lower()}_bandwidth",
    }  # fmt: skip
    assert set(by) == expected
    for m in by.values():
        assert m["repeats"] >= 2 and math.isfinite(m["value"]) and m["value"] > 0
        assert m["cv"] >= 0 and isinstance(m["stable"], bool) and m["size"]
        # a stable figure had its last 3 quiet rates (quick) within 5 % CV
        assert not m["stable"] or (m["repeats"] - m["discarded"] >= 3 and m["cv"] < 0.05)
        assert m["calls_per_repeat"] >= 1 and 0.0 <= m["other_share"] <= 1.0
    # each ceiling is one of its engines' figures, and no stable figure beats it
    for dt in ("float32", "float64"):
        engines = [by[f"numpy_gemm_{dt}"], by[f"onnxruntime_gemm_{dt}"]]
        assert c.flops_per_s[dt] in [m["value"] for m in engines]
        assert all(c.flops_per_s[dt] >= m["value"] for m in engines if m["stable"])
    assert c.flops_per_s["int8"] == by["onnxruntime_gemm_int8"]["value"] > 1e8
    dram = [by[k] for k in ("numpy_copy_bandwidth", "numpy_add_bandwidth",
                            "onnxruntime_add_bandwidth")]  # fmt: skip
    assert c.bytes_per_s in [m["value"] for m in dram]
    assert all(c.bytes_per_s >= m["value"] for m in dram if m["stable"])
    # the level roofs: one per cache level, then DRAM; nearer never below farther
    assert [lv.name for lv in c.memory_levels] == [lv.name for lv in levels] + ["DRAM"]
    assert c.memory_levels[-1].bytes_per_s == c.bytes_per_s
    roofs = [lv.bytes_per_s or 0 for lv in c.memory_levels]
    assert roofs == sorted(roofs, reverse=True)
    assert [lv.capacity_bytes for lv in c.memory_levels[:-1]] == [
        lv.capacity_bytes for lv in levels
    ]
    assert c.details["seconds"] > 0 and c.details["quick"] is True
    assert 0.0 <= c.details["other_cpu_share"] <= 1.0


# --- contention: readings built by hand -----------------------------------------------------


def _stat(idle_ticks: int) -> str:
    """/proc/stat of a 2-CPU machine whose idle + iowait counter reads ``idle_ticks``."""
    return (
        f"cpu  5000 0 1000 {idle_ticks - 20} 20 0 3 7 0 0\n"
        "cpu0 2500 0 500 0 10 0 1 3 0 0\ncpu1 2500 0 500 0 10 0 2 4 0 0\nintr 1 2 3\n"
    )


def _readings(others: list[float], rep_s: float = 0.1) -> ProcStatReplay:
    """Readings around repetitions of ``rep_s`` seconds on 2 CPUs at 100 ticks/s, this
    process using one CPU throughout and other processes ``others[i]`` CPU-seconds during
    repetition i: the idle time is what is left (capacity - own - others)."""
    records = []
    wall, idle, own = 0.0, 10_000, 0.0
    for o in others:
        records.append({"wall_s": wall, "proc_stat": _stat(idle), "own_s": own})
        wall += rep_s
        own += rep_s
        idle += round((2 * rep_s - rep_s - o) * 100)
        records.append({"wall_s": wall, "proc_stat": _stat(idle), "own_s": own})
    return ProcStatReplay(records)


def test_parse_proc_stat_counts_idle_and_iowait() -> None:
    assert parse_proc_stat(_stat(777)) == (777, 2)
    with pytest.raises(ValueError, match="no aggregate cpu line"):
        parse_proc_stat("cpu0 1 2 3 4\n")


def test_disturbed_repetitions_are_discarded_and_retried() -> None:
    # reps 1 and 2: others held half the machine (0.1 of 0.2 CPU-s) and the rate halved
    # (2 s per call); the figure is made of the 5 quiet repetitions only
    ft = FakeTime([1.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    replay = _readings([0.0, 0.1, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0])
    m = measure_until_stable(ft.call, 100.0, window=5, clock=ft.clock, reader=replay)
    assert m.stable and m.value == 100.0 and m.repeats == 7 and m.discarded == 2
    assert m.rates == [100.0] * 5 and not m.disturbed
    # others used 0.2 CPU-s of 7 x 0.2 = 1.4
    assert m.other_share == pytest.approx(0.2 / 1.4)


def test_two_ticks_of_doubt_before_blaming_others() -> None:
    # capacity 0.2 CPU-s per repetition, threshold 10 % = 0.02, less 2 ticks (0.02):
    # 0.03 CPU-s of others (15 % raw) is rounding, 0.05 (25 %) is contention
    ft = FakeTime([1.0] * 10)
    m = measure_until_stable(ft.call, 1.0, window=2, clock=ft.clock, reader=_readings([0.03, 0.03]))
    assert m.discarded == 0 and m.stable
    ft = FakeTime([1.0] * 10)
    m = measure_until_stable(ft.call, 1.0, window=2, clock=ft.clock,
                             reader=_readings([0.05, 0.0, 0.0]))  # fmt: skip
    assert m.discarded == 1 and m.repeats == 3


def test_a_machine_busy_past_the_budget_leaves_a_disturbed_figure() -> None:
    # every repetition disturbed: after the 10 s budget the figure is the median of the
    # discarded rates (a figure of last resort, for --allow-busy) and says it is disturbed
    ft = FakeTime([2.0] * 10)
    m = measure_until_stable(ft.call, 10.0, window=5, budget_s=10.0, clock=ft.clock,
                             reader=_readings([0.1] * 10))  # fmt: skip
    assert m.disturbed and m.discarded == m.repeats == 6 and m.rates == []
    assert m.value == 5.0 and m.other_share == pytest.approx(0.5)


def test_contention_unknown_without_readings() -> None:
    ft = FakeTime([1.0] * 5)
    m = measure_until_stable(ft.call, 1.0, clock=ft.clock, reader=lambda: None)
    assert m.other_share is None and m.discarded == 0 and m.stable


def test_short_calls_are_timed_in_batches() -> None:
    # a first, untimed call of 0.05 s (a cold start), then 0.01 s each: the untimed batches
    # grow to ceil(1.25 x 0.1 / 0.05) = 3 calls (0.03 s), then ceil(3 x 1.25 x 0.1 / 0.03)
    # = 13 (0.13 s, long enough): repetitions of 13 calls
    ft = FakeTime([0.05] + [0.01] * 200)
    m = measure_until_stable(ft.call, 1.0, window=3, clock=ft.clock, min_repeat_s=0.1)
    assert m.calls_per_repeat == 13 and m.value == pytest.approx(100.0) and m.repeats == 3
    # a repetition that sped up to under half the target is redone with more calls: one
    # call of 0.1 s is long enough, so is the first repetition; then a call takes 0.003 s,
    # too short to judge: redone with ceil(1.25 x 0.1 / 0.003) = 42 calls, and not counted
    ft = FakeTime([0.1, 0.1] + [0.003] * 2000)
    m = measure_until_stable(ft.call, 1.0, window=3, clock=ft.clock, min_repeat_s=0.1)
    assert m.calls_per_repeat == 42 and m.repeats == 4 and m.rates[0] == pytest.approx(10.0)
    assert m.value == pytest.approx(1 / 0.003)


# --- contention: readings recorded on the 2-vCPU development machine -------------------------


def _recorded() -> list[dict[str, object]]:
    path = FIXTURES / "proc_stat_quiet_hogs_others.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_recorded_contention_is_seen_and_a_quiet_spell_is_not() -> None:
    # the recording: 8 repetitions of a single-threaded GEMM loop (0.1 s each) on a quiet
    # machine, 8 with one CPU hog per CPU, then 8 while another user's process held about
    # one CPU; two readings per repetition. The rates say which repetition was which:
    # 1 for quiet ones, 2 for the others
    records = _recorded()
    phases = [r["phase"] for r in records[::2]]
    assert phases == ["quiet"] * 8 + ["busy"] * 8 + ["others"] * 8
    ft = FakeTime([1.0] * 8 + [0.5] * 16)
    m = measure_until_stable(ft.call, 1.0, window=8, cv_target=1e-9, clock=ft.clock,
                             reader=ProcStatReplay(records), max_repeats=24)  # fmt: skip
    # no quiet repetition is discarded, every other one is
    assert m.rates == [1.0] * 8 and m.discarded == 0 and m.stable
    replay = ProcStatReplay(records[16:])
    ft = FakeTime([1.0] * 16)
    m = measure_until_stable(ft.call, 1.0, window=2, clock=ft.clock, reader=replay,
                             max_repeats=16, budget_s=100)  # fmt: skip
    assert m.discarded == 16 and m.disturbed and m.rates == []
    # hogs on both CPUs: others took 0.75-0.86 of the machine; one other process: 0.45+
    assert 0.6 < (m.other_share or 0) < 0.85


def test_calibration_on_a_busy_machine_is_refused() -> None:
    # the busy half of the recording, played in a loop: the first figure cannot find quiet
    # repetitions within its budget, and the calibration stops there with the share
    busy = [r for r in _recorded() if r["phase"] == "busy"]
    t0 = time.perf_counter()
    shifted = []
    for i in range(400):  # readings keep their wall deltas; counters keep growing
        a, b = busy[(2 * i) % len(busy)], busy[(2 * i + 1) % len(busy)]
        shifted += [a, b]
    with pytest.raises(BusyError, match="calibration refused: other processes held") as exc:
        calibrate("cpu", quick=True, reader=ProcStatReplay(shifted))
    assert exc.value.share is not None and exc.value.share > 0.3
    assert "numpy_gemm_float32" in str(exc.value) and "--allow-busy" in str(exc.value)
    assert time.perf_counter() - t0 < 30  # it stopped at the first figure


def test_llc_size_is_read_or_unknown() -> None:
    size = llc_bytes()
    assert size is None or size >= 64 * 1024


# --- the cache hierarchy ------------------------------------------------------------------


def test_cache_levels_from_recorded_sysfs() -> None:
    # copied from this 2-vCPU AMD EPYC VM: 32 KiB L1d and 512 KiB L2 per core, one 32 MiB L3
    root = FIXTURES / "sysfs_cpu_epyc_2vcpu"
    got = cache_levels(root, {0, 1})
    assert got == [CacheLevel(1, 32768, 2), CacheLevel(2, 524288, 2),
                   CacheLevel(3, 32 * 2**20, 1)]  # fmt: skip
    assert [lv.capacity_bytes for lv in got] == [65536, 2**20, 32 * 2**20]
    # one CPU of the two: one instance of each
    assert [lv.instances for lv in cache_levels(root, {1})] == [1, 1, 1]
    assert cache_levels(root / "nothing", {0}) == []


def _sysfs(root: Path, cpus: int, caches: list[tuple[int, str, str, int]]) -> None:
    """Write cpuN/cache/indexK/{level,type,size,shared_cpu_list}: one (level, type, size,
    CPUs per instance) per cache."""
    for cpu in range(cpus):
        for k, (level, kind, size, per) in enumerate(caches):
            d = root / f"cpu{cpu}" / "cache" / f"index{k}"
            d.mkdir(parents=True)
            first = cpu - cpu % per
            (d / "level").write_text(f"{level}\n")
            (d / "type").write_text(f"{kind}\n")
            (d / "size").write_text(f"{size}\n")
            (d / "shared_cpu_list").write_text(f"{first}-{first + per - 1}\n")


def test_cache_levels_count_instances_not_cpus(tmp_path: Path) -> None:
    # 8 logical CPUs, 2 per core (SMT), 4 cores per L3: L1d/L2 have 4 instances, L3 has 2;
    # the instruction cache is not a data level
    _sysfs(tmp_path, 8, [(1, "Data", "48K", 2), (1, "Instruction", "32K", 2),
                         (2, "Unified", "2048K", 2), (3, "Unified", "16M", 4)])  # fmt: skip
    got = cache_levels(tmp_path, set(range(8)))
    assert got == [CacheLevel(1, 48 * 1024, 4), CacheLevel(2, 2 * 2**20, 4),
                   CacheLevel(3, 16 * 2**20, 2)]  # fmt: skip


def test_level_plan_sizes_each_working_set_to_its_level() -> None:
    levels = [CacheLevel(1, 32768, 2), CacheLevel(2, 524288, 2), CacheLevel(3, 32 * 2**20, 1)]
    plan = level_plan(levels, 2)
    # L1: half a core's; L2: sqrt(32 KiB x 512 KiB) = 128 KiB; L3 (16 MiB per thread):
    # sqrt(512 KiB x 16 MiB) = 2.83 MiB, past the L2 and well inside the L3
    assert [(lv.name, ws) for lv, ws in plan] == [
        ("L1", 16384),
        ("L2", 131072),
        ("L3", int(math.sqrt(2**19 * 2**24))),
    ]
    # a last level barely larger than the L2 per thread (1.875 vs 2 MiB, as on some Xeons)
    # cannot be told apart from it: not measured
    xeon = [CacheLevel(1, 48 * 1024, 4), CacheLevel(2, 2 * 2**20, 4),
            CacheLevel(3, int(7.5 * 2**20), 1)]  # fmt: skip
    assert [lv.name for lv, _ in level_plan(xeon, 4)] == ["L1", "L2"]


def _fig(value: float) -> Measurement:
    return Measurement("x", "B/s", value, 0.0, 5, True, "", [value] * 5)


def test_level_roofs_never_fall_below_a_farther_level() -> None:
    levels = [CacheLevel(1, 32768, 2), CacheLevel(2, 524288, 2), CacheLevel(3, 32 * 2**20, 1)]
    # L2 measured above L1 (noise): L1's roof is raised to it; L3's best engine wins
    got = level_roofs(levels, {"L1": [_fig(100e9)], "L2": [_fig(120e9)],
                               "L3": [_fig(40e9), _fig(50e9)]}, 20e9)  # fmt: skip
    assert [(lv.name, lv.bytes_per_s, lv.capacity_bytes) for lv in got] == [
        ("L1", 120e9, 65536), ("L2", 120e9, 2**20), ("L3", 50e9, 32 * 2**20),
        ("DRAM", 20e9, None)]  # fmt: skip
    # an unmeasured L3 carries the L2's roof (an upper bound), marked as not measured
    got = level_roofs(levels, {"L1": [_fig(100e9)], "L2": [_fig(80e9)]}, 20e9)
    assert [(lv.bytes_per_s, lv.measured) for lv in got] == [
        (100e9, True), (80e9, True), (80e9, False), (20e9, True)]  # fmt: skip


def test_gpu_backend_without_a_gpu_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--backend cuda"):
        calibrate("cuda", quick=True)
    with pytest.raises(UsageError, match="unknown --backend"):
        calibrate("tpu")


def test_contention_probe_counts_other_processes() -> None:
    # a child process spinning ~0.6 s of CPU while we sleep: the probe's "others" share is at
    # least that child's CPU time / (wall x logical CPUs); other load can only add to it
    probe = ContentionProbe()
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    share = probe.other_share()
    wall = time.perf_counter() - t0
    child = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert child >= 0.6 and share is not None and share <= 1.0
    # 0.05: /proc/stat counts in 10 ms ticks
    assert share >= child / (wall * (os.cpu_count() or 1)) - 0.05


# --- the first run ------------------------------------------------------------------------


def test_first_run_calibration_refused_on_a_busy_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aaco.collectors.environment import capture_environment

    monkeypatch.setenv("AACO_CALIBRATION_DIR", str(tmp_path))
    here = capture_environment([], [])
    busy = [r for r in _recorded() if r["phase"] == "busy"] * 100

    def measure(env: dict[str, object]) -> Any:
        return calibrate("cpu", quick=True, env=env, reader=ProcStatReplay(busy))

    got = first_run_calibration(here, "cpu", measure=measure, this_env=here)
    assert got.ceilings is None and got.stored is None and got.seconds is not None
    assert got.note.startswith("no ceilings: the quick calibration was refused, other ")
    assert "run `aaco calibrate` on a quiet machine" in got.note
    assert list(tmp_path.iterdir()) == []


def test_first_run_calibration_only_for_this_machine_and_the_cpu(tmp_path: Path) -> None:
    here = {"cpu": {"model": "This CPU", "physical_cores": 2}, "memory": {"total_bytes": 2**34}}
    other = {"cpu": {"model": "Other CPU", "physical_cores": 64}, "memory": {"total_bytes": 2**40}}
    got = first_run_calibration(other, "cpu", this_env=here)
    assert got.ceilings is None and "ran on another machine" in got.note
    assert first_run_calibration(None, "cpu", this_env=here).ceilings is None
    got = first_run_calibration(here, "cuda", this_env=here)
    assert got.ceilings is None and got.note == "no ceilings: run `aaco calibrate --backend cuda`"


def test_auto_calibration_switch() -> None:
    from aaco.collectors.calibrate import auto_calibrate_enabled

    assert auto_calibrate_enabled({}) and auto_calibrate_enabled({"AACO_AUTO_CALIBRATE": "1"})
    for off in ("0", "false", "No", " off "):
        assert not auto_calibrate_enabled({"AACO_AUTO_CALIBRATE": off})


def test_calibration_in_a_child_process(tmp_path: Path) -> None:
    # the first run's calibration runs in its own process: a refusal comes back as the same
    # BusyError (one CPU hog per CPU, at the lowest priority, makes sure of it); nothing
    # of its arrays lands in this process
    from aaco.collectors.calibrate import measure_in_subprocess

    spin = "import os, time\nos.nice(19)\nt = time.time()\nwhile time.time() - t < 60: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
    try:
        with pytest.raises(BusyError, match="calibration refused") as exc:
            measure_in_subprocess("cpu", quick=True, env={"cpu": {"model": "x"}})
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    # a refusal means others took more than the busy threshold (10 %) of the CPU; how much
    # more depends on how the scheduler shares 2 CPUs between nice-19 hogs and the child
    # (28 % seen under a loaded test suite)
    assert exc.value.share is not None and exc.value.share > BUSY_SHARE
    assert exc.value.detail.startswith("other processes held ")
