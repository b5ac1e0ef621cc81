"""The machine's sections in every renderer: GPU telemetry, scheduler evidence and the
measurement capsule in the terminal, HTML and JSON reports, GPU and scheduler tracks on
the HTML timeline, and counter tracks in the Perfetto trace.

Bundles are made with :func:`aaco.testing.make_bundle` (100 iterations of 10 ms from host
time 1 s) and the machine's tables written by hand with the schema's ``from_rows``, sampled
every 100 ms, so every figure and every counter value is known by construction. The
summaries (``gpu``, ``sched``) are written by hand as the analyses' contract describes them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.report.test_perfetto import validate

from aaco.analysis.sched import contention_evidence
from aaco.report import machine
from aaco.report.html import HtmlRenderer
from aaco.report.json import JsonRenderer
from aaco.report.model import build_report
from aaco.report.perfetto import export_perfetto
from aaco.report.terminal import TerminalRenderer, render_report
from aaco.session.bundle import Session, write_table
from aaco.session.paths import INFERENCE_SUMMARY_FILE
from aaco.session.schema import GPU_TELEMETRY, SCHED_SYSTEM, SCHED_THREADS
from aaco.testing import make_bundle

T0 = 1_000_000_000  # host time of the first iteration (make_bundle)
STEP = 100_000_000  # 100 ms between samples
SAMPLES = 11  # 0 .. 1 s: the iterations' second
THROTTLED = {3: ["power_cap"], 4: ["power_cap"], 5: ["power_cap"], 6: ["sw_thermal", "power_cap"]}

GPU: dict[str, Any] = {
    "source": "nvml",
    "scope": "window",
    "window_s": 1.0,
    "devices": [
        {
            "device": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "used": True,
            "samples": 11,
            "util_gpu_pct_mean": 85.0,
            "util_mem_pct_mean": 40.0,
            "sm_clock_mhz_mean": 1700.0,
            "sm_clock_mhz_min": 1400.0,
            "sm_clock_mhz_max": 1980.0,
            "sm_clock_max_mhz": 1980.0,
            "sm_clock_ratio": 0.8586,
            "mem_clock_mhz_mean": 2619.0,
            "mem_clock_max_mhz": 2619.0,
            "power_w_mean": 250.0,
            "power_w_max": 320.0,
            "power_limit_w": 700.0,
            "energy_j": 250.0,
            "avg_power_w": 250.0,
            "temp_c_max": 65.0,
            "temp_hotspot_c_max": None,
            "temp_mem_c_max": 70.0,
            "mem_used_bytes_max": 12 * 2**30,
            "pcie_tx_bytes_per_s_mean": None,
            "pcie_rx_bytes_per_s_mean": None,
            "xgmi_read_bytes": None,
            "xgmi_write_bytes": None,
            "throttle_share": {"power_cap": 0.4, "sw_thermal": 0.1},
            "throttled_share": 0.4,
            "violation_power_s": 0.25,
            "violation_thermal_s": 0.0,
            "violation_share": 0.25,
            "gpm_sm_activity_pct_mean": 70.0,
            "gpm_sm_occupancy_pct_mean": 35.0,
            "gpm_tensor_activity_pct_mean": None,
            "gpm_dram_bw_util_pct_mean": 45.0,
        },
        {"device": 1, "name": "NVIDIA H100 80GB HBM3", "used": False, "samples": 11},
    ],
    "energy_j": 250.0,
    "avg_power_w": 250.0,
    "joules_per_inference": 2.5,
    "inferences_per_joule": 0.4,
    "clock_drop": 0.14,
    "clock_ratio": 0.8586,
    "throttled_share": 0.4,
    "violation_share": 0.25,
    "unknown": ["hotspot temperature (nvml does not report it)"],
}

SCHED: dict[str, Any] = {
    "scope": "window",
    "window_s": 1.0,
    "threads": 2,
    "run_s": 0.49,
    "wait_s": 0.30,
    "wait_share": 0.38,
    "main_wait_share_of_wall": 0.2,
    "max_thread_wait_share_of_wall": 0.2,
    "timeslices_per_s": 900.0,
    "involuntary_switches_per_s": 120.0,
    "psi": {
        "cpu_some_pct": 5.0,
        "cpu_full_pct": None,
        "memory_some_pct": 0.0,
        "memory_full_pct": 0.0,
        "io_some_pct": 0.25,
        "io_full_pct": 0.0,
    },
    "affinity": [0, 1, 2, 3, 6],
    "affinity_busy_pct_mean": 97.0,
    "other_cpu_pct_mean": 150.0,
    "procs_running_max": 12,
    "top_threads": [
        {"tid": 100, "comm": "python", "run_s": 0.3, "wait_s": 0.2, "wait_share": 0.4,
         "involuntary": 80},
        {"tid": 101, "comm": "ort-worker", "run_s": 0.19, "wait_s": 0.1, "wait_share": 0.345,
         "involuntary": 40},
    ],
}  # fmt: skip

QUIET: dict[str, Any] = {
    **SCHED,
    "wait_s": 0.006,
    "wait_share": 0.012,
    "main_wait_share_of_wall": 0.008,
    "involuntary_switches_per_s": 15.0,
    "psi": {**SCHED["psi"], "cpu_some_pct": 0.1},
    "other_cpu_pct_mean": 5.0,
}

CAPSULE: dict[str, Any] = {
    "cpus": [2, 3, 4, 5],
    "threads": 4,
    "checks": [
        {"name": "cpu_governor", "state": "ok", "value": "performance", "fix": None},
        {"name": "turbo", "state": "warn", "value": "on", "fix": "echo 1 > no_turbo"},
    ],
    "sentinel": {
        "points": {
            "before": {"median_ns": 1_234_000, "spread": 0.01},
            "between": {"median_ns": 1_240_000, "spread": 0.01},
            "after": {"median_ns": 1_260_000, "spread": 0.01},
        },
        "drift_pct": 2.1,
        "speed_changed": True,
    },
}


def _gpu_rows() -> list[dict[str, Any]]:
    rows = []
    for dev in (0, 1):
        for k in range(SAMPLES):
            rows.append(
                {
                    "ts_ns": T0 + k * STEP,
                    "device": dev,
                    "source": "nvml",
                    "name": "NVIDIA H100 80GB HBM3",
                    "has_watched_process": dev == 0,
                    "util_gpu_pct": 80.0 + k,
                    "util_mem_pct": 40.0,
                    "sm_clock_mhz": 1980.0 - 50 * k,
                    "sm_clock_max_mhz": 1980.0,
                    "mem_clock_mhz": 2619.0,
                    "mem_clock_max_mhz": 2619.0,
                    "power_w": 250.0 + k,
                    "power_limit_w": 700.0,
                    # 250 W for 100 ms per sample, on a counter far from 0
                    "energy_j": 1_000_000.0 + 25.0 * k,
                    "temp_c": 60.0 + k / 2,
                    "throttle_names": THROTTLED.get(k, []) if dev == 0 else [],
                }
            )
    return rows


def _thread_rows() -> list[dict[str, Any]]:
    # main thread waits 20 ms of every 100 ms, the worker 10 ms: 30 % of one CPU together
    return [
        {"ts_ns": T0 + k * STEP, "pid": 7, "tid": tid, "comm": comm, "run_ns": k * run,
         "wait_ns": k * wait, "timeslices": 10 * k, "ctx_voluntary": k, "ctx_involuntary": k}
        for k in range(SAMPLES)
        for tid, comm, run, wait in ((100, "python", 60_000_000, 20_000_000),
                                     (101, "ort-worker", 40_000_000, 10_000_000))
    ]  # fmt: skip


def _system_rows() -> list[dict[str, Any]]:
    # PSI cpu some: 5 ms stalled per 100 ms = 5 %
    return [
        {"ts_ns": T0 + k * STEP, "psi_cpu_some_us": 1_000 + 5_000 * k, "procs_running": 3,
         "affinity": [0, 1, 2, 3, 6], "affinity_busy_pct": None if k == 0 else 97.0,
         "other_cpu_pct": None if k == 0 else 150.0}
        for k in range(SAMPLES)
    ]  # fmt: skip


def _bundle(
    root: Path,
    gpu: dict[str, Any] | None = GPU,
    sched: dict[str, Any] | None = SCHED,
    capsule: dict[str, Any] | None = CAPSULE,
    tables: bool = True,
) -> Session:
    s = make_bundle(root, [10.0] * 100)
    summary = json.loads((s.path / INFERENCE_SUMMARY_FILE).read_text())
    summary.update(gpu=gpu, sched=sched)
    (s.path / INFERENCE_SUMMARY_FILE).write_text(json.dumps(summary))
    if capsule is not None:
        meta = json.loads((s.path / "session.json").read_text())
        meta["capsule"] = capsule
        (s.path / "session.json").write_text(json.dumps(meta))
    if tables:
        write_table(s.path / GPU_TELEMETRY.path, GPU_TELEMETRY.from_rows(_gpu_rows()))
        write_table(s.path / SCHED_THREADS.path, SCHED_THREADS.from_rows(_thread_rows()))
        write_table(s.path / SCHED_SYSTEM.path, SCHED_SYSTEM.from_rows(_system_rows()))
    return Session.load(s.path)


def _evidence(summary: dict[str, Any]) -> str | None:
    return contention_evidence(summary)


def _terminal(s: Session) -> str:
    return TerminalRenderer(width=200).render(s)


# -- terminal -----------------------------------------------------------------------------


def test_terminal_shows_gpu_scheduler_and_capsule(tmp_path: Path) -> None:
    text = _terminal(_bundle(tmp_path))
    assert (
        "GPU        nvml, measured phase, 1 s: energy 250.0 J (average 250.0 W), "
        "2.5 J/inference, 0.4 inferences/J; SM clock at 85.9% of max, throttled 40.0% of "
        "the window" in text
    )
    assert "GPU 0      NVIDIA H100 80GB HBM3, 11 samples" in text
    assert "GPU busy 85.0% mean, memory controller 40.0%" in text
    assert (
        "SM mean 1700 MHz (min 1400, max 1980) of 1980 MHz max: 85.9% of max; memory "
        "2619 MHz of 2619 MHz" in text
    )
    assert "mean 250.0 W, max 320.0 W, limit 700 W; energy 250.0 J (average 250.0 W)" in text
    assert "max 65 °C, memory 70 °C" in text and "hotspot" not in text.split("unknown")[0]
    assert "used max 12.0 GiB" in text and "PCIe" not in text and "XGMI" not in text
    assert (
        "power_cap 40.0%, sw_thermal 10.0% of the window (throttled 40.0%); held down by "
        "power 0.25 s, thermal 0 s (25.0% of the window)" in text
    )
    assert "SM activity 70.0%, SM occupancy 35.0%, tensor activity unknown" in text
    assert "GPU 1 not used by the worker" in text
    assert "  unknown  hotspot temperature (nvml does not report it)" in text
    # contended: the analysis's sentence, the figures and the most-waiting threads
    evidence = _evidence(SCHED)
    assert evidence is not None and f"scheduler  {evidence}" in text
    assert "38.0% of runnable time (run 0.49 s, wait 0.3 s over 2 threads" in text
    assert "main thread 20.0% of wall" in text
    assert "120 involuntary switches/s, 900 timeslices/s" in text
    assert "cpu some 5.00%, full unknown; memory some 0.00%, full 0.00%; io some 0.25%" in text
    assert "worker's CPUs 0-3,6 (5): busy 97.0%, other tasks 150.0% of one CPU" in text
    assert "Threads by run-queue wait" in text and "ort-worker" in text
    # the capsule: pinned CPUs, the sentinel's drift, the checks that are not ok
    assert (
        "capsule    pinned CPUs 2-5, 4 threads; sentinel drift +2.1%, speed CHANGED (median "
        "before 1.234 ms, between 1.24 ms, after 1.26 ms)" in text
    )
    assert "check    turbo warn: on; fix: echo 1 > no_turbo" in text
    assert "cpu_governor" not in text


def test_quiet_scheduler_is_one_line(tmp_path: Path) -> None:
    line = (
        "worker waited 1.2% of its runnable time (main thread 0.8% of wall), 15 involuntary "
        "switches/s, PSI cpu some 0.10%; other tasks on CPUs 0-3,6 5.0% of one CPU"
    )
    assert machine.sched_rows(QUIET, contention_evidence(QUIET)) == [machine.Row("scheduler", line)]
    text = _terminal(_bundle(tmp_path, sched=QUIET, capsule=None))
    assert f"scheduler  {line}" in text
    assert "Threads by run-queue wait" not in text and "  waiting" not in text
    assert "capsule" not in text


def _figures_of_zero(text: str) -> list[str]:
    return re.findall(r"(?<![\d.])0(?:\.0+)?(?: ?(?:%|J|W|MHz|°C|s|GiB|B)\b)", text)


def test_null_figures_read_unknown_never_zero(tmp_path: Path) -> None:
    nulls = {k: None for k in GPU if k not in ("source", "scope", "devices", "unknown")}
    device = {k: None for k in GPU["devices"][0]} | {"device": 0, "samples": 3}
    gpu = {**nulls, "source": "amd-smi", "scope": "run", "devices": [device], "unknown": []}
    sched = {k: None for k in SCHED} | {"scope": "window"}
    capsule: dict[str, Any] = {"cpus": None, "sentinel": {"points": {}, "drift_pct": None}}
    s = _bundle(tmp_path, gpu=gpu, sched=sched, capsule=capsule, tables=False)
    text = _terminal(s)
    section = text[text.index("GPU        amd-smi") :]
    assert _figures_of_zero(section) == []
    assert "energy unknown (average unknown), unknown, unknown; SM clock at unknown" in section
    assert "GPU 0      name unknown, 3 samples, use unknown" in section
    assert "GPU busy unknown mean, memory controller unknown" in section
    assert "SM mean unknown (min unknown, max unknown) of unknown max" in section
    assert "  throttle unknown" in section and "GPM" not in section
    assert "worker waited unknown of its runnable time (main thread unknown of wall)" in section
    assert "PSI cpu some unknown (no /proc/pressure); other tasks on its CPUs unknown" in section
    assert "pinned CPUs unknown; sentinel drift unknown, speed change unknown" in section
    html = HtmlRenderer().render(s)
    block = html[html.index('<section id="machine">') : html.index('<section id="timeline">')]
    assert _figures_of_zero(re.sub(r"<[^>]+>", " ", block)) == []
    assert "energy unknown" in block


def test_a_gpu_that_never_throttled_says_none(tmp_path: Path) -> None:
    dev = {**GPU["devices"][0], "throttle_share": {}, "throttled_share": 0.0}
    rows = machine.gpu_rows({**GPU, "devices": [dev]})
    assert machine.Row("  throttle", "none; held down by power 0.25 s, thermal 0 s (25.0% "
                       "of the window)", warn=True) in rows  # fmt: skip
    dev = {k: v for k, v in dev.items() if not k.startswith("violation")}
    assert machine.Row("  throttle", "none") in machine.gpu_rows({**GPU, "devices": [dev]})


def test_without_the_machine_keys_the_reports_are_unchanged(tmp_path: Path) -> None:
    s = make_bundle(tmp_path, [10.0] * 100)
    assert machine.machine_keys(s) == {}
    assert _terminal(s) == render_report(build_report(s), width=200)
    assert json.loads(JsonRenderer().render(s)) == json.loads(
        json.dumps(build_report(s), allow_nan=False)
    )
    html = HtmlRenderer().render(s)
    assert 'id="machine"' not in html and "timeline-gpu" not in html
    assert "timeline-sched" not in html
    trace = validate(export_perfetto(s))
    assert not [n for n in trace.process_names.values() if "telemetry" in n or "scheduler" in n]


# -- JSON ---------------------------------------------------------------------------------


def test_json_passes_the_summaries_through(tmp_path: Path) -> None:
    doc = json.loads(JsonRenderer().render(_bundle(tmp_path)))
    assert doc["gpu"] == GPU and doc["sched"] == SCHED and doc["capsule"] == CAPSULE
    assert doc["gpu"]["energy_j"] == 250.0 and doc["gpu"]["joules_per_inference"] == 2.5
    # a collector that gathered nothing: null, not absent
    doc = json.loads(JsonRenderer().render(_bundle(tmp_path / "n", gpu=None, capsule=None)))
    assert doc["gpu"] is None and "capsule" not in doc


# -- HTML ---------------------------------------------------------------------------------


def test_html_sections_and_timeline_tracks(tmp_path: Path) -> None:
    html = HtmlRenderer().render(_bundle(tmp_path))
    assert '<a href="#machine">' in html
    block = html[html.index('<section id="machine">') : html.index('<section id="timeline">')]
    assert "energy 250.0 J (average 250.0 W), 2.5 J/inference, 0.4 inferences/J" in block
    assert "power_cap 40.0%, sw_thermal 10.0% of the window" in block
    assert "38.0% of runnable time" in block and 'id="top-threads"' in block
    assert "pinned CPUs 2-5" in block and "turbo warn" in block
    ids = re.findall(r'<svg id="([^"]+)"', html)
    for chart in ("sm-clock", "power", "util"):
        assert f"timeline-gpu0-{chart}" in ids
        assert f"timeline-gpu1-{chart}" not in ids  # not the worker's device
    assert "timeline-sched" in ids
    aligned = re.findall(r'<svg id="([^"]+)"[^>]*data-align="timeline"', html)
    assert {"timeline-latency", "timeline-gpu0-sm-clock", "timeline-sched"} <= set(aligned)
    # throttled periods are shaded on the GPU charts, their reasons on hover
    sm = html[html.index('<svg id="timeline-gpu0-sm-clock"') :].split("</svg>", 1)[0]
    assert re.findall(r'<rect class="shade"[^>]*><title>([^<]*)</title>', sm) == [
        "GPU 0 clocks throttled: power_cap",
        "GPU 0 clocks throttled: power_cap, sw_thermal",
    ]
    assert 'data-name="GPU 0 SM clock max"' in sm
    sched = html[html.index('<svg id="timeline-sched"') :].split("</svg>", 1)[0]
    assert 'data-name="worker run-queue wait" data-unit="% of one CPU"' in sched
    assert 'data-name="other tasks on the worker&#x27;s CPUs"' in sched
    assert "not sampled in this bundle" not in html


def _rounded(samples: list[tuple[int, float]]) -> list[tuple[int, float]]:
    return [(t, round(v, 6)) for t, v in samples]


def test_series_known_by_construction(tmp_path: Path) -> None:
    s = _bundle(tmp_path)
    wait = machine.worker_wait_series(s.table("sched_threads"))
    assert _rounded(wait) == [(T0 + k * STEP, 30.0) for k in range(1, SAMPLES)]
    psi = machine.counter_rate_series(s.table("sched_system"), "psi_cpu_some_us", 1e5)
    assert _rounded(psi) == [(T0 + k * STEP, 5.0) for k in range(1, SAMPLES)]
    dev0 = machine.used_devices(s.table("gpu_telemetry"))
    assert list(dev0) == [0]
    assert machine.throttle_periods(dev0[0]) == [
        (T0 + 3 * STEP, T0 + 6 * STEP, "power_cap"),
        (T0 + 6 * STEP, T0 + 7 * STEP, "power_cap, sw_thermal"),
    ]
    assert machine.cpu_list([6, 0, 1, 2, 3, 9]) == "0-3,6,9"


def test_energy_counter_is_unwrapped() -> None:
    rows = [
        {"ts_ns": k, "device": 0, "source": "amdsmi", "energy_j": e, "energy_wrap_j": 100.0}
        for k, e in enumerate([90.0, 95.0, 5.0, None, 15.0])
    ]
    t = GPU_TELEMETRY.from_rows(rows)
    assert machine.energy_series(t) == [(0, 0.0), (1, 5.0), (2, 15.0), (4, 25.0)]


# -- Perfetto -----------------------------------------------------------------------------


def test_perfetto_counter_tracks(tmp_path: Path) -> None:
    trace = validate(export_perfetto(_bundle(tmp_path)))
    names = {pid: n for pid, n in trace.process_names.items()}
    gpu0 = next(p for p, n in names.items() if n.startswith("GPU 0 telemetry"))
    sched = next(p for p, n in names.items() if n.startswith("scheduler"))
    iters = next(p for p, n in names.items() if n.startswith("aaco run"))
    # one clock: the iterations and the samples share the host clock, trace 0 = T0
    for pid in (gpu0, sched, iters):
        assert names[pid].endswith("[host monotonic clock]")
    first = min(s.start for s in trace.slices if s.pid == iters)
    assert first == 0

    def values(pid: int, name: str) -> list[tuple[int, float]]:
        return [(ts, next(iter(a.values()))) for ts, a in trace.counters[(pid, name)]]

    assert values(gpu0, "SM clock") == [(k * STEP, 1980.0 - 50 * k) for k in range(SAMPLES)]
    assert values(gpu0, "power") == [(k * STEP, 250.0 + k) for k in range(SAMPLES)]
    assert values(gpu0, "GPU busy")[2] == (2 * STEP, 82.0)
    assert values(gpu0, "temperature")[1] == (STEP, 60.5)
    assert values(gpu0, "energy since first sample") == [
        (k * STEP, 25.0 * k) for k in range(SAMPLES)
    ]
    assert trace.counters[(gpu0, "energy since first sample")][0][1] == {"J": 0.0}
    throttled = [(s.name, s.start, s.end) for s in trace.slices if s.pid == gpu0]
    assert throttled == [
        ("power_cap", 3 * STEP, 6 * STEP),
        ("power_cap, sw_thermal", 6 * STEP, 7 * STEP),
    ]
    # per thread: ms of run-queue wait per s; PSI cpu some in %; other tasks' CPU
    assert _rounded(values(sched, "run-queue wait python [100]")) == [
        (k * STEP, 200.0) for k in range(1, SAMPLES)
    ]
    assert _rounded(values(sched, "run-queue wait ort-worker [101]"))[0] == (STEP, 100.0)
    assert _rounded(values(sched, "PSI cpu some")) == [(k * STEP, 5.0) for k in range(1, SAMPLES)]
    assert values(sched, "other tasks on the worker's CPUs")[0] == (STEP, 150.0)
    # the unused device is drawn too (its telemetry is the machine's), as its own process
    assert any(n.startswith("GPU 1 telemetry") for n in names.values())
