"""Reports of ``aaco llm run`` bundles (an in-process generation): the load's label, the
header, no client health, and the prefill/decode operator split in every renderer, over real
bundles of the tiny built-in GPT-2 (profiled and ``--no-profile``) and hand-edited copies."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from aaco.cli import main
from aaco.report.html import HtmlRenderer
from aaco.report.json import JsonRenderer
from aaco.report.model import build_report
from aaco.report.perfetto import export_perfetto
from aaco.report.renderers import create_renderer, renderer_names
from aaco.report.serving import fmt_short, load_description, load_label
from aaco.report.terminal import TerminalRenderer
from aaco.session.bundle import Session
from aaco.session.paths import GENERATION_FILE
from aaco.testing import make_serving_bundle, scripted_results

DOCS = Path(__file__).parents[2] / "docs"
SVG_NS = "{http://www.w3.org/2000/svg}"
PROMPT, OUTPUT, ITERATIONS = 8, 4, 2
LABEL = f"batch=1, {PROMPT}+{OUTPUT} tokens"


def _llm_run(root: Path, *extra: str) -> Path:
    """A real ``aaco llm run`` of gpt2-tiny at tiny sizes; the bundle's path."""
    args = ["llm", "run", "--model", "gpt2-tiny", "--prompt-tokens", str(PROMPT)]
    args += ["--output-tokens", str(OUTPUT), "--iterations", str(ITERATIONS)]
    with pytest.raises(SystemExit) as exc:
        main([*args, "-o", str(root), "--report", "none", *extra])
    assert exc.value.code == 0
    return (root / "latest").resolve()


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _llm_run(tmp_path_factory.mktemp("gen-profiled"))


@pytest.fixture(scope="module")
def no_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _llm_run(tmp_path_factory.mktemp("gen-no-profile"), "--no-profile")


def _copy_with(src: Path, tmp: Path, generation: dict[str, Any] | None) -> Path:
    """A copy of ``src`` whose generation.json is ``generation`` (None: removed)."""
    path = tmp / "bundle"
    shutil.copytree(src, path)
    if generation is None:
        (path / GENERATION_FILE).unlink()
    else:
        (path / GENERATION_FILE).write_text(json.dumps(generation))
    return path


@pytest.fixture(scope="module")
def profile_failed(no_profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A profiled run whose profiled pass failed: totals without operators, one error."""
    gen = json.loads((no_profile / GENERATION_FILE).read_text())
    gen["errors"] = ["profiled generation: the profile holds 2 runs, expected 4"]
    path = _copy_with(no_profile, tmp_path_factory.mktemp("gen-failed"), gen)
    meta = json.loads((path / "session.json").read_text())
    meta["run"]["profile"] = True
    (path / "session.json").write_text(json.dumps(meta))
    return path


@pytest.fixture(scope="module")
def no_file(no_profile: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy_with(no_profile, tmp_path_factory.mktemp("gen-no-file"), None)


def _terminal(path: Path) -> str:
    return TerminalRenderer(width=160).render(Session.load(path))


def _rows(text: str, first: str) -> list[list[str]]:
    """The cells of every table row whose first cell is ``first`` (a rich table, no edge)."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 1 and cells[0] == first:
            out.append(cells)
    return out


def _generation(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / GENERATION_FILE).read_text())
    return data


# -- the load, the header, no client ----------------------------------------------------------


def test_a_generate_load_is_labelled_by_batch_and_tokens() -> None:
    load = {"mode": "generate", "batch": 2, "prompt_tokens": 32, "output_tokens": 16}
    assert load_label(load) == "batch=2, 32+16 tokens"
    assert load_description({**load, "warmup": 1, "iterations": 3}) == (
        "in-process generation, batch 2, 32 prompt + 16 output tokens, 3 generations (+ 1 warmup)"
    )
    # what it does not know it says so, never 0
    assert load_label({"mode": "generate"}) == "batch=?, ?+? tokens"


def test_terminal_header_and_labels(profiled: Path) -> None:
    text = _terminal(profiled)
    assert "AACO in-process generation" in text and "AACO serving benchmark" not in text
    assert "model     gpt2-tiny (builtin-pair, 2 layers, 4 heads, vocab 1,000)" in text
    assert "runtime   in-process generation (aaco llm run), onnxruntime, CPUExecutionProvider" in (
        text
    )
    assert f"load      batch 1, {PROMPT} prompt + {OUTPUT} output tokens, {ITERATIONS} " in text
    assert "unknown load" not in text and "load      unknown" not in text
    # latency, throughput, tokens: one row each, named by the load
    assert len(_rows(text, LABEL)) == 3
    # no client: neither its table nor a line about its unknown health
    assert "Client health" not in text and "CPU %" not in text and "health unknown" not in text
    assert "server     none (an in-process run has no server)" in text


