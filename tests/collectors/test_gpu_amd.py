"""AmdSmiCollector against FakeAmdSmi (8x MI300X values from a recorded ``amd-smi metric
--csv``), and the ``amd-smi`` / ``rocm-smi`` JSON parsers on recorded outputs
(tests/collectors/fixtures/smi/, see its README)."""

from __future__ import annotations

import copy
import csv
import itertools
import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aaco.analysis.gpu import summarize_gpu
from aaco.collectors.base import COLLECTORS
from aaco.collectors.gpu import amd as amd_mod
from aaco.collectors.gpu.amd import (
    AmdSmiCollector,
    parse_amd_smi_metric,
    parse_rocm_smi,
    run_command,
)
from aaco.collectors.gpu.common import SourceUnavailable
from aaco.testing.fake_gpu import (
    FakeAmdSmi,
    FakeCli,
    amd_records_from_metric_csv,
    amd_smi_metric_json,
    write_broken_module,
)

FIXTURES = Path(__file__).parent / "fixtures" / "smi"
MIB = 1 << 20
MI300X_CSV = (FIXTURES / "metric-8xMI300X.csv").read_text()
XGMI_JSON = (FIXTURES / "xgmi-8xMI300X.json").read_text()
CSV_ROWS = list(csv.DictReader(MI300X_CSV.splitlines()))


def records(**kw: Any) -> Any:
    return amd_records_from_metric_csv(
        MI300X_CSV, name="AMD Instinct MI300X", xgmi_json=XGMI_JSON, **kw
    )


def run(
    am: Any = None, *, hz: float = 50.0, seconds: float = 0.3, pid: int | None = None, **kw: Any
) -> AmdSmiCollector:
    c = AmdSmiCollector(pid, hz=hz, amdsmi=am, **kw)
    with c:
        time.sleep(seconds)
    return c


def rows(c: AmdSmiCollector, device: int = 0) -> list[dict[str, Any]]:
    return [r for r in c.table().to_pylist() if r["device"] == device]


def assert_all(rs: list[dict[str, Any]], **expected: Any) -> None:
    assert rs
    for col, want in expected.items():
        got = {r[col] if not isinstance(r[col], list) else tuple(r[col]) for r in rs}
        want = tuple(want) if isinstance(want, list) else want
        assert got == {want}, f"{col}: {got} != {want}"


def xgmi_kb(gpu: int, key: str) -> int:
    doc = json.loads(XGMI_JSON)
    links = next(g for g in doc if g["gpu"] == gpu)["link_metrics"]["links"]
    return sum(link[key]["value"] for link in links if isinstance(link[key], dict))


# -- the amdsmi library ------------------------------------------------------------------


def test_mi300x_library_values_equal_the_recording() -> None:
    c = run(FakeAmdSmi(records()))
    assert c.info()["source"] == "amdsmi"
    assert c.info()["devices"] == 8
    for gpu in range(8):
        rec = CSV_ROWS[gpu]
        rs = rows(c, gpu)
        assert len(rs) >= 10
        gfx = [float(rec[f"gfx_{i}_clk"]) for i in range(8)]
        assert_all(
            rs,
            source="amdsmi",
            name="AMD Instinct MI300X",
            util_gpu_pct=float(rec["gfx_activity"]),
            util_mem_pct=float(rec["umc_activity"]),
            sm_clock_mhz=sum(gfx) / 8,  # one clock per XCD: their mean
            sm_clock_max_mhz=float(rec["gfx_0_max_clk"]),
            mem_clock_mhz=float(rec["mem_0_clk"]),
            mem_clock_max_mhz=float(rec["mem_0_max_clk"]),
            power_w=float(rec["socket_power"]),
            power_avg_w=None,
            power_limit_w=None,  # not in the recording
            temp_c=None,  # edge: N/A on MI300X
            temp_hotspot_c=float(rec["hotspot"]),
            temp_mem_c=float(rec["mem"]),
            mem_used_bytes=int(rec["used_vram"]) * MIB,
            mem_total_bytes=int(rec["total_vram"]) * MIB,
            pcie_tx_bytes_per_s=None,
            xgmi_read_bytes=xgmi_kb(gpu, "read") * 1024,
            xgmi_write_bytes=xgmi_kb(gpu, "write") * 1024,
            throttle_reasons=0,
            throttle_names=[],  # UNTHROTTLED
            energy_wrap_j=2**64 * 15.259 / 1e6,
            has_watched_process=None,
        )
        # the accumulator starts at the recorded total and rises at the recorded power
        # (plus what 133 W adds between the fake's creation and the first sample)
        assert rs[0]["energy_j"] == pytest.approx(float(rec["total_energy_consumption"]), abs=10.0)
        (t0, e0), (t1, e1) = (
            (rs[0]["ts_ns"], rs[0]["energy_j"]),
            (rs[-1]["ts_ns"], rs[-1]["energy_j"]),
        )
        assert (e1 - e0) / ((t1 - t0) / 1e9) == pytest.approx(float(rec["socket_power"]), rel=0.05)
    assert c.info()["unsupported"]["0"] == {"temp_edge": "not supported"}
    assert xgmi_kb(0, "read") == 7 and xgmi_kb(2, "read") == 4


