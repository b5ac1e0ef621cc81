"""The self-contained HTML report on real sessions: sections, missing-data lines, escaping."""

from __future__ import annotations

import html as html_lib
import json
import math
import re
import shutil
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.cli.test_cli import aaco
from tests.sessions_fixtures import HOSTILE, Sessions

from aaco.report import svg
from aaco.report.html import HtmlRenderer
from aaco.session.bundle import Session, iter_sessions, write_table
from aaco.session.schema import INFERENCE_ITERS, SYSTEM_EVENTS


def _hostile(root: Path) -> Path:
    return next(p for p in iter_sessions(root) if Session.load(p).meta.get("tag") == HOSTILE)


def test_sections_charts_and_missing_lines(regress_sessions: Sessions) -> None:
    html = HtmlRenderer().render(Session.load(regress_sessions.slow))
    for section in (
        "summary",
        "latency",
        "time",
        "roofline",
        "timeline",
        "regression",
        "environment",
    ):
        assert f'<section id="{section}">' in html
    for chart in ("latency-hist", "latency-timeline", "ops-bars", "icicle"):
        assert f'<svg id="{chart}"' in html
    assert 'id="telemetry-process-CPU"' in html  # unified timeline next to the latency
    assert "Kernels: no GPU kernel trace" in html  # CPU run: says what is missing
    assert "warmup" in html  # the shaded warmup band
    # self-contained: no external scripts, styles, images or fonts
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"(?!data:)", html)
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html


def test_untrusted_names_render_as_text(web_root: Path) -> None:
    html = HtmlRenderer().render(Session.load(_hostile(web_root)))
    assert HOSTILE not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>bold</b>" not in html and "relu &amp; &lt;b&gt;bold&lt;/b&gt;" in html
    # the only script element is the report's own
    assert html.count("<script>") == 1


