"""Reports of serving benchmarks (``kind: "serving"``): terminal, JSON, HTML and Perfetto over
bundles whose every request time is known by construction (:func:`scripted_results`), and
the commands that read such a bundle (report, export perfetto, analyze, ls)."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from aaco.cli import main
from aaco.diagnose import diagnose_bundle
from aaco.report.html import MAX_REQUEST_BARS, HtmlRenderer
from aaco.report.json import JsonRenderer
from aaco.report.listing import render_sessions_table
from aaco.report.model import build_report
from aaco.report.perfetto import export_perfetto
from aaco.report.renderers import create_renderer, renderer_names
from aaco.report.terminal import TerminalRenderer
from aaco.serving.load import Load
from aaco.session.bundle import Session, write_table
from aaco.session.paths import BOTTLENECK_FILE, ROOFLINE_FILE, SERVING_SUMMARY_FILE
from aaco.session.schema import SERVER_METRICS
from aaco.testing import make_bundle, make_serving_bundle, scripted_results

MS = 1_000_000
T0 = 1_000_000_000
SVG_NS = "{http://www.w3.org/2000/svg}"
DOCS = Path(__file__).parents[2] / "docs"

# The single-point bundle, by construction: 10 requests sent every 10 ms, request 3 an HTTP
# 500 (ends 1 ms after its send), request 5 sent 3 ms after it was meant to; the others
# answer their first token 20 ms after the send, then one token every 5 ms, 16 in all:
# TTFT 20, TPOT = ITL = 5, E2E 20 + 15 x 5 = 95 ms.
N = 10
FAILED = 3
LATE = 5
TTFT, STEP, E2E = 20.0, 5.0, 95.0


def _with_server_metrics(path: Path) -> None:
    """Two /metrics scrapes of a server with two engines (label sets) and the point's window."""
    rows = []
    for t, running, waiting, kv, gen, queries, hits in (
        (T0 + 50 * MS, (3, 2), (1, 0), (0.4, 0.7), 100, 10, 0),
        (T0 + 150 * MS, (1, 0), (0, 0), (0.2, 0.1), 244, 30, 5),
    ):
        gauges = (
            ("vllm:num_requests_running", "running", running),
            ("vllm:num_requests_waiting", "waiting", waiting),
            ("vllm:kv_cache_usage_perc", "kv_cache_usage", kv),
        )
        samples = [
            *(
                (name, metric, v, m)
                for name, metric, vs in gauges
                for v, m in zip(vs, ("a", "b"), strict=True)
            ),
            ("vllm:generation_tokens_total", "generation_tokens", gen, None),
            ("vllm:prefix_cache_queries_total", "prefix_cache_queries", queries, None),
            ("vllm:prefix_cache_hits_total", "prefix_cache_hits", hits, None),
        ]
        for name, metric, value, model in samples:
            labels = f"model_name={model}" if model else ""
            rows.append(
                {"t_ns": t, "name": name, "labels": labels, "value": float(value), "metric": metric}
            )
    write_table(path / SERVER_METRICS.path, SERVER_METRICS.from_rows(rows))
    meta = json.loads((path / "session.json").read_text())
    meta["phases"] = {"point0": [T0, T0 + 200 * MS], "measured": [T0 - MS, T0 + 201 * MS]}
    (path / "session.json").write_text(json.dumps(meta))


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = scripted_results(N, ttft_ms=TTFT, itl_ms=STEP, output_tokens=16, failed=[FAILED])
    late = results[LATE]
    late.intended_ns = late.sent_ns - 3 * MS
    tmp = tmp_path_factory.mktemp("serving-single")
    path = make_serving_bundle(tmp, results, slo={"ttft": 25 * MS}, tag="known").path
    _with_server_metrics(path)
    return path