def test_not_supported_is_asked_once_other_errors_are_counted() -> None:
    am = FakeAmdSmi(records()[:1], error_every={"amdsmi_get_power_info": (3, 7)})
    c = run(am)
    rs = rows(c)
    n = len(rs)
    # edge once (then off), hotspot and VRAM on every sample
    assert am.calls["amdsmi_get_temp_metric"] == 1 + 2 * n
    powers = [r["power_w"] for r in rs]
    assert powers.count(None) == n // 3
    assert c.info()["errors"] == {"power": n // 3}
    assert "AMDSMI status 7" in c.info()["error_examples"]["power"]
    assert am.shutdowns == 1


def test_energy_wrap_is_recorded_and_summed_across() -> None:
    am = FakeAmdSmi(records()[:1], energy_wrap_in_s=0.15)
    c = run(am, seconds=0.4)
    e = [r["energy_j"] for r in rows(c)]
    assert any(b < a for a, b in itertools.pairwise(e)), "the accumulator wrapped"
    s = summarize_gpu(c.table(), None, None)
    assert s is not None
    assert s["avg_power_w"] == pytest.approx(133.0, rel=0.05)


def test_legacy_energy_key() -> None:
    c = run(FakeAmdSmi(records()[:1], legacy_energy_key=True), seconds=0.1)
    assert rows(c)[0]["energy_j"] == pytest.approx(12119300.381, abs=10.0)


def test_violation_status_accumulators_and_flags() -> None:
    am = FakeAmdSmi(records()[:1], violation=(0.25, 0.1))
    c = run(am, seconds=0.6)
    rs = rows(c)
    assert rs[0]["violation_power_ns"] == 0  # counted from the first sample
    assert_all(rs, throttle_names=["power_cap", "sw_thermal"], throttle_reasons=0)
    s = summarize_gpu(c.table(), None, None)
    assert s is not None
    dev = s["devices"][0]
    # the fake's accumulators move in whole 1 ms ticks: a few % of rounding
    assert dev["violation_power_s"] / s["window_s"] == pytest.approx(0.25, abs=0.03)
    assert dev["violation_thermal_s"] / s["window_s"] == pytest.approx(0.1, abs=0.03)
    assert s["violation_share"] == pytest.approx(0.35, abs=0.05)


def test_violation_from_gpu_metrics_residencies_without_the_violation_call() -> None:
    c = run(FakeAmdSmi(records()[:1], residency=(0.5, 0.0)), seconds=0.6)
    s = summarize_gpu(c.table(), None, None)
    assert s is not None
    assert s["devices"][0]["violation_power_s"] / s["window_s"] == pytest.approx(0.5, abs=0.03)
    assert s["devices"][0]["violation_thermal_s"] == 0.0
    assert "violation_status" not in c.info()["unsupported"].get("0", {})


def test_amdsmi_7_throttle_flag() -> None:
    recs = records()[:1]
    recs[0].throttled = True
    c = run(FakeAmdSmi(recs, throttle_as_bool=True), seconds=0.1)
    assert_all(rows(c), throttle_names=["other"], throttle_reasons=None)
    c = run(FakeAmdSmi(recs), seconds=0.1)
    assert_all(rows(c), throttle_names=["other"], throttle_reasons=1)


def test_processes() -> None:
    c = run(FakeAmdSmi(records()[:2], pids={1: [os.getpid()]}), pid=os.getpid(), seconds=0.1)
    assert_all(rows(c, 0), has_watched_process=False)
    assert_all(rows(c, 1), has_watched_process=True)


def test_sampler_cost_at_10_hz() -> None:
    c = run(FakeAmdSmi(records()), hz=10.0, seconds=1.0)
    info = c.info()
    assert info["achieved_hz"] == pytest.approx(10.0, rel=0.15)
    assert 0 < info["cpu_share"] < 0.05


def _broken_amdsmi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: str) -> None:
    write_broken_module(tmp_path, "amdsmi", exc)
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_import_raising_oserror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _broken_amdsmi(
        tmp_path,
        monkeypatch,
        "OSError('libamd_smi.so: cannot open shared object file: No such file or directory')",
    )
    with pytest.raises(SourceUnavailable) as err:
        amd_mod.load_amdsmi()
    assert str(err.value) == (
        "amdsmi not importable (OSError('libamd_smi.so: cannot open shared object file: "
        "No such file or directory'))"
    )
    c = run(None, seconds=0.05, which=lambda tool: None)
    assert c.info()["unavailable"] == (
        "no AMD GPU telemetry source: amdsmi not importable (OSError('libamd_smi.so: cannot "
        "open shared object file: No such file or directory')), amd-smi/rocm-smi not on PATH"
    )
    assert c.table().num_rows == 0


