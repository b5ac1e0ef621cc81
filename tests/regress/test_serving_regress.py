"""Regression support for serving sessions (`aaco llm bench` bundles): `aaco diff`,
baselines, `aaco history` and `aaco check`, on bundles whose every time is known by
construction (:func:`aaco.testing.serving.scripted_results`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.cli.test_cli import aaco, assert_one_line_error

from aaco.analysis.compare import (
    IMPROVEMENT,
    INCONCLUSIVE,
    NO_CHANGE,
    REGRESSION,
    GateTest,
    compare,
    judge_family,
)
from aaco.errors import UsageError
from aaco.regress import serving
from aaco.regress.diff import diff_sessions
from aaco.regress.history import history
from aaco.regress.sla import check, parse_rule
from aaco.report.regress import (
    render_diff_markdown,
    render_diff_terminal,
    render_history_terminal,
    verdict_line,
)
from aaco.serving.load import Load
from aaco.session.bundle import Session
from aaco.testing import make_bundle
from aaco.testing.serving import make_serving_bundle, scripted_results

N = 400  # requests per run: enough for the p99 gate to resolve a 15 % margin


def _ttft(level: float, seed: int, n: int = N, sigma: float = 0.05) -> list[float]:
    """TTFTs in ms drawn around ``level`` (lognormal, sd ``sigma`` in log)."""
    return list(level * np.exp(np.random.default_rng(seed).normal(0.0, sigma, n)))


def _bundle(root: Path, *, n: int = N, load: Load | None = None, **kw: Any) -> Session:
    loads = None if load is None else [load]
    return make_serving_bundle(root, scripted_results(n, **kw), loads=loads)


def _set_created(s: Session, created: str) -> None:
    meta = json.loads((s.path / "session.json").read_text())
    meta["created_utc"] = created
    (s.path / "session.json").write_text(json.dumps(meta))


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Session]:
    """A baseline and sessions that differ from it in one known way each."""
    root = tmp_path_factory.mktemp("serving") / "sessions"
    return {
        "base": _bundle(root, ttft_ms=_ttft(20, 1)),
        # the same distribution, other draws
        "same": _bundle(root, ttft_ms=_ttft(20, 2)),
        "slow_ttft": _bundle(root, ttft_ms=_ttft(26, 3)),  # +30 %
        "fast_tpot": _bundle(root, ttft_ms=_ttft(20, 4), itl_ms=4.0),  # tpot 5 -> 4 ms
        # requests sent every 13 ms instead of 10: 23 % fewer output tokens per second
        "less_tput": _bundle(root, ttft_ms=_ttft(20, 5), gap_ms=13.0),
        "failing": _bundle(root, ttft_ms=_ttft(20, 6), failed=tuple(range(5, N, 10))),
        "one_failure": _bundle(root, ttft_ms=_ttft(20, 7), failed=(200,)),
        "other_load": _bundle(root, ttft_ms=_ttft(20, 8), load=Load(concurrency=4, requests=N)),
    }


def _diff(sides: dict[str, Session], new: str, *args: str) -> Any:
    """`aaco diff -f json` of the baseline and ``new``: (diff, process)."""
    proc = aaco(
        "diff", "-b", str(sides["base"].path), "-s", str(sides[new].path), "-f", "json", *args
    )
    assert proc.returncode in (0, 1, 3), proc.stderr
    data = json.loads(proc.stdout)
    assert data["verdict"]["exit_code"] == proc.returncode
    return data, proc


def _api(sides: dict[str, Session], new: str, threshold: float = 0.03) -> Any:
    """The same diff through the library (no process start)."""
    return diff_sessions(sides["base"], sides[new], threshold=threshold, use_history=False)


# -- aaco diff ---------------------------------------------------------------------------------
def test_identical_distributions_are_no_change(sides: dict[str, Session]) -> None:
    data, proc = _diff(sides, "same", "--threshold", "15%")
    v = data["verdict"]
    assert proc.returncode == 0, v
    assert v["verdict"] == NO_CHANGE and v["regression"] is False
    assert data["kind"] == "serving" and v["point"] == "concurrency=1"
    assert data["serving"]["gates"] == [
        "ttft:p50",
        "ttft:p99",
        "tpot:p50",
        "output_tokens_per_s:p50",
    ]
    metrics = data["serving"]["metrics"]
    assert {m: metrics[m]["gating"] for m in metrics} == {
        "ttft": True,
        "tpot": True,
        "e2e": False,  # compared and shown, never gating by default
        "output_tokens_per_s": True,
    }
    assert metrics["e2e"]["comparison"]["verdict"] is None
    tput = metrics["output_tokens_per_s"]["comparison"]["metrics"]["p50"]
    assert tput["baseline"] == pytest.approx(1600, rel=0.02)  # 16 tokens every 10 ms
    assert data["serving"]["failures"]["verdict"] == NO_CHANGE
    assert data["verdict"]["suspected_cause"] is None


def test_ttft_shift_is_a_regression_driven_by_ttft(sides: dict[str, Session]) -> None:
    data, proc = _diff(sides, "slow_ttft")
    v = data["verdict"]
    assert proc.returncode == 1
    assert v["verdict"] == REGRESSION and v["metric"] in ("ttft p50", "ttft p99")
    assert 25 < v["delta_pct"] < 35
    lo, hi = v["ci_pct"]
    assert lo <= v["delta_pct"] <= hi and lo > 3
    tpot = data["serving"]["metrics"]["tpot"]["comparison"]["metrics"]["p50"]
    assert tpot["verdict"] == NO_CHANGE
    assert v["suspected_cause"] == "queueing or prefill"
    assert v["severity"] == "high"
    # the latency comparison model-run readers look for is TTFT's
    assert data["comparison"]["metrics"]["p50"]["baseline_ms"] == pytest.approx(20, rel=0.02)
    text = aaco("diff", "-b", str(sides["base"].path), "-s", str(sides["slow_ttft"].path)).stdout
    assert text.splitlines()[0].startswith(f"REGRESSION {v['metric']} +")
    assert "at concurrency=1" in text.splitlines()[0]


def test_tpot_improvement(sides: dict[str, Session]) -> None:
    data = _api(sides, "fast_tpot", 0.10)
    v = data["verdict"]
    assert v["exit_code"] == 0
    assert v["verdict"] == IMPROVEMENT and v["metric"] == "tpot p50"
    assert v["delta_pct"] == pytest.approx(-20.0, abs=0.5)
    assert v["severity"] == "none" and v["recommendation"] is None


def test_throughput_drop_is_detected(sides: dict[str, Session]) -> None:
    data = _api(sides, "less_tput", 0.10)
    v = data["verdict"]
    assert v["exit_code"] == 1
    assert v["metric"] == "output_tokens_per_s p50" and v["unit"] == "tokens/s"
    assert v["delta_pct"] == pytest.approx(-23.1, abs=2.0)  # 10/13 - 1
    comp = data["serving"]["metrics"]["output_tokens_per_s"]["comparison"]
    assert comp["higher_is_better"] is True and comp["unit"] == "tokens/s"
    assert comp["metrics"]["p50"]["session"] < comp["metrics"]["p50"]["baseline"]
    for name in ("ttft", "tpot"):
        assert data["serving"]["metrics"][name]["comparison"]["verdict"] == NO_CHANGE
    t = data["serving"]["throughput"]
    assert t["window_s"] > 0 and min(t["windows"]["baseline"] + t["windows"]["session"]) >= 30
    runs = t["run_output_tokens_per_s"]
    assert runs["session"][0] < runs["baseline"][0]


def test_rising_failures_are_reported_and_gate(sides: dict[str, Session]) -> None:
    data, proc = _diff(sides, "failing", "--threshold", "15%")
    v = data["verdict"]
    assert proc.returncode == 1
    assert v["metric"] == "failed_fraction" and v["verdict"] == REGRESSION
    assert v["failed_fraction"] == {"baseline": 0.0, "session": pytest.approx(0.1)}
    assert v["delta_pct"] == pytest.approx(10.0)  # percentage points
    assert "FAILED REQUESTS ROSE" in proc.stderr
    assert v["suspected_cause"] == "failed requests"
    f = data["serving"]["failures"]
    assert f["session"]["failed"] == 40 and f["p_regression"] < 1e-6
    assert verdict_line(data).startswith("REGRESSION failed requests 0.0% -> 10.0%")


def test_a_rise_of_failures_is_never_no_change(sides: dict[str, Session]) -> None:
    # one failure in 400: no test can call it significant, but it is not "unchanged"
    data, proc = _diff(sides, "one_failure", "--threshold", "15%")
    v = data["verdict"]
    assert proc.returncode == 3 and v["verdict"] == INCONCLUSIVE
    assert v["metric"] == "failed_fraction"
    assert any("not unchanged" in w for w in v["warnings"])
    assert data["serving"]["failures"]["verdict"] == INCONCLUSIVE


def test_load_differences_are_listed_as_settings(sides: dict[str, Session]) -> None:
    data = _api(sides, "other_load", 0.15)
    keys = {d["key"]: d for d in data["evidence"]["settings"]}
    assert keys["load.concurrency"]["baseline"] == 1 and keys["load.concurrency"]["session"] == 4
    assert any(w.startswith("different configuration: load.concurrency") for w in data["warnings"])
    causes = [c["cause"] for c in data["verdict"]["candidate_causes"]]
    assert data["verdict"]["verdict"] == NO_CHANGE or causes[0] == "configuration change"


def test_mixed_kinds_are_a_one_line_usage_error(sides: dict[str, Session], tmp_path: Path) -> None:
    run = make_bundle(tmp_path / "sessions", [2.0] * 20)
    for a, b in ((run.path, sides["base"].path), (sides["base"].path, run.path)):
        proc = aaco("diff", "-b", str(a), "-s", str(b))
        assert_one_line_error(proc, 2, "cannot compare", "serving session", "model run")
    with pytest.raises(UsageError, match="one kind"):
        diff_sessions([sides["base"], run], sides["same"])


def test_bad_gates_and_points_are_usage_errors(sides: dict[str, Session]) -> None:
    base, same = str(sides["base"].path), str(sides["same"].path)
    assert_one_line_error(aaco("diff", "-b", base, "-s", same, "--gate", "p50"), 2, "ttft:p99")
    assert_one_line_error(aaco("diff", "-b", base, "-s", same, "--gate", "x:p50"), 2, "x")
    assert_one_line_error(aaco("diff", "-b", base, "-s", same, "--point", "2"), 2, "1 load point")
    with pytest.raises(UsageError, match="at least 10"):
        few = make_serving_bundle(sides["base"].path.parent.parent, scripted_results(8))
        diff_sessions(sides["base"], few)


def test_gates_of_the_user_and_holm_over_all_metrics(sides: dict[str, Session]) -> None:
    out = diff_sessions(
        sides["base"], sides["slow_ttft"], gates=["e2e:p50", "ttft:p90"], use_history=False
    )
    assert out["serving"]["requested_gates"] == ["e2e:p50", "ttft:p90"]
    metrics = out["serving"]["metrics"]
    assert metrics["e2e"]["gating"] and not metrics["tpot"]["gating"]
    e2e = metrics["e2e"]["comparison"]["metrics"]["p50"]
    # Holm over the family: the adjusted p is at least the raw one
    assert e2e["p_regression_holm"] >= e2e["p_regression"]
    assert out["verdict"]["verdict"] == REGRESSION


def test_sweeps_are_compared_at_matching_loads(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    results = scripted_results(60, ttft_ms=_ttft(20, 1, 60)) + scripted_results(
        60, ttft_ms=_ttft(40, 2, 60), point=1
    )
    sweep = make_serving_bundle(
        root, results, loads=[Load(concurrency=1, requests=60), Load(concurrency=2, requests=60)]
    )
    at2 = _bundle(root, n=60, ttft_ms=_ttft(40, 3, 60), load=Load(concurrency=2, requests=60))
    at4 = _bundle(root, n=60, ttft_ms=_ttft(40, 4, 60), load=Load(concurrency=4, requests=60))
    out = diff_sessions(sweep, at2, point="concurrency=2", use_history=False, threshold=0.15)
    assert out["serving"]["point"]["baseline"] == [1] and out["verdict"]["point"] == "concurrency=2"
    assert diff_sessions(sweep, at2, point="1", use_history=False)["serving"]["point"] == {
        "label": "concurrency=2",
        "load": serving.point_load(sweep, 1),
        "baseline": [1],
        "session": [0],
    }
    # the sweep's first point (concurrency=1) has no match in a run at concurrency=2
    proc = aaco("diff", "-b", str(sweep.path), "-s", str(at2.path))
    assert_one_line_error(proc, 2, "no load point concurrency=1", "--point")
    proc = aaco("diff", "-b", str(at4.path), "-s", str(sweep.path))
    assert_one_line_error(proc, 2, "no load point concurrency=4")


def test_runs_pooled_per_side_and_pools_of_other_loads_refused(sides: dict[str, Session]) -> None:
    s = sides
    args = ("-b", str(s["base"].path), "-b", str(s["same"].path))
    proc = aaco(
        "diff", *args, "-s", str(s["slow_ttft"].path), "-s", str(s["less_tput"].path),
        "-f", "json",
    )  # fmt: skip
    assert proc.returncode in (0, 1, 3), proc.stderr
    data = json.loads(proc.stdout)
    assert data["serving"]["runs"] == {"baseline": 2, "session": 2}
    assert data["comparison"]["runs"] == {"baseline": 2, "session": 2}
    refused = aaco("diff", *args, "-b", str(s["other_load"].path), "-s", str(s["failing"].path))
    assert_one_line_error(refused, 2, "cannot be pooled", "load.concurrency")


def test_renderers(sides: dict[str, Session]) -> None:
    out = diff_sessions(sides["base"], sides["failing"], use_history=False)
    text = render_diff_terminal(out, width=160)
    assert text.splitlines()[0] == out["summary"]
    assert "failed requests" in text and "not gated" in text and "output tokens/s" in text
    md = render_diff_markdown(out)
    assert md.startswith("### 🔴 ") and "| ttft (ms) | p99 |" in md
    hostile = json.loads(json.dumps(out))
    hostile["evidence"]["settings"] = [
        {"key": "serving.url", "baseline": "[bold red]x[/]", "session": "<script>|"}
    ]
    assert "[bold red]x[/]" in render_diff_terminal(hostile, width=160)
    assert "<script>" not in render_diff_markdown(hostile)


# -- baselines ---------------------------------------------------------------------------------
def test_baseline_save_and_diff_by_name(sides: dict[str, Session]) -> None:
    root = sides["base"].path.parent.parent
    base, same = str(sides["base"].path), str(sides["same"].path)
    proc = aaco("baseline", "save", "srv", "-s", base, "-s", same, "--sessions", str(root))
    assert proc.returncode == 0, proc.stderr
    record = json.loads(aaco("baseline", "show", "srv", "--sessions", str(root)).stdout)
    assert record["kind"] == "serving" and len(record["runs"]) == 2
    assert record["serving"]["load.concurrency"] == 1
    assert record["serving_points"][0]["ttft_p50_ms"] == pytest.approx(20, rel=0.02)
    listing = aaco("baseline", "list", "--sessions", str(root)).stdout
    assert "srv" in listing and "at concurrency=1, ttft p50 19.9" in listing
    proc = aaco(
        "diff", "-b", "srv", "-s", str(sides["slow_ttft"].path), "--sessions", str(root),
        "-f", "json",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["verdict"]["baseline"]["name"] == "srv"
    assert data["serving"]["runs"]["baseline"] == 2
    ref = json.loads((sides["slow_ttft"].path / "regress" / "baseline_ref.json").read_text())
    assert ref["name"] == "srv" and ref["kind"] == "serving"
    other = str(sides["other_load"].path)
    refused = aaco("baseline", "save", "mixed", "-s", base, "-s", other, "--sessions", str(root))
    assert_one_line_error(refused, 2, "must share")


def test_noise_floor_learned_from_serving_history(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    levels = 20 * np.exp(np.random.default_rng(9).normal(0, 0.05, 7))
    past = []
    for i, level in enumerate(levels):
        s = _bundle(root, n=60, ttft_ms=_ttft(float(level), 10 + i, 60, 0.01))
        _set_created(s, f"2026-01-01T00:00:{i:02d}.000Z")
        past.append(s)
    new = _bundle(root, n=60, ttft_ms=_ttft(20, 30, 60, 0.01))
    _set_created(new, "2026-01-01T00:01:00.000Z")
    out = diff_sessions(Session.load(past[-1].path), Session.load(new.path), sessions_root=root)
    floor = out["noise_floor"]["by_metric"]["ttft"]
    assert floor["history_sessions"] == 7 and floor["applied"] is True
    assert floor["floor_pct"] > 3.0
    assert out["verdict"]["margins_pct"]["ttft"] == pytest.approx(floor["floor_pct"])


# -- history -----------------------------------------------------------------------------------
def test_history_lists_serving_rows_and_finds_a_ttft_step(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    rng = np.random.default_rng(11)
    levels = list(20 * np.exp(rng.normal(0, 0.01, 14)))
    levels[7:] = [v * 1.3 for v in levels[7:]]
    for i, level in enumerate(levels):
        s = _bundle(root, n=30, ttft_ms=_ttft(level, 40 + i, 30, 0.01))
        _set_created(s, f"2026-01-02T00:00:{i:02d}.000Z")
    make_bundle(root, [2.0] * 20)  # a model run: its own group
    groups = history(root)
    assert [g["kind"] for g in groups] == ["model", "serving"]
    g = groups[1]
    assert g["load"] == "concurrency=1" and len(g["sessions"]) == 14
    row = g["sessions"][0]
    assert row["ttft_p50_ms"] == pytest.approx(levels[0], rel=0.02)
    assert row["tpot_p50_ms"] == pytest.approx(5.0)
    assert row["output_tokens_per_s"] > 0 and row["failed_fraction"] == 0.0
    steps = [c for c in g["change_points"] if c["metric"] == "ttft_p50"]
    assert [c["index"] for c in steps] == [7] and 25 < steps[0]["magnitude_pct"] < 35
    proc = aaco("history", "--sessions", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data[1]["sessions"][0]["ttft_p99_ms"] is not None
    text = aaco("history", "--sessions", str(root)).stdout
    assert "served by fake at concurrency=1" in text and "change point (ttft_p50) at #7" in text
    assert "ttft p50 ms" in render_history_terminal(groups, width=160)


# -- check -------------------------------------------------------------------------------------
def test_sla_rules_on_serving_metrics(sides: dict[str, Session], tmp_path: Path) -> None:
    s = sides["failing"]
    p = serving.point_summary(s, 0)
    p99 = p["ttft_ms"]["p99"]
    rules = [
        parse_rule(f"ttft_p99_ms < {p99 * 1.01}"),
        parse_rule("tpot_p50_ms < 50"),
        parse_rule("output_tokens_per_s > 100"),
        parse_rule("failed_fraction <= 0.01"),
        parse_rule("p99_ms <= 12"),  # a model-run metric: unknown here
    ]
    result = check(s, rules)
    assert [r["status"] for r in result["results"]] == ["pass", "pass", "pass", "fail", "unknown"]
    assert result["results"][3]["value"] == pytest.approx(0.1)
    assert result["point"] == "concurrency=1" and result["passed"] is False
    ok = tmp_path / "ok.yaml"
    ok.write_text(f"rules:\n  - ttft_p99_ms < {p99 * 1.01}\n  - tpot_p50_ms < 50\n")
    proc = aaco("check", "-s", str(s.path), "--sla", str(ok))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SLA met: 2/2 rule(s) pass at concurrency=1" in proc.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text('failed_fraction: "<= 0.01"\noutput_tokens_per_s: "> 100"\n')
    proc = aaco("check", "-s", str(s.path), "--sla", str(bad), "--json")
    assert proc.returncode == 1
    assert [r["status"] for r in json.loads(proc.stdout)["results"]] == ["fail", "pass"]
    assert check(s, [rules[4]])["passed"] is False
    assert check(s, [rules[4]], allow_unknown=True)["passed"] is True
    units = tmp_path / "units.yaml"
    units.write_text("rules:\n  - ttft_p99 < 200ms\n")
    assert_one_line_error(
        aaco("check", "-s", str(s.path), "--sla", str(units)), 2, "without a unit", "ttft_p99_ms"
    )


# -- the statistics underneath -----------------------------------------------------------------
def test_higher_is_better_turns_the_direction() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(100, 1, 200)
    down = compare(base, rng.normal(80, 1, 200), delta=0.05, gates=("p50",), higher_is_better=True)
    up = compare(base, rng.normal(120, 1, 200), delta=0.05, gates=("p50",), higher_is_better=True)
    assert down.verdict == REGRESSION and up.verdict == IMPROVEMENT
    lat = compare(base, rng.normal(120, 1, 200), delta=0.05, gates=("p50",))
    assert lat.verdict == REGRESSION
    assert down.at_margin(0.5).verdict == NO_CHANGE


def test_judge_family_holm_over_every_gate() -> None:
    rng = np.random.default_rng(1)
    same = compare(rng.normal(10, 0.1, 300), rng.normal(10, 0.1, 300), delta=0.03, gates=("p50",))
    slow = compare(rng.normal(10, 0.1, 300), rng.normal(13, 0.1, 300), delta=0.03, gates=("p50",))
    fam = judge_family({"a": same, "b": slow}, [GateTest("failures", 1.0, 1.0, p_equivalence=0.0)])
    assert fam.verdict == REGRESSION and fam.primary == ("b", "p50")
    adj = fam.comparisons["b"].metrics["p50"].p_regression_holm
    assert adj is not None and adj >= slow.metrics["p50"].p_regression
    # a test that cannot be called equivalent keeps the family from NO CHANGE
    held = judge_family({"a": same}, [GateTest("failures", 0.3, 1.0, p_equivalence=1.0)])
    assert held.verdict == INCONCLUSIVE and held.primary == ("failures", "")
    assert judge_family({"a": same}).verdict == NO_CHANGE


def test_window_rates_by_construction(tmp_path: Path) -> None:
    s = _bundle(tmp_path / "sessions", n=100, ttft_ms=20.0)
    samples = serving.point_samples(s, 0)
    assert samples.ok == 100 and samples.series["tpot"] == pytest.approx(np.full(100, 5.0))
    assert samples.itl.size == 100 * 15 and np.allclose(samples.itl, 5.0)
    w, why = serving.choose_window([samples])
    assert why is None and w is not None
    assert w == pytest.approx((samples.span[1] - samples.span[0]) / serving.WINDOWS)  # type: ignore[index]
    rates = serving.window_rates(samples, w)
    assert rates.size == serving.WINDOWS
    # 16 tokens every 10 ms, once the first request's 20 ms TTFT has passed
    assert np.median(rates) == pytest.approx(1600, rel=0.05)


@pytest.mark.parametrize("spec", ["concurrency=3", "rate=2", "x=1", "-1"])
def test_resolve_point_errors(sides: dict[str, Session], spec: str) -> None:
    with pytest.raises(UsageError):
        serving.resolve_point(sides["base"], spec)


def test_gpu_energy_per_token_is_evidence_and_a_cause(tmp_path: Path) -> None:
    """Each side's load point carries the GPU collector's energy (aaco.serving.bench
    add_gpu_energy): the diff compares J per output token and names a rise."""
    root = tmp_path / "sessions"
    a = _bundle(root, ttft_ms=_ttft(26, 11))
    b = _bundle(root, ttft_ms=_ttft(20, 12))
    for s, jpt, throttled in ((a, 0.50, 0.0), (b, 0.65, 0.4)):
        f = s.path / "metrics" / "serving_summary.json"
        summary = json.loads(f.read_text())
        summary["points"][0]["gpu"] = {
            "energy_j": 100.0,
            "avg_power_w": 300.0,
            "joules_per_request": 8.0,
            "joules_per_output_token": jpt,
            "clock_ratio": 0.9,
            "throttled_share": throttled,
        }
        f.write_text(json.dumps(summary))
    out = diff_sessions(Session.load(a.path), Session.load(b.path), use_history=False)
    sc = out["evidence"]["scalars"]
    assert sc["gpu_energy_per_output_token_j"]["delta_pct"] == pytest.approx(30.0)
    assert sc["gpu_power_w"]["delta"] == pytest.approx(0.0)
    causes = {c["cause"]: c["detail"] for c in out["verdict"]["candidate_causes"]}
    assert "GPU energy per output token +30 %" in causes["energy"]
    assert "GPU time throttled 0% -> 40%" in causes["throttling"]
    # neither side with GPU figures: none listed (not unknown, not applicable)
    c = _bundle(root, ttft_ms=_ttft(20, 13))
    d = _bundle(root, ttft_ms=_ttft(20, 14))
    out = diff_sessions(c, d, use_history=False)
    assert "gpu_energy_per_output_token_j" not in out["evidence"]["scalars"]