def test_json_labels_the_point_and_has_no_client(profiled: Path) -> None:
    r = json.loads(JsonRenderer().render(Session.load(profiled)))
    (point,) = r["serving"]["points"]
    assert point["label"] == LABEL and point["load"]["mode"] == "generate"
    assert all(v in (None, []) for v in point["client"].values())


def test_perfetto_names_the_requests_by_the_load(profiled: Path) -> None:
    events = json.loads(export_perfetto(Session.load(profiled)))["traceEvents"]
    procs = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert f"requests, {LABEL} [host monotonic clock]" in procs


# -- the prefill/decode split -----------------------------------------------------------------


def test_terminal_shows_prefill_and_decode_side_by_side(profiled: Path) -> None:
    text = _terminal(profiled)
    gen = _generation(profiled)
    totals = gen["phase_totals"]
    assert "Prefill vs decode, per run" in text
    assert "per generation (= TTFT)" in text and "per step (≈ TPOT)" in text
    (runs,) = _rows(text, "runs per generation")
    assert runs[1:] == ["1", str(OUTPUT - 1)]
    (wall,) = _rows(text, "wall ms per run (median)")
    assert wall[1:] == [fmt_short(totals[p]["wall_ms_per_run"]) for p in ("prefill", "decode")]
    (share,) = _rows(text, "profiled: operator share")
    assert share[1:] == [
        f"{fmt_short(totals[p]['ops_share_of_wall'], 100)} %" for p in ("prefill", "decode")
    ]
    (twins,) = _rows(text, "requests p50 ms")
    assert twins[1].startswith("TTFT ") and twins[2].startswith("TPOT ")
    # the top operator type of each phase, its share and ms per run, side by side
    assert "Top operator types per phase" in text
    (first,) = _rows(text, "1")
    top = gen["top_ops"]
    assert first[1] == top["prefill"][0]["op_type"] and first[4] == top["decode"][0]["op_type"]
    assert first[2] == fmt_short(top["prefill"][0]["share"], 100)
    ms_step = top["decode"][0]["total_us"] / 1000 / (OUTPUT - 1)
    assert first[6] == fmt_short(ms_step)
    assert f"one profiled generation (1 prefill, {OUTPUT - 1} decode steps)" in text


def test_json_generation_section(profiled: Path) -> None:
    r = build_report(Session.load(profiled))
    g = r["generation"]
    doc = (DOCS / "report-json.md").read_text()
    documented = set(re.findall(r"^\| `generation\.(\w+)(?:\[\])?` \|", doc, re.MULTILINE))
    assert documented == set(g)
    assert re.search(r"^\| `generation` \|", doc, re.MULTILINE)
    assert g["file_present"] and g["split_available"] and g["split_note"] is None
    assert g["profile_requested"] is True and g["errors"] == []
    assert g["phases"] == ["prefill", "decode"]
    assert g["model"]["name"] == "gpt2-tiny" and g["load"]["output_tokens"] == OUTPUT
    file = _generation(profiled)
    assert g["phase_totals"] == file["phase_totals"]
    for phase in g["phases"]:
        types = g["op_types"][phase]
        assert set(types[0]) == {"op_type", "calls", "nodes", "total_us", "share", "ms_per_run"}
        assert sum(t["share"] for t in types) == pytest.approx(1.0)
        ops_ms = file["phase_totals"][phase]["ops_ms_per_run"]
        assert sum(t["ms_per_run"] for t in types) == pytest.approx(ops_ms)
        # the file's five top types are the head of the full list
        assert [t["op_type"] for t in types[:5]] == [t["op_type"] for t in file["top_ops"][phase]]
        nodes = g["top_nodes"][phase]
        assert 0 < len(nodes) <= 15 and nodes[0]["total_us"] >= nodes[-1]["total_us"]
    json.dumps(r, allow_nan=False)


def test_a_benchmark_report_has_a_null_generation(tmp_path: Path) -> None:
    session = make_serving_bundle(tmp_path, scripted_results(3))
    assert build_report(session)["generation"] is None
    assert "Prefill vs decode" not in _terminal(session.path)


def _svg(html: str, chart_id: str) -> ET.Element:
    m = re.search(rf'<svg id="{re.escape(chart_id)}".*?</svg>', html, re.DOTALL)
    assert m, f"no chart {chart_id}"
    return ET.fromstring(m.group(0))


