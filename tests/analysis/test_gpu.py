"""summarize_gpu over hand-built gpu_telemetry tables whose answers are known by construction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from aaco.analysis.gpu import summarize_gpu
from aaco.session.schema import GPU_TELEMETRY

S = 1_000_000_000  # ns per second


def table(rows: list[dict[str, Any]]) -> pa.Table:
    base = {"source": "nvml", "name": "Fake GPU"}
    return GPU_TELEMETRY.from_rows([{**base, **r} for r in rows])


def ramp(
    energy: Callable[[float], float | None],
    *,
    n: int = 51,
    step_s: float = 0.1,
    device: int = 0,
    **extra: Any,
) -> list[dict[str, Any]]:
    """Rows every ``step_s`` from t = 0 whose energy counter reads ``energy(t)``."""
    rows = []
    for i in range(n):
        t = i * step_s
        rows.append({"ts_ns": round(t * S), "device": device, "energy_j": energy(t), **extra})
    return rows


def test_empty_table_is_none() -> None:
    assert summarize_gpu(GPU_TELEMETRY.empty(), None, None) is None
    assert summarize_gpu(GPU_TELEMETRY.empty(), (0, S), 10) is None


def test_counter_rising_100_j_per_s_gives_250_j_over_2_5_s() -> None:
    t = table(ramp(lambda t: 5000.0 + 100.0 * t))
    s = summarize_gpu(t, (round(1.23 * S), round(3.73 * S)), 500)
    assert s is not None
    assert s["scope"] == "window"
    assert s["window_s"] == pytest.approx(2.5)
    dev = s["devices"][0]
    assert dev["energy_j"] == pytest.approx(250.0)
    assert dev["avg_power_w"] == pytest.approx(100.0)
    assert dev["energy_scope"] == "window"
    assert dev["energy_span_s"] == pytest.approx(2.5)
    assert s["energy_j"] == pytest.approx(250.0)
    assert s["avg_power_w"] == pytest.approx(100.0)
    assert s["energy_scope"] == "window"
    assert s["joules_per_inference"] == pytest.approx(0.5)
    assert s["inferences_per_joule"] == pytest.approx(2.0)


def test_a_wrap_of_known_width_is_added_back() -> None:
    # the counter holds 1200 J and wraps to 0: it passes 1200 at t = 2 s
    t = table(ramp(lambda t: (1000.0 + 100.0 * t) % 1200.0, energy_wrap_j=1200.0))
    assert t.column("energy_j").to_pylist()[25] < t.column("energy_j").to_pylist()[15]
    s = summarize_gpu(t, (round(1.23 * S), round(3.73 * S)), None)
    assert s is not None
    assert s["energy_j"] == pytest.approx(250.0)
    assert s["avg_power_w"] == pytest.approx(100.0)
    assert s["joules_per_inference"] is None
    assert any("inferences" in u for u in s["unknown"])


def test_a_decrease_of_unknown_width_makes_the_energy_unknown() -> None:
    t = table(ramp(lambda t: (1000.0 + 100.0 * t) % 1200.0))
    s = summarize_gpu(t, (round(1.23 * S), round(3.73 * S)), 100)
    assert s is not None
    dev = s["devices"][0]
    assert dev["energy_j"] is None
    assert dev["avg_power_w"] is None
    assert "wrap width is unknown" in dev["energy_unknown"]
    assert s["energy_j"] is None
    assert s["avg_power_w"] is None
    assert s["joules_per_inference"] is None
    assert any("energy_j" in u and "wrap width is unknown" in u for u in s["unknown"])


def test_a_decrease_outside_the_window_does_not_matter() -> None:
    # the wrap happens at t = 2 s; a window over [2.5, 4.5] s never crosses it
    t = table(ramp(lambda t: (1000.0 + 100.0 * t) % 1200.0))
    s = summarize_gpu(t, (round(2.55 * S), round(4.55 * S)), None)
    assert s is not None
    assert s["energy_j"] == pytest.approx(200.0)


def test_window_ends_are_interpolated_between_bracketing_readings() -> None:
    # readings at 0, 1, 2, 3 s: 0, 10, 40, 100 J (rates 10, 30, 60 W)
    values = {0: 0.0, 1: 10.0, 2: 40.0, 3: 100.0}
    t = table([{"ts_ns": k * S, "device": 0, "energy_j": v} for k, v in values.items()])
    s = summarize_gpu(t, (S // 2, round(2.25 * S)), None)
    assert s is not None
    # at 0.5 s: 5 J; at 2.25 s: 40 + 60 * 0.25 = 55 J
    assert s["energy_j"] == pytest.approx(50.0)
    assert s["avg_power_w"] == pytest.approx(50.0 / 1.75)
    assert s["devices"][0]["energy_scope"] == "window"


def test_a_window_not_bracketed_uses_the_readings_inside_and_says_so() -> None:
    t = table(ramp(lambda t: 100.0 * t))  # readings from 0 to 5 s
    s = summarize_gpu(t, (-S, 10 * S), 1100)
    assert s is not None
    dev = s["devices"][0]
    assert dev["energy_scope"] == "samples_inside"
    assert dev["energy_span_s"] == pytest.approx(5.0)
    assert dev["energy_j"] == pytest.approx(500.0)
    assert dev["avg_power_w"] == pytest.approx(100.0)
    assert s["energy_scope"] == "samples_inside"
    assert s["window_s"] == pytest.approx(11.0)
    # the measured average power over the whole 11 s window: 1100 J for 1100 inferences
    assert s["joules_per_inference"] == pytest.approx(1.0)


def test_fewer_than_two_readings_in_the_window_is_unknown() -> None:
    t = table(ramp(lambda t: 100.0 * t))
    s = summarize_gpu(t, (6 * S, 7 * S), None)
    assert s is not None
    assert s["devices"][0]["samples"] == 0
    assert s["energy_j"] is None
    assert any("fewer than two readings inside the window" in u for u in s["unknown"])


def test_run_scope_covers_first_to_last_sample() -> None:
    t = table(ramp(lambda t: 7.0 + 40.0 * t, n=21))  # 0 to 2 s
    s = summarize_gpu(t, None, 80)
    assert s is not None
    assert s["scope"] == "run"
    assert s["window_s"] == pytest.approx(2.0)
    assert s["energy_j"] == pytest.approx(80.0)
    assert s["energy_scope"] == "run"
    assert s["devices"][0]["samples"] == 21
    assert s["joules_per_inference"] == pytest.approx(1.0)


def test_null_readings_are_skipped() -> None:
    rows = ramp(lambda t: 100.0 * t)
    for i in range(0, len(rows), 3):
        rows[i]["energy_j"] = None
    s = summarize_gpu(table(rows), (round(1.23 * S), round(3.73 * S)), None)
    assert s is not None
    assert s["energy_j"] == pytest.approx(250.0)


def test_throttle_shares() -> None:
    names = [["power_cap"]] * 3 + [["power_cap", "sw_thermal"]] * 2 + [[]] * 5
    rows = [{"ts_ns": i * S, "device": 0, "throttle_names": n} for i, n in enumerate(names)]
    rows.append({"ts_ns": 10 * S, "device": 0, "throttle_names": None})  # not counted
    s = summarize_gpu(table(rows), None, None)
    assert s is not None
    dev = s["devices"][0]
    assert dev["throttle_share"] == {
        "power_cap": pytest.approx(0.5),
        "sw_thermal": pytest.approx(0.2),
    }
    assert dev["throttled_share"] == pytest.approx(0.5)
    assert s["throttled_share"] == pytest.approx(0.5)


def test_no_throttle_reasons_reported() -> None:
    s = summarize_gpu(table(ramp(lambda t: t)), None, None)
    assert s is not None
    assert s["devices"][0]["throttle_share"] == {}
    assert s["throttled_share"] is None
    assert any(u.startswith("throttled_share") for u in s["unknown"])


def test_violation_counters_and_share() -> None:
    # power-limited a quarter of the time, thermally limited a tenth
    rows = [
        {
            "ts_ns": i * S // 10,
            "device": 0,
            "violation_power_ns": 10**12 + i * S // 40,
            "violation_thermal_ns": i * S // 100,
        }
        for i in range(51)
    ]
    s = summarize_gpu(table(rows), (S, 3 * S), None)
    assert s is not None
    dev = s["devices"][0]
    assert dev["violation_power_s"] == pytest.approx(0.5)
    assert dev["violation_thermal_s"] == pytest.approx(0.2)
    assert dev["violation_share"] == pytest.approx(0.35)
    assert s["violation_share"] == pytest.approx(0.35)


def test_gpm_and_other_means_and_maxima() -> None:
    rows = [
        {
            "ts_ns": i * S,
            "device": 0,
            "gpm_sm_activity_pct": [None, 40.0, 60.0, 80.0][i],
            "gpm_tensor_activity_pct": [None, 10.0, 20.0, 30.0][i],
            "util_gpu_pct": [50.0, 70.0, 90.0, 100.0][i],
            "temp_c": [50.0, 61.0, 58.0, 55.0][i],
            "mem_used_bytes": [1, 5, 3, 2][i] * 2**30,
            "power_w": [100.0, 300.0, 200.0, 150.0][i],
            "power_limit_w": 400.0,
        }
        for i in range(4)
    ]
    s = summarize_gpu(table(rows), None, None)
    assert s is not None
    dev = s["devices"][0]
    assert dev["gpm_sm_activity_pct_mean"] == pytest.approx(60.0)
    assert dev["gpm_tensor_activity_pct_mean"] == pytest.approx(20.0)
    assert dev["gpm_sm_occupancy_pct_mean"] is None
    assert dev["util_gpu_pct_mean"] == pytest.approx(77.5)
    assert dev["temp_c_max"] == 61.0
    assert dev["mem_used_bytes_max"] == 5 * 2**30
    assert dev["power_w_mean"] == pytest.approx(187.5)
    assert dev["power_w_max"] == 300.0
    assert dev["power_limit_w"] == 400.0


def test_power_falls_back_to_the_drivers_average() -> None:
    rows = [{"ts_ns": i * S, "device": 0, "power_avg_w": 10.0 * (i + 1)} for i in range(3)]
    s = summarize_gpu(table(rows), None, None)
    assert s is not None
    assert s["devices"][0]["power_w_mean"] == pytest.approx(20.0)


def test_totals_over_the_devices_the_process_used() -> None:
    rows = []
    for dev, used, rate in ((0, False, 50.0), (1, True, 200.0), (2, True, 100.0)):
        for i in range(21):
            rows.append(
                {
                    "ts_ns": i * S // 10,
                    "device": dev,
                    "has_watched_process": used,
                    "energy_j": rate * i / 10,
                    "sm_clock_mhz": 1800.0 - (300.0 if dev == 1 and i == 10 else 0.0),
                    "sm_clock_max_mhz": 2000.0,
                }
            )
    s = summarize_gpu(table(rows), (0, 2 * S), 100)
    assert s is not None
    assert [d["used"] for d in s["devices"]] == [False, True, True]
    assert s["devices_counted"] == [1, 2]
    assert s["energy_j"] == pytest.approx(600.0)
    assert s["avg_power_w"] == pytest.approx(300.0)
    assert s["joules_per_inference"] == pytest.approx(6.0)
    assert s["clock_drop"] == pytest.approx(1 - 1500 / 1800)
    dev1 = s["devices"][1]
    assert s["clock_ratio"] == pytest.approx(dev1["sm_clock_mhz_mean"] / 2000.0)
    assert dev1["sm_clock_mhz_min"] == 1500.0
    assert dev1["sm_clock_mhz_max"] == 1800.0


def test_unknown_use_counts_every_device_and_a_missing_counter_nulls_the_total() -> None:
    rows = ramp(lambda t: 100.0 * t, device=0) + ramp(lambda t: None, device=1)
    s = summarize_gpu(table(rows), (S, 2 * S), None)
    assert s is not None
    assert [d["used"] for d in s["devices"]] == [None, None]
    assert s["devices_counted"] == [0, 1]
    assert s["devices"][0]["energy_j"] == pytest.approx(100.0)
    assert s["energy_j"] is None
    assert any(u.startswith("energy_j: device 1") for u in s["unknown"])


def test_a_process_on_no_gpu_has_no_totals() -> None:
    rows = ramp(lambda t: 100.0 * t, has_watched_process=False)
    s = summarize_gpu(table(rows), None, 10)
    assert s is not None
    assert s["devices_counted"] == []
    assert s["energy_j"] is None
    assert s["joules_per_inference"] is None
    assert s["clock_drop"] is None
    assert any("no context on any GPU" in u for u in s["unknown"])


def test_xgmi_bytes_are_differenced() -> None:
    rows = [
        {"ts_ns": i * S, "device": 0, "xgmi_read_bytes": 1000 * i, "xgmi_write_bytes": 10 * i}
        for i in range(5)
    ]
    s = summarize_gpu(table(rows), (S // 2, 3 * S + S // 2), None)
    assert s is not None
    assert s["devices"][0]["xgmi_read_bytes"] == 3000
    assert s["devices"][0]["xgmi_write_bytes"] == 30


def test_rows_out_of_order_and_mixed_sources() -> None:
    rows = ramp(lambda t: 100.0 * t)
    rows.reverse()
    t = table(rows)
    t2 = table([{**r, "device": 1, "source": "amdsmi"} for r in ramp(lambda t: 10.0 * t)])
    s = summarize_gpu(pa.concat_tables([t, t2]), (S, 2 * S), None)
    assert s is not None
    assert s["source"] == "amdsmi+nvml"
    assert s["energy_j"] == pytest.approx(110.0)


def test_summary_keys() -> None:
    s = summarize_gpu(table(ramp(lambda t: t)), None, 1)
    assert s is not None
    for key in (
        "source",
        "scope",
        "window_s",
        "devices",
        "energy_j",
        "avg_power_w",
        "joules_per_inference",
        "inferences_per_joule",
        "clock_drop",
        "clock_ratio",
        "throttled_share",
        "violation_share",
        "unknown",
    ):
        assert key in s
    dev_keys = {
        "device", "name", "used", "samples", "util_gpu_pct_mean", "util_mem_pct_mean",
        "sm_clock_mhz_mean", "sm_clock_mhz_min", "sm_clock_mhz_max", "sm_clock_max_mhz",
        "sm_clock_ratio", "mem_clock_mhz_mean", "mem_clock_max_mhz", "power_w_mean",
        "power_w_max", "power_limit_w", "energy_j", "avg_power_w", "temp_c_max",
        "temp_hotspot_c_max", "temp_mem_c_max", "mem_used_bytes_max",
        "pcie_tx_bytes_per_s_mean", "pcie_rx_bytes_per_s_mean", "xgmi_read_bytes",
        "xgmi_write_bytes", "throttle_share", "throttled_share", "violation_power_s",
        "violation_thermal_s", "violation_share", "gpm_sm_activity_pct_mean",
        "gpm_sm_occupancy_pct_mean", "gpm_tensor_activity_pct_mean",
        "gpm_dram_bw_util_pct_mean",
    }  # fmt: skip
    assert dev_keys <= set(s["devices"][0])