#: the sweep: three closed-loop points of 10 requests, sent every 100, 50 and 48 ms: output
#: throughput 160, 294 and 304 tok/s, so the knee (< 10 % gain per doubling) is concurrency 2
SWEEP_GAPS = (100.0, 50.0, 48.0)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = []
    for point, gap in enumerate(SWEEP_GAPS):
        results += scripted_results(10, gap_ms=gap, point=point, start_ns=T0 + point * 10**10)
    loads = [Load(concurrency=c, requests=10) for c in (1, 2, 4)]
    tmp = tmp_path_factory.mktemp("serving-sweep")
    serving = {"sweep": {"parameter": "concurrency", "values": [1, 2, 4]}}
    return make_serving_bundle(tmp, results, loads=loads, serving=serving).path


@pytest.fixture(scope="module")
def unknown_tpot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # chunks of 4 tokens, no usage, no tokenizer: tokens per chunk, TPOT and ITL unknown
    results = scripted_results(6, tokens_per_chunk=4, usage=False)
    return make_serving_bundle(tmp_path_factory.mktemp("serving-unknown"), results).path


@pytest.fixture(scope="module")
def all_failed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = scripted_results(4, failed=range(4))
    return make_serving_bundle(tmp_path_factory.mktemp("serving-failed"), results).path