def test_html_has_the_split_and_its_chart(profiled: Path) -> None:
    html = HtmlRenderer().render(Session.load(profiled))
    assert "AACO generation report: gpt2-tiny" in html and 'href="#generation"' in html
    assert 'id="table-phases"' in html and 'id="table-phase-ops"' in html
    assert 'id="table-health"' not in html and "Client" not in html
    chart = _svg(html, "phase-op-shares")
    segs = [g for g in chart.iter(f"{SVG_NS}g") if g.get("class") == "seg"]
    by_bar: dict[str, list[ET.Element]] = {}
    for s in segs:
        by_bar.setdefault(str(s.get("data-bar")), []).append(s)
    assert list(by_bar) == ["prefill", "decode"]
    top = _generation(profiled)["top_ops"]
    for phase, bar in by_bar.items():
        assert sum(float(s.get("data-share") or 0) for s in bar) == pytest.approx(1.0, abs=1e-4)
        # biggest first; one colour per op type in both bars
        assert bar[0].get("data-key") == top[phase][0]["op_type"]
    colors = {
        (s.get("data-key"), rect.get("fill")) for s in segs for rect in s.iter(f"{SVG_NS}rect")
    }
    assert len(colors) == len({k for k, _ in colors})


# -- no split: say so, never zeros ------------------------------------------------------------


def test_no_profile_says_so(no_profile: Path) -> None:
    text = _terminal(no_profile)
    assert "operators  not profiled (the run was asked not to: --no-profile)" in text
    assert "Top operator types per phase" not in text
    (wall,) = _rows(text, "wall ms per run (median)")
    assert "unknown" not in wall[1:]  # the measured runs stand
    for row in ("profiled: wall ms per run", "profiled: operator ms", "profiled: operator share"):
        (cells,) = _rows(text, row)
        assert cells[1:] == ["unknown", "unknown"]
    g = build_report(Session.load(no_profile))["generation"]
    assert g["split_available"] is False and g["profile_requested"] is False
    assert g["op_types"] == {"prefill": [], "decode": []}
    assert g["top_nodes"] == {"prefill": [], "decode": []}
    assert "--no-profile" in g["split_note"]
    html = HtmlRenderer().render(Session.load(no_profile))
    assert 'id="phase-op-shares"' not in html and 'id="table-phase-ops"' not in html
    assert "Operators: not profiled (the run was asked not to: --no-profile)." in html


def test_a_failed_profiled_pass_gives_its_error(profile_failed: Path) -> None:
    g = build_report(Session.load(profile_failed))["generation"]
    assert g["split_available"] is False
    assert g["split_note"] == (
        "no operator split: profiled generation: the profile holds 2 runs, expected 4"
    )
    assert "operators  no operator split: profiled generation:" in _terminal(profile_failed)


def test_a_bundle_without_generation_json(no_file: Path) -> None:
    g = build_report(Session.load(no_file))["generation"]
    assert g["file_present"] is False and g["phases"] == [] and g["model"] == {}
    assert g["split_note"].startswith(f"no {GENERATION_FILE} in this bundle")
    text = _terminal(no_file)
    assert "AACO in-process generation" in text and "model     gpt2-tiny" in text
    assert "Prefill vs decode, per run" not in text
    assert f"operators  no {GENERATION_FILE}" in text


def test_a_hand_written_split_of_top_ops_only(no_profile: Path, tmp_path: Path) -> None:
    """A file with ``top_ops`` and no ``op_split`` (a hand-made one): its types stand."""
    gen = _generation(no_profile)
    gen["phase_totals"]["decode"]["runs_per_generation"] = 4
    gen["top_ops"] = {
        "prefill": [{"op_type": "MatMul", "calls": 2, "nodes": 2, "total_us": 300, "share": 0.6}],
        "decode": [
            {"op_type": "Attention", "calls": 8, "nodes": 2, "total_us": 800, "share": 0.8},
            {"op_type": "MatMul", "calls": 8, "nodes": 2, "total_us": 200, "share": 0.2},
        ],
    }
    path = _copy_with(no_profile, tmp_path, gen)
    meta = json.loads((path / "session.json").read_text())
    meta["run"]["profile"] = True
    (path / "session.json").write_text(json.dumps(meta))
    text = _terminal(path)
    (first,) = _rows(text, "1")
    assert first[1:] == ["MatMul", "60.0", "0.300", "Attention", "80.0", "0.200"]
    (second,) = _rows(text, "2")
    assert second[1:4] == ["", "", ""] and second[4:] == ["MatMul", "20.0", "0.050"]
    chart = _svg(HtmlRenderer().render(Session.load(path)), "phase-op-shares")
    keys = [g.get("data-key") for g in chart.iter(f"{SVG_NS}g") if g.get("class") == "seg"]
    assert keys == ["MatMul", "other", "Attention", "MatMul"]


@pytest.mark.parametrize("name", renderer_names())
@pytest.mark.parametrize("bundle", ["profiled", "no_profile", "profile_failed", "no_file"])
def test_every_renderer_renders_generation_bundles(
    name: str, bundle: str, request: pytest.FixtureRequest
) -> None:
    path: Path = request.getfixturevalue(bundle)
    renderer = create_renderer(name)
    out = renderer.render(Session.load(path))
    assert out.strip()
    if renderer.output_file_extension == ".json":
        json.loads(out)