def test_import_raising_keyerror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _broken_amdsmi(tmp_path, monkeypatch, "KeyError('ROCM_PATH')")
    with pytest.raises(SourceUnavailable, match=r"amdsmi not importable \(KeyError\("):
        amd_mod.load_amdsmi()


def test_init_failure_falls_through_to_the_commands() -> None:
    fake_cli = FakeCli({"metric": amd_smi_metric_json(MI300X_CSV, "gpu_data")})
    c = run(
        FakeAmdSmi(records(), init_error=34),
        hz=10,
        seconds=0.2,
        cli_runner=fake_cli,
        which=lambda tool: f"/opt/rocm/bin/{tool}",
    )
    info = c.info()
    assert info["source"] == "amd-smi"
    assert info["tried"]["amdsmi"].startswith("amdsmi init failed (")
    assert_all(rows(c, 3), source="amd-smi", power_w=float(CSV_ROWS[3]["socket_power"]))


def test_registry() -> None:
    assert COLLECTORS.get("amdsmi") is AmdSmiCollector
    c = COLLECTORS.get("amdsmi").for_process(99, 2.0)
    assert (c.pid, c.hz, c.table_name) == (99, 2.0, "gpu_telemetry")


# -- amd-smi metric --json ---------------------------------------------------------------


@pytest.mark.parametrize("shape", ["list", "gpu_data"])
def test_amd_smi_metric_json_both_shapes(shape: str) -> None:
    doc = json.loads(amd_smi_metric_json(MI300X_CSV, shape))
    assert isinstance(doc, list) if shape == "list" else list(doc) == ["gpu_data"]
    parsed = parse_amd_smi_metric(doc)
    assert [p["device"] for p in parsed] == list(range(8))
    for p, rec in zip(parsed, CSV_ROWS, strict=True):
        gfx = [float(rec[f"gfx_{i}_clk"]) for i in range(8)]
        assert p == {
            "device": int(rec["gpu"]),
            "util_gpu_pct": 0.0,
            "util_mem_pct": 0.0,
            "sm_clock_mhz": sum(gfx) / 8,
            "sm_clock_max_mhz": 2100.0,
            "mem_clock_mhz": 900.0,
            "mem_clock_max_mhz": 1300.0,
            "power_w": float(rec["socket_power"]),
            "power_avg_w": None,
            "power_limit_w": None,
            "temp_c": None,
            "temp_hotspot_c": float(rec["hotspot"]),
            "temp_mem_c": float(rec["mem"]),
            "energy_j": float(rec["total_energy_consumption"]),
            "mem_used_bytes": 283 * MIB,
            "mem_total_bytes": 196592 * MIB,
            "pcie_tx_bytes_per_s": None,
            "pcie_rx_bytes_per_s": None,
            "throttle_names": [],
        }
    assert parsed[1]["power_w"] == 139.0
    assert parsed[0]["sm_clock_mhz"] == pytest.approx(132.125)