@pytest.fixture(scope="module")
def no_summary(single: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A benchmark interrupted before its summary was written."""
    path = tmp_path_factory.mktemp("serving-no-summary") / "bundle"
    shutil.copytree(single, path)
    (path / SERVING_SUMMARY_FILE).unlink()
    return path


def _terminal(path: Path) -> str:
    return TerminalRenderer(width=160).render(Session.load(path))


def _rows(text: str, label: str) -> list[list[str]]:
    """The cells of every table row whose first cell is ``label`` (a rich table, no edge)."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 1 and cells[0] == label:
            out.append(cells)
    return out


# -- terminal ---------------------------------------------------------------------------------


def test_terminal_shows_the_known_latencies_per_point(single: Path) -> None:
    text = _terminal(single)
    assert "AACO serving benchmark" in text and "http://test (endpoint chat)" in text
    assert "closed loop, concurrency 1, 10 requests" in text and "tag: known" in text
    assert "Latency per load point, ms" in text
    latency, throughput, tokens, health = _rows(text, "concurrency=1")
    # ok/failed, TTFT p50 p99, TPOT p50 p99, ITL p50 p99, ICL p50, E2E p50 p99
    assert latency == [
        "concurrency=1",
        "9/1",
        "20.0",
        "20.0",
        "5.00",
        "5.00",
        "5.00",
        "5.00",
        "5.00",
        "95.0",
        "95.0",
    ]
    # span: from the first send to the end of the last request, 90 + 95 ms
    span = 0.185
    assert throughput[1] == f"{144 / span:,.0f}"  # output tok/s: 9 ok x 16 tokens
    assert throughput[3] == f"{9 / span:.1f}"  # requests/s
    assert throughput[4] == f"{9 / span:.1f}"  # goodput: every ok request meets ttft <= 25
    assert throughput[5] == "90.0"  # good %: the failed request counts against it
    assert throughput[6:] == ["1.00", "144", "0.185"]
    # requested: the ok requests' max_tokens
    assert tokens[1:] == ["144", "144 (0.0%)", "unknown", "144 (0.0%)", "144", "usage 9"]
    # server running, waiting, KV %, scrapes; the client's columns left out: no figure known
    assert health[1:] == ["5", "1", "70.0", "2"]
    assert "The server's queue (/metrics) per load point" in text and "CPU %" not in text
    assert "client     health unknown (no CPU or event-loop lag figure" in text
    for unit in ("tok/s", "req/s", "max %"):
        assert unit in text
    assert "running max 5, waiting max 1, KV-cache usage max 70.0 %" in text
    assert "prefix-cache hit rate 25.0 %, 144 tokens generated" in text
    # no model-run section pretends to know anything
    assert "latency: unknown (no measured iterations)" not in text
    assert "operators:" not in text and "Bottleneck" not in text


def test_terminal_says_unknown_never_zero(unknown_tpot: Path) -> None:
    text = _terminal(unknown_tpot)
    (latency, throughput, *_) = _rows(text, "concurrency=1")
    assert latency[1:3] == ["6/0", "20.0"]
    tpot_itl = latency[4:8]
    assert tpot_itl == ["unknown"] * 4
    assert throughput[1] == "unknown"  # output tok/s: output tokens unknown
    assert throughput[4] == "unknown"  # tokens per chunk


def test_terminal_of_a_sweep_marks_the_knee(sweep: Path) -> None:
    text = _terminal(sweep)
    assert "sweep      concurrency = 1, 2, 4: knee at concurrency=2" in text
    assert _rows(text, "concurrency=2 ◀") and not _rows(text, "concurrency=4 ◀")
    # latency, throughput, tokens: no health table, no client or server figure is known
    assert len(_rows(text, "concurrency=1")) == 3
    assert "Client health" not in text and "client     health unknown" in text


def test_client_health_of_a_benchmark_that_measured_it(tmp_path: Path) -> None:
    """``aaco llm bench`` measures its client: the health table stays, client columns first."""
    path = make_serving_bundle(tmp_path, scripted_results(4)).path
    summary = json.loads((path / SERVING_SUMMARY_FILE).read_text())
    lag = {"count": 10, "p50": 0.5, "p99": 2.25}
    summary["points"][0]["client"].update(cpu_pct=12.5, loop_lag_ms=lag)
    (path / SERVING_SUMMARY_FILE).write_text(json.dumps(summary))
    text = _terminal(path)
    assert "Client health per load point" in text and "health unknown" not in text
    assert _rows(text, "concurrency=1")[-1] == ["concurrency=1", "12.5", "0.500", "2.25"]
    html = HtmlRenderer().render(Session.load(path))
    assert 'id="table-health"' in html


def test_terminal_of_a_failed_benchmark(all_failed: Path) -> None:
    text = _terminal(all_failed)
    assert "failed" in text and "no request succeeded: HTTP 500: scripted failure" in text
    (latency, *_) = _rows(text, "concurrency=1")
    assert latency[1] == "0/4" and set(latency[2:]) == {"unknown"}
    assert "warning: run failed" in text


def test_open_loop_points_show_the_schedule(tmp_path: Path) -> None:
    results = scripted_results(8, gap_ms=25.0)
    for r in results:  # every send 2 ms behind its schedule
        r.intended_ns = r.sent_ns - 2 * MS
    path = make_serving_bundle(tmp_path, results, loads=[Load(rate=40.0, requests=8)]).path
    text = _terminal(path)
    assert "open loop, 40 requests/s, poisson arrivals, 8 requests" in text
    (*_, open_loop) = _rows(text, "rate=40/s (poisson)")[:3]
    # target, achieved (7 gaps of 25 ms), dispatch delay p50 p99, TTFT from intended p50 p99
    assert open_loop[1:7] == ["40.0", "40.0", "2.00", "2.00", "22.0", "22.0"]
    assert open_loop[7] == "97.0"  # E2E from the intended send


# -- JSON -------------------------------------------------------------------------------------

#: what docs/report-json.md promises in ``serving.points[]``
POINT_KEYS = {
    "point",
    "label",
    "load",
    "requests",
    "duration_s",
    "ttft_ms",
    "ttfr_ms",
    "tpot_ms",
    "e2e_ms",
    "ttft_intended_ms",
    "e2e_intended_ms",
    "dispatch_delay_ms",
    "itl_ms",
    "icl_ms",
    "tokens_per_chunk",
    "throughput",
    "rate",
    "tokens",
    "client",
    "warnings",
}
DISTRIBUTION_KEYS = {"count", "mean", "std", "min", "p50", "p90", "p95", "p99", "max"}


def test_json_serving_section(single: Path) -> None:
    r = json.loads(JsonRenderer().render(Session.load(single)))
    assert r["kind"] == "serving" and r["status"] == "completed"
    sv = r["serving"]
    assert set(sv) == {"config", "summary_present", "points", "sweep", "warnings", "server_metrics"}
    cfg = sv["config"]
    assert cfg["url"] == "http://test" and cfg["endpoint"] == "chat"
    assert cfg["load"]["mode"] == "concurrency"
    (p,) = sv["points"]
    assert set(p) >= POINT_KEYS and p["label"] == "concurrency=1"
    assert set(p["ttft_ms"]) == DISTRIBUTION_KEYS
    assert p["ttft_ms"]["p50"] == pytest.approx(TTFT) and p["e2e_ms"]["p99"] == pytest.approx(E2E)
    assert p["requests"] == {
        "measured": N,
        "ok": N - 1,
        "failed": 1,
        "errors": {"HTTP 500: scripted failure": 1},
    }
    assert p["throughput"]["good_fraction"] == pytest.approx(0.9)
    assert p["dispatch_delay_ms"]["max"] == pytest.approx(3.0)
    assert sv["sweep"] is None and sv["summary_present"] is True
    sm = sv["server_metrics"]
    assert sm["scrapes"] == 2
    assert (sm["running_max"], sm["waiting_max"], sm["kv_cache_usage_max"]) == (5, 1, 0.7)
    assert sm["generation_tokens_delta"] == 144 and sm["prefix_cache_hit_rate"] == 0.25
    assert sm["by_point"] == [
        {
            "point": 0,
            "scrapes": 2,
            "running_max": 5.0,
            "waiting_max": 1.0,
            "kv_cache_usage_max": 0.7,
        }
    ]
    # the model-run sections that do not apply are null or empty, never made up
    assert r["summary"]["latency_ms"] is None and r["summary"]["throughput"] is None
    assert r["top_ops"] == [] and r["metrics"] is None and r["top_kernels"] == []
    assert r["bottleneck"] is None and r["roofline"] == [] and r["recommendations"] == []
    assert r["roofline_summary"] is None


def test_json_keys_match_the_documentation(single: Path, sweep: Path) -> None:
    doc = (DOCS / "report-json.md").read_text()
    documented = set(re.findall(r"^\| `serving\.(\w+)(?:\[\])?` \|", doc, re.MULTILINE))
    assert documented == {
        "config",
        "summary_present",
        "points",
        "sweep",
        "warnings",
        "server_metrics",
    }
    assert re.search(r"^\| `kind` \|", doc, re.MULTILINE)
    for path in (single, sweep):
        sv = build_report(Session.load(path))["serving"]
        assert documented == set(sv)
    knee = build_report(Session.load(sweep))["serving"]["sweep"]["knee"]
    assert set(knee) == {"index", "load", "throughput", "next_gain_per_doubling"}
    assert (knee["index"], knee["load"]) == (1, 2.0)


def test_a_model_run_report_has_no_serving_section(tmp_path: Path) -> None:
    # the keys a model run's report had before serving reports existed, and no others
    r = build_report(make_bundle(tmp_path, [1.0, 1.1, 0.9]))
    assert "kind" not in r and "serving" not in r


def test_a_benchmark_without_its_summary_says_so(no_summary: Path) -> None:
    r = build_report(Session.load(no_summary))
    assert r["serving"]["points"] == [] and r["serving"]["summary_present"] is False
    assert any("no serving summary" in w for w in r["warnings"])
    assert "no load point was measured" in _terminal(no_summary)


# -- HTML -------------------------------------------------------------------------------------


def _svg(html: str, chart_id: str) -> ET.Element:
    m = re.search(rf'<svg id="{re.escape(chart_id)}".*?</svg>', html, re.DOTALL)
    assert m, f"no chart {chart_id}"
    return ET.fromstring(m.group(0))


def _by_class(root: ET.Element, tag: str, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG_NS}{tag}") if cls in (e.get("class") or "").split()]


def test_html_charts_of_one_point(single: Path) -> None:
    html = HtmlRenderer().render(Session.load(single))
    assert html.startswith("<!DOCTYPE html>") and "AACO serving report: fake-llm" in html
    for chart in ("ttft-hist", "tpot-hist", "itl-hist", "e2e-hist"):
        assert _svg(html, chart) is not None
    timeline = _svg(html, "request-timeline")
    bars = _by_class(timeline, "g", "req")
    assert len(bars) == N
    assert sorted(int(b.get("data-request") or -1) for b in bars) == list(range(N))
    failed = [b for b in bars if _by_class(b, "rect", "failed")]
    assert [b.get("data-request") for b in failed] == [str(FAILED)]
    queued = [b for b in bars if _by_class(b, "rect", "queued")]
    assert [b.get("data-request") for b in queued] == [str(LATE)]
    assert "All 10 requests, in send order" in html
    # in flight, the server's queue and KV cache on the timeline's axis
    for chart in ("serving-requests", "serving-kv-cache"):
        assert _svg(html, chart).get("data-align") == "serving"
    assert 'id="table-latency"' in html and "TTFT\np50" in html
    # self-contained
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"(?!data:)", html)
    assert "https://" not in html