def test_cli_writes_html_into_the_bundle_and_to_a_file(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    s = regress_sessions.same
    assert (s / "report" / "report.html").is_file()  # written by aaco run
    out = tmp_path / "r.html"
    proc = aaco("report", "--session", str(s), "--format", "html", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "</html>" in text
    proc = aaco("report", "--session", str(s), "--format", "html")
    assert proc.returncode == 0 and "report.html" in proc.stderr


def test_regression_section_shows_a_diff(regress_sessions: Sessions) -> None:
    s = regress_sessions
    args = ("diff", "-b", str(s.base), "-s", str(s.slow), "-t", "25%", "--allow-contention")
    assert aaco(*args).returncode == 1  # 4x the work
    html = HtmlRenderer().render(Session.load(s.slow))
    assert 'class="verdict REGRESSION"' in html and 'id="movers"' in html
    assert "Recommendation:" in html
    # the diff's warnings (here: one run per side, no history) are on the page too
    assert "run-to-run variation" in html
    # aaco diff refreshed the bundle's own copy of the report
    assert 'class="verdict REGRESSION"' in (s.slow / "report" / "report.html").read_text()


# --- constructed bundles: a copy of a real one with its tables replaced -------------------


def _copy(src: Path, dst: Path, **meta: Any) -> Path:
    shutil.copytree(src, dst)
    if meta:
        data = json.loads((dst / "session.json").read_text())
        data.update(meta)
        (dst / "session.json").write_text(json.dumps(data))
    return dst


def _iters(path: Path, start_ns: int, latencies_ms: list[float]) -> None:
    rows, t = [], start_ns
    for i, ms in enumerate(latencies_ms):
        ns = int(ms * 1e6)
        rows.append({"phase": "measured", "iteration": i, "start_ns": t, "end_ns": t + ns,
                     "latency_ns": ns})  # fmt: skip
        t += ns
    write_table(path / INFERENCE_ITERS.path, INFERENCE_ITERS.from_rows(rows))


def _telemetry(path: Path, ts_ns: list[int]) -> None:
    rows = [
        {"ts_ns": t, "proc_cpu_pct": 90.0 + i, "sys_cpu_pct": 50.0, "load_1m": 1.0,
         "cpu_freq_mhz": 3000.0, "proc_ctx_voluntary": 10 * i, "proc_ctx_involuntary": i}
        for i, t in enumerate(ts_ns)
    ]  # fmt: skip
    write_table(path / SYSTEM_EVENTS.path, SYSTEM_EVENTS.from_rows(rows))


def _svg_ids(html: str) -> list[str]:
    return re.findall(r'<svg id="([^"]+)"', html)


def _ticks(chart: str) -> list[tuple[str, str]]:
    """(text-anchor, label) of the x tick labels of one chart."""
    axis = chart.split('<g class="xticks"', 1)[1].split("</g>", 1)[0]
    return re.findall(r'class="tick" x="[^"]+" y="[^"]+" text-anchor="(\w+)">([^<]*)<', axis)


def test_one_outlier_goes_to_an_overflow_bar(regress_sessions: Sessions, tmp_path: Path) -> None:
    values = [1.0 + 0.01 * math.sin(i) for i in range(199)] + [100.0]
    chart = svg.histogram("h", values, "ms", "latency")
    counts = [int(c) for c in re.findall(r"ms: (\d+) iteration\(s\)</title></rect>", chart)]
    assert counts[0] < 199 and sum(counts) == 199  # the bulk is spread over the bins
    over = re.findall(r'<rect class="bin overflow"[^>]*data-count="(\d+)"><title>([^<]*)', chart)
    assert over and over[0][0] == "1" and "1 iteration(s), up to 100 ms" in over[0][1]
    assert "&gt; 1.0" in over[0][1] and re.search(r">&gt; 1\.0\d* ms</text>", chart)
    # a clean distribution keeps every value in range: no overflow bar
    assert "overflow" not in svg.histogram("h", values[:199], "ms", "latency")
    # the page says how many iterations are beyond the range
    s = _copy(regress_sessions.slow, tmp_path / "s")
    _iters(s, 10**9, values)
    html = HtmlRenderer().render(Session.load(s))
    assert "1 of 200 iteration(s) beyond the range" in html


def test_many_preemptions_do_not_squash_the_histogram() -> None:
    # a 65 us model with 1.5 % of its iterations preempted for 5-19 ms (a noisy machine):
    # more than the 0.5 % a 99.5th percentile would cut, far fewer than a second mode
    rng = np.random.default_rng(0)
    values = list(rng.normal(0.065, 0.003, 985)) + list(rng.uniform(5.0, 19.0, 15))
    lo, hi = svg.histogram_range(values)
    assert lo == min(values)
    assert hi < 0.2  # the bins resolve the 65 us body
    chart = svg.histogram("h", values, "ms", "latency")
    over = re.findall(r'<rect class="bin overflow"[^>]*data-count="(\d+)"', chart)
    assert over == ["15"]
    # a real second mode (30 % of the iterations) stays inside the bins
    two = list(rng.normal(1.0, 0.01, 700)) + list(rng.normal(2.0, 0.01, 300))
    assert svg.histogram_range(two)[1] >= 1.99


def test_a_wide_range_gets_log_spaced_bins() -> None:
    # 97 % of the iterations at 50-80 us, 3 % at the scheduler's 4 ms tick: linear bins
    # would put the whole body into the first one
    rng = np.random.default_rng(1)
    values = list(rng.uniform(0.05, 0.08, 970)) + list(rng.normal(4.0, 0.05, 30))
    chart = svg.histogram("h", values, "ms", "latency")
    assert "ms, log scale" in chart
    counts = [int(c) for c in re.findall(r"ms: (\d+) iteration\(s\)</title></rect>", chart)]
    assert max(counts) < 500  # the body is spread over several bins
    assert sum(counts[-5:]) >= 20  # and the 4 ms mode is in the bins, not cut off
    assert ">0.1<" in chart and ">1<" in chart  # decade ticks
    # a narrow range stays linear
    assert "log scale" not in svg.histogram("h", values[:970], "ms", "latency")


def test_short_run_draws_no_one_point_telemetry_charts(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    s = _copy(regress_sessions.slow, tmp_path / "s")
    t0 = 10**12
    _iters(s, t0, [1.0] * 50)  # 0.05 s of iterations
    _telemetry(s, [t0 - 10**9 + k * 10**8 for k in range(21)])  # 10 Hz, one sample inside
    html = HtmlRenderer().render(Session.load(s))
    assert not [i for i in _svg_ids(html) if i.startswith("telemetry-")]
    assert (
        "Telemetry: only 1 sample(s) during the 0.05 s of iterations; run longer (--duration) "
        "or sample faster (--sample-hz)" in html
    )
    # sampled fast enough: every telemetry chart has its points inside the iterations
    _telemetry(s, [t0 + k * 5 * 10**6 for k in range(11)])
    html = HtmlRenderer().render(Session.load(s))
    assert {"telemetry-process-CPU", "telemetry-context-switches"} <= set(_svg_ids(html))
    for points in re.findall(r'<polyline class="series"[^>]*points="([^"]*)"', html):
        assert len(points.split()) >= 2
    assert "Telemetry:" not in html


def test_failed_run_plots_telemetry_on_its_own_clock(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    s = _copy(regress_sessions.slow, tmp_path / "s", status="failed", run={"telemetry": True})
    (s / INFERENCE_ITERS.path).unlink()
    _telemetry(s, [5 * 10**9 + k * 10**8 for k in range(20)])
    html = HtmlRenderer().render(Session.load(s))
    assert "Latency: no timed iterations" in html
    assert 'id="telemetry-process-CPU"' in html and "s since the first telemetry sample" in html
    assert "no telemetry samples" not in html and "Telemetry:" not in html
    # without the table the line says why, true to the run's options
    (s / SYSTEM_EVENTS.path).unlink()
    assert "Telemetry: no samples in this bundle." in HtmlRenderer().render(Session.load(s))
    off = _copy(s, tmp_path / "off", run={"telemetry": False})
    assert "Telemetry: off for this run (--no-telemetry)." in HtmlRenderer().render(
        Session.load(off)
    )


@pytest.mark.parametrize(
    ("diff", "why"),
    [
        ({"verdict": 5}, "verdict is not an object"),
        ([1, 2], "not a JSON object"),
        (
            {"verdict": {"verdict": "REGRESSION"}, "summary": "x"},
            "verdict.margin_pct is not a number",
        ),
        (
            {"summary": "x", "verdict": {"verdict": "NO CHANGE", "margin_pct": 5,
                                         "baseline": {}, "candidate_causes": "slow"}},
            "verdict.candidate_causes is not a list of objects",
        ),
    ],
)  # fmt: skip
def test_malformed_diff_is_reported_not_raised(
    regress_sessions: Sessions, tmp_path: Path, diff: Any, why: str
) -> None:
    s = _copy(regress_sessions.same, tmp_path / "s")
    (s / "regress").mkdir(exist_ok=True)
    (s / "regress" / "diff.json").write_text(json.dumps(diff))
    html = HtmlRenderer().render(Session.load(s))
    assert f"Regression: regress/diff.json is malformed ({why})." in html


def test_unparsable_diff_is_reported(regress_sessions: Sessions, tmp_path: Path) -> None:
    s = _copy(regress_sessions.same, tmp_path / "s")
    (s / "regress").mkdir(exist_ok=True)
    (s / "regress" / "diff.json").write_text("{not json")
    assert "regress/diff.json is malformed (" in HtmlRenderer().render(Session.load(s))


def test_long_labels_and_axis_ticks_fit() -> None:
    name = "void gemm_kernel_fp32_<128, 64, 8>_tile_nn_v2"  # 45 characters
    chart = svg.hbar_chart("b", [(name, 2.0, "")], "ms", "bars")
    label = html_lib.unescape(re.findall(r'class="lbl">([^<]*)<', chart)[0])
    assert len(label) <= 36 and "…" in label  # 36 x ~7 px fit the 260 px label column
    assert label.startswith("void gemm") and label.endswith("nn_v2")  # both ends kept
    assert f"<title>{html_lib.escape(name)}: 2 ms" in chart  # the full name on hover
    # 0..15: "5" next to "10", never "10.0"; the edge labels stay inside the chart
    ticks = _ticks(svg.line_chart("l", [("a", [0.0, 15.0], [1.0, 2.0])], "s", "ms", "l"))
    assert [t for _, t in ticks] == ["0", "5", "10", "15"]
    assert ticks[0][0] == "start" and ticks[-1][0] == "end" and ticks[1][0] == "middle"
    ticks = _ticks(svg.line_chart("l", [("a", [0.0, 1.2], [1.0, 2.0])], "s", "ms", "l"))
    assert {len(t.split(".")[1]) for _, t in ticks} == {1}  # "0.0", "0.2" ... "1.2"


def test_every_element_id_is_unique(
    web_root: Path, regress_sessions: Sessions, tmp_path: Path
) -> None:
    class Ids(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.ids: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.ids += [v for k, v in attrs if k == "id" and v is not None]

    diffed = _copy(regress_sessions.same, tmp_path / "diffed")
    aaco("diff", "-b", str(regress_sessions.base), "-s", str(diffed))
    assert (diffed / "regress" / "diff.json").is_file()
    for bundle in (regress_sessions.slow, diffed, _hostile(web_root)):
        parser = Ids()
        parser.feed(HtmlRenderer().render(Session.load(bundle)))
        assert [i for i, n in Counter(parser.ids).items() if n > 1] == []
        assert {"latency-timeline", "timeline-latency", "roofline-chart"} <= set(parser.ids)


def test_line_charts_carry_their_value_mapping(regress_sessions: Sessions) -> None:
    html = HtmlRenderer().render(Session.load(regress_sessions.slow))
    aligned = re.findall(r'<svg id="([^"]+)"[^>]*data-align="timeline"', html)
    assert aligned[0] == "timeline-latency" and "telemetry-process-CPU" in aligned
    head = re.search(r'<svg id="timeline-latency"[^>]*>', html)
    assert head is not None
    for key in ("x0", "x1", "px0", "px1", "y0", "y1", "py0", "py1"):
        assert re.search(rf' data-{key}="-?[\d.e+-]+"', head.group(0)), key
    assert 'data-name="latency" data-unit="ms"' in html


def test_gpu_series_line_only_for_gpu_backends(regress_sessions: Sessions, tmp_path: Path) -> None:
    line = "GPU utilization, clocks and power: not sampled in this bundle"
    assert line not in HtmlRenderer().render(Session.load(regress_sessions.slow))  # CPU run
    meta = json.loads((regress_sessions.slow / "session.json").read_text())
    for i, backend in enumerate(
        (
            {"name": "cuda", "provider": "CUDAExecutionProvider"},
            {"name": "torch", "provider": "cuda"},
        )
    ):
        gpu = _copy(
            regress_sessions.slow, tmp_path / str(i), backend={**meta["backend"], **backend}
        )
        assert line in HtmlRenderer().render(Session.load(gpu))