def test_amd_smi_units_are_converted() -> None:
    # the leaf forms amd-smi has printed (synthetic values): bare, "value unit", dicts
    doc = [
        {
            "gpu": 2,
            "usage": {"gfx_activity": "87 %", "umc_activity": {"value": 41, "unit": "%"}},
            "power": {
                "socket_power": "N/A",
                "current_socket_power": {"value": 612, "unit": "W"},
                "average_socket_power": "598 W",
                "power_limit": {"value": 750000, "unit": "mW"},
                "throttle_status": "THROTTLED",
            },
            "clock": {"gfx": {"cur_clk": {"value": 1.5, "unit": "GHz"}, "max_clk": "2100 MHz"}},
            "energy": {"total_energy_consumption": {"value": 5000000, "unit": "uJ"}},
            "mem_usage": {"used_vram": {"value": 2, "unit": "GB"}, "total_vram": "N/A"},
            "pcie": {"current_bandwidth_sent": {"value": 3, "unit": "MB/s"}},
            "temperature": {"edge": {"value": 51, "unit": "C"}, "hotspot": "66 \u00b0C"},
        }
    ]
    (p,) = parse_amd_smi_metric(doc)
    assert p["util_gpu_pct"] == 87.0 and p["util_mem_pct"] == 41.0
    assert p["power_w"] == 612.0 and p["power_avg_w"] == 598.0 and p["power_limit_w"] == 750.0
    assert p["sm_clock_mhz"] == 1500.0 and p["sm_clock_max_mhz"] == 2100.0
    assert p["energy_j"] == 5.0
    assert p["mem_used_bytes"] == 2 << 30 and p["mem_total_bytes"] is None
    assert p["pcie_tx_bytes_per_s"] == 3 * MIB
    assert p["temp_c"] == 51.0 and p["temp_hotspot_c"] == 66.0
    assert p["throttle_names"] == ["other"]
    # an unknown unit is not guessed
    doc[0]["power"]["average_socket_power"] = {"value": 5, "unit": "hp"}
    assert parse_amd_smi_metric(doc)[0]["power_avg_w"] is None


def test_amd_smi_not_json_of_the_command() -> None:
    with pytest.raises(ValueError, match="not amd-smi JSON"):
        parse_amd_smi_metric({"card0": {}})


# -- rocm-smi --json ---------------------------------------------------------------------