def test_html_caps_the_request_timeline(tmp_path: Path) -> None:
    n = MAX_REQUEST_BARS + 100
    path = make_serving_bundle(tmp_path, scripted_results(n, gap_ms=1.0, output_tokens=4)).path
    html = HtmlRenderer().render(Session.load(path))
    assert len(_by_class(_svg(html, "request-timeline"), "g", "req")) == MAX_REQUEST_BARS
    assert f"{MAX_REQUEST_BARS} of {n} requests drawn" in html


def test_html_of_a_sweep_draws_the_curve(sweep: Path) -> None:
    html = HtmlRenderer().render(Session.load(sweep))
    for chart_id in ("sweep-ttft", "sweep-e2e"):
        curve = _svg(html, chart_id)
        assert len(_by_class(curve, "polyline", "series")) == 2  # p50, p99
        assert len(_by_class(curve, "circle", "pt")) == 6  # 3 points each
        (mark,) = _by_class(curve, "g", "mark")
        assert "knee: concurrency=2" in "".join(mark.itertext())
    tput = _svg(html, "sweep-throughput")
    assert len(_by_class(tput, "circle", "pt")) == 3 and len(_by_class(tput, "g", "mark")) == 1
    for chart_id in ("ttft-cdf", "tpot-cdf", "itl-cdf", "e2e-cdf"):
        assert len(_by_class(_svg(html, chart_id), "polyline", "series")) == 3  # per point
    assert 'id="sweep-goodput"' not in html  # no SLO: no goodput