def rocm(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def test_rocm_smi_571_mi100() -> None:
    parsed = parse_rocm_smi(rocm("mi100_rocm571.json"))
    assert [p["device"] for p in parsed] == [0, 1, 2, 3, 4, 5]
    assert parsed[0] == {
        "device": 0,
        "has_watched_process": None,
        "name": "Arcturus GL-XL [Instinct MI100]",  # "Card series"
        "util_gpu_pct": 0.0,
        "util_mem_pct": 0.0,  # "GPU memory use (%)"
        "sm_clock_mhz": 300.0,
        "mem_clock_mhz": 1200.0,
        "power_w": None,  # only the average in this release
        "power_avg_w": 39.0,
        "power_limit_w": 290.0,
        "temp_c": 31.0,
        "temp_hotspot_c": 34.0,
        "temp_mem_c": 30.0,
        "energy_j": None,
        "mem_used_bytes": 6782976,
        "mem_total_bytes": 34342961152,
    }
    assert parsed[1]["temp_mem_c"] == 38.0


def test_rocm_smi_602_mi100() -> None:
    parsed = parse_rocm_smi(rocm("mi100_rocm602.json"))
    assert [p["device"] for p in parsed] == [0, 1, 2, 3]
    assert parsed[0] == {
        "device": 0,
        "has_watched_process": None,
        "name": "Arcturus GL-XL [Instinct MI100]",
        "util_gpu_pct": 0.0,
        "util_mem_pct": 0.0,
        "sm_clock_mhz": 300.0,
        "mem_clock_mhz": 1200.0,
        "power_w": None,
        "power_avg_w": 36.0,
        "power_limit_w": 290.0,
        "temp_c": 53.0,
        "temp_hotspot_c": 55.0,
        "temp_mem_c": 53.0,
        "energy_j": None,
        "mem_used_bytes": 6750208,
        "mem_total_bytes": 34342961152,
    }
    assert (parsed[1]["temp_c"], parsed[1]["temp_hotspot_c"]) == (55.0, 58.0)


def test_rocm_smi_612_rx6700xt_renamed_keys() -> None:
    (p,) = parse_rocm_smi(rocm("rx6700xt_rocm612.json"))
    assert p == {
        "device": 0,
        "has_watched_process": None,
        "name": "Navi 22 [Radeon RX 6700/6700 XT / 6800M]",  # "Device Name" (6.1)
        "util_gpu_pct": 0.0,
        # "GPU Memory Read/Write Activity (%)", not "GPU Memory Allocated (VRAM%)" (12)
        "util_mem_pct": 0.0,
        "sm_clock_mhz": 0.0,
        "mem_clock_mhz": 96.0,
        "power_w": None,
        "power_avg_w": 6.0,
        "power_limit_w": 211.0,
        "temp_c": 45.0,
        "temp_hotspot_c": 47.0,
        "temp_mem_c": 46.0,
        "energy_j": None,
        "mem_used_bytes": 1572745216,
        "mem_total_bytes": 12868124672,
    }


def test_rocm_smi_keys_of_later_releases() -> None:
    # Synthetic: the recorded 6.1.2 card with the keys later rocm-smi prints for current
    # socket power and the energy counter (--showenergycounter), values made up here
    doc = copy.deepcopy(rocm("rx6700xt_rocm612.json"))
    card = doc["card0"]
    card["Current Socket Graphics Package Power (W)"] = "41.0"
    card["Energy counter"] = "8090612345"
    card["Accumulated Energy (uJ)"] = "123456789012.5"
    card["GPU Memory Read/Write Activity (%)"] = "17"
    (p,) = parse_rocm_smi(doc)
    assert p["power_w"] == 41.0
    assert p["power_avg_w"] == 6.0
    assert p["energy_j"] == pytest.approx(123456.7890125)
    assert p["util_mem_pct"] == 17.0


def test_rocm_smi_process_list() -> None:
    doc = rocm("mi100_rocm571.json")  # lists PID104225 (mlir-cpu-runner) on 6 GPUs
    assert {p["has_watched_process"] for p in parse_rocm_smi(doc, frozenset({104225}))} == {None}
    assert {p["has_watched_process"] for p in parse_rocm_smi(doc, frozenset({1}))} == {False}
    one = rocm("rx6700xt_rocm612.json")
    assert parse_rocm_smi(one, frozenset({42}))[0]["has_watched_process"] is False
    one["system"]["PID42"] = "python3, 1, 1048576, 0, 0"  # synthetic entry
    assert parse_rocm_smi(one, frozenset({42}))[0]["has_watched_process"] is True


def test_rocm_smi_not_an_object() -> None:
    with pytest.raises(ValueError, match="not rocm-smi JSON"):
        parse_rocm_smi([1, 2])


# -- the command-line sources ------------------------------------------------------------


def _no_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)


def test_amd_smi_cli_source_rate_limited_by_its_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_library(monkeypatch)
    static = {
        "gpu_data": [{"gpu": i, "asic": {"market_name": "AMD Instinct MI300X"}} for i in range(8)]
    }
    cli = FakeCli(
        {"metric": amd_smi_metric_json(MI300X_CSV, "list"), "static": json.dumps(static)},
        wall_s=0.02,
        cpu_s=0.015,
    )
    c = run(None, hz=10, seconds=1.0, cli_runner=cli, which=lambda t: f"/usr/bin/{t}")
    info = c.info()
    assert info["source"] == "amd-smi"
    assert info["command"] == ["amd-smi", "metric", "--json"]
    # a 20 ms run at most 10 % of the time: one run per 200 ms, not the 100 ms asked
    assert 3 <= info["samples"] <= 7
    assert info["achieved_hz"] < 6.0
    assert info["cli_run_s_mean"] == pytest.approx(0.02)
    # every metric run and the one names run at opening
    assert info["cli_cpu_s"] == pytest.approx(0.015 * (info["cli_runs"] + 1))
    assert info["device_names"] == ["AMD Instinct MI300X"] * 8
    rs = rows(c, 5)
    assert_all(
        rs,
        source="amd-smi",
        name="AMD Instinct MI300X",
        power_w=float(CSV_ROWS[5]["socket_power"]),
        temp_hotspot_c=float(CSV_ROWS[5]["hotspot"]),
        energy_j=float(CSV_ROWS[5]["total_energy_consumption"]),
        has_watched_process=None,
    )


def test_rocm_smi_cli_source_and_its_fallback_command(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_library(monkeypatch)
    cli = FakeCli({"-a": (FIXTURES / "mi100_rocm602.json").read_bytes()})
    present = {"rocm-smi": "/opt/rocm/bin/rocm-smi"}
    c = run(None, hz=20, seconds=0.2, cli_runner=cli, which=present.get, pid=os.getpid())
    info = c.info()
    assert info["source"] == "rocm-smi"
    assert info["tried"] == {"amdsmi": "amdsmi not installed", "amd-smi": "amd-smi not on PATH"}
    assert info["command"] == ["rocm-smi", "-a", "--json"]
    assert cli.calls[0][1] == "--showid"  # the flag list first
    assert_all(rows(c, 2), source="rocm-smi", power_avg_w=43.0, has_watched_process=False)


def test_a_command_failing_during_the_run_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_library(monkeypatch)
    outputs = {"--showid": (FIXTURES / "rx6700xt_rocm612.json").read_bytes()}
    cli = FakeCli(outputs)

    def flaky(argv: Any, timeout_s: float) -> Any:
        if len(cli.calls) >= 2:
            outputs["--showid"] = b"{ not json"
        return cli(argv, timeout_s)

    cli.outputs = outputs
    c = run(None, hz=50, seconds=0.3, cli_runner=flaky, which=lambda t: t, cli_max_duty=1.0)
    info = c.info()
    assert info["source"] == "rocm-smi"
    assert info["cli_failures"] >= 1
    assert info["failed_samples"] == info["cli_failures"]
    assert "JSONDecodeError" in info["cli_last_failure"]


def _script(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.mark.skipif(sys.platform == "win32", reason="shell scripts")
def test_real_command_found_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_library(monkeypatch)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cat = shutil.which("cat")
    assert cat is not None
    _script(bin_dir, "rocm-smi", f"exec '{cat}' '{FIXTURES / 'rx6700xt_rocm612.json'}'")
    monkeypatch.setenv("PATH", str(bin_dir))
    c = run(None, hz=10, seconds=0.1)
    info = c.info()
    assert info["source"] == "rocm-smi"
    assert info["cli_cpu_s"] is not None
    assert_all(rows(c), name="Navi 22 [Radeon RX 6700/6700 XT / 6800M]", power_avg_w=6.0)


@pytest.mark.skipif(sys.platform == "win32", reason="shell scripts")
def test_run_command(tmp_path: Path) -> None:
    _script(tmp_path, "ok", "echo '{\"a\": 1}'")
    _script(tmp_path, "fails", "echo oops >&2; exit 3")
    _script(tmp_path, "hangs", "exec sleep 30")
    r = run_command([str(tmp_path / "ok")], 5.0)
    assert (r.stdout, r.returncode) == (b'{"a": 1}\n', 0)
    assert r.cpu_s is not None and r.cpu_s >= 0
    assert r.wall_s > 0
    assert run_command([str(tmp_path / "fails")], 5.0).returncode == 3
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError, match=r"did not finish within 0\.3 s"):
        run_command([str(tmp_path / "hangs")], 0.3)
    assert time.perf_counter() - t0 < 5.0