def test_html_of_unknown_figures(unknown_tpot: Path) -> None:
    html = HtmlRenderer().render(Session.load(unknown_tpot))
    assert 'id="tpot-hist"' not in html and 'id="itl-hist"' not in html
    assert "TPOT: time per output token after the first: unknown (no request has it)" in html


# -- Perfetto ---------------------------------------------------------------------------------


def test_perfetto_one_track_per_request_with_exact_slices(single: Path) -> None:
    text = export_perfetto(Session.load(single)).decode()
    events = json.loads(text)["traceEvents"]
    names = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"
    }
    tracks = {v: k for k, v in names.items() if v.startswith("request ")}
    assert sorted(tracks) == sorted(f"request {i}" for i in range(N))
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert procs[tracks["request 0"][0]] == "requests, concurrency=1 [host monotonic clock]"

    def slices(i: int) -> list[tuple[str, float]]:
        key = tracks[f"request {i}"]
        xs = [e for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) == key]
        return [(e["name"], e["dur"]) for e in sorted(xs, key=lambda e: e["ts"])]

    assert slices(0) == [("prefill", TTFT * 1000), ("decode", (E2E - TTFT) * 1000)]
    assert slices(FAILED) == [("failed", 1000.0)]
    assert slices(LATE) == [("queued", 3000.0), ("prefill", 20000.0), ("decode", 75000.0)]
    assert '"dur":20000.000' in text and '"dur":75000.000' in text  # exact decimals
    instants = [e for e in events if e["ph"] == "i" and (e["pid"], e["tid"]) == tracks["request 0"]]
    assert len(instants) == 17 and {e["s"] for e in instants} == {"t"}  # role + 16 tokens
    assert sum(e["args"].get("tokens", 0) for e in instants) == 16
    counters: dict[str, list[float]] = {}
    for e in events:
        if e["ph"] == "C":
            counters.setdefault(e["name"], []).extend(e["args"].values())
    assert counters["server running"] == [5.0, 1.0]
    assert counters["server KV-cache usage"] == [70.0, 20.0]
    # at 90 ms all 10 were sent and none had ended but the failed one (at 31 ms)
    assert max(counters["in-flight"]) == N - 1 and counters["in-flight"][-1] == 0
    assert procs[1].startswith("aaco llm bench")


# -- commands ---------------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    captured = capsys.readouterr()
    assert exc.value.code == 0, captured.err
    assert "Traceback" not in captured.err
    return captured.out


def test_commands_read_a_serving_bundle(
    single: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bundle"
    shutil.copytree(single, path)
    assert "Latency per load point" in _cli(capsys, "report", "--session", str(path))
    report = json.loads(_cli(capsys, "report", "--session", str(path), "--format", "json"))
    assert report["serving"]["points"][0]["label"] == "concurrency=1"
    _cli(capsys, "report", "--session", str(path), "-o", str(tmp_path / "r.html"))
    assert 'id="request-timeline"' in (tmp_path / "r.html").read_text()
    _cli(capsys, "export", "perfetto", "--session", str(path), "-o", str(tmp_path / "t.json"))
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    out = _cli(capsys, "analyze", "--session", str(path))
    assert "AACO serving benchmark" in out
    # the analyses that need a model run skipped it, without a failure
    assert not (path / ROOFLINE_FILE).exists() and not (path / BOTTLENECK_FILE).exists()
    assert json.loads((path / "session.json").read_text())["failures"] == []
    assert "TTFT" in (path / "report" / "report.txt").read_text()


def test_diagnosis_skips_a_serving_bundle(single: Path, tmp_path: Path) -> None:
    path = tmp_path / "bundle"
    shutil.copytree(single, path)
    result = diagnose_bundle(path, auto_calibrate=False)
    assert result["skipped"] == ["roofline", "critical_path", "bottleneck", "recommendations"]
    assert result["roofline"] is None and result["bottleneck"] is None
    assert not (path / "metrics" / "op_costs.parquet").exists()


def test_listing_shows_ttft_for_a_serving_session() -> None:
    base: dict[str, Any] = {
        "id": "s",
        "model": "m",
        "backend": "openai-http",
        "status": "completed",
    }
    row = {**base, "kind": "serving", "ttft_p50_ms": 20.0, "ttft_p99_ms": 21.5}
    text = render_sessions_table([row, {**base, "kind": "serving"}], width=160)
    assert "20.000 TTFT" in text and "21.500 TTFT" in text and "unknown" in text


# -- every renderer over every kind of serving bundle -----------------------------------------


@pytest.mark.parametrize("name", renderer_names())
@pytest.mark.parametrize("bundle", ["single", "sweep", "unknown_tpot", "all_failed", "no_summary"])
def test_every_renderer_renders_serving_bundles(
    name: str, bundle: str, request: pytest.FixtureRequest
) -> None:
    path: Path = request.getfixturevalue(bundle)
    renderer = create_renderer(name)
    out = renderer.render(Session.load(path))
    assert out.strip()
    if renderer.output_file_extension == ".json":
        json.loads(out)
