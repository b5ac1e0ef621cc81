"""Every renderer names ONNX Runtime's nodes by the original ONNX nodes (a real resnet-tiny
run, which ORT rewrites into NCHWc nodes named ``..._output_0_nchwc``), keeps ORT's name
at hand, and leaves the names of an imported trace alone."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from tests.cli.test_cli import aaco

from aaco.diagnose import diagnose_bundle
from aaco.regress.diff import gather_evidence
from aaco.report.html import HtmlRenderer
from aaco.report.perfetto import export_perfetto
from aaco.report.publish import write_reports
from aaco.report.terminal import TerminalRenderer
from aaco.session.bundle import Session
from aaco.session.calibration import Ceilings

KINETO_CPU = Path(__file__).resolve().parents[1] / "importers" / "fixtures" / "kineto"


@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory) -> Session:
    """A real ``aaco run`` of resnet-tiny, diagnosed against ceilings far above what this
    CPU reaches, so that its Convs are memory- or compute-bound recommendation targets."""
    root = tmp_path_factory.mktemp("names") / "sessions"
    proc = aaco(
        "run", "--model", "resnet-tiny", "--warmup", "3", "--iterations", "20",
        "--profile-iterations", "3", "--threads", "1", "--report", "none", "-o", str(root),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    bundle = (root / "latest").resolve()
    roof = Ceilings("test device", "calibrated", {"float32": 1e13}, 1e12)
    diagnose_bundle(bundle, ceilings=roof)
    write_reports(bundle)
    return Session.load(bundle)


def _expected(session: Session) -> dict[str, tuple[str, str | None]]:
    """(label, original name) of every node ORT ran, from the bundle's own graph (op types of
    the original nodes), not from the code under test: a fused group is named by its one
    Conv; a node standing for one original node by that node; one standing for none by
    ORT's name, marked."""
    nodes = session.table("graph_nodes")
    ops = session.ops()
    assert nodes is not None and ops is not None
    orig = nodes.filter(pc.equal(nodes.column("graph"), "original"))
    names, types = orig.column("node_name").to_pylist(), orig.column("op_type").to_pylist()
    op_type = dict(zip(names, types, strict=True))
    out: dict[str, tuple[str, str | None]] = {}
    for r in ops.select(["node_name", "op_type", "original_nodes"]).to_pylist():
        members = r["original_nodes"]
        if not members:
            out[r["node_name"]] = (r["node_name"] + " (ORT node)", None)
        elif len(members) == 1:
            out[r["node_name"]] = (members[0], members[0])
        else:
            convs = [m for m in members if op_type[m] == "Conv"]
            assert len(convs) == 1 and r["node_name"].endswith("_nchwc"), r
            out[r["node_name"]] = (f"{convs[0]} +{len(members) - 1} fused", convs[0])
    # the model's first Conv, its BatchNormalization and Relu folded into one NCHWc node
    assert out["/relu/Relu_output_0_nchwc"] == ("/conv1/Conv +2 fused", "/conv1/Conv")
    assert any(label.endswith("+3 fused") for label, _ in out.values())  # Add and Relu too
    assert out["/maxpool/MaxPool_output_0_nchwc"] == ("/maxpool/MaxPool",) * 2
    assert out["/fc/Gemm"] == ("/fc/Gemm",) * 2
    assert out["ReorderOutput"] == ("ReorderOutput (ORT node)", None)
    return out


def test_json_rows_and_recommendations_name_the_original_convs(resnet: Session) -> None:
    expected = _expected(resnet)
    report = json.loads((resnet.path / "report" / "report.json").read_text())
    rows = [
        *report["top_ops"],
        *report["roofline"],
        *report["bottleneck"]["per_op"],
        *report["roofline_summary"]["top_headroom"],
    ]
    assert len(rows) >= 30
    for r in rows:
        assert "_nchwc" not in r["label"], r
        assert (r["label"], r["original_name"]) == expected[r["name"]], r
    # bottleneck.json itself carries the labels (written by the diagnosis)
    verdict = json.loads((resnet.path / "metrics" / "bottleneck.json").read_text())
    assert all("_nchwc" not in x["label"] for x in verdict["per_op"])
    recs = json.loads((resnet.path / "metrics" / "recommendations.json").read_text())
    assert report["recommendations"] == recs
    bound = [x for x in recs if x["class"] in ("memory-bound", "compute-bound")]
    assert bound, [x["class"] for x in recs]
    for x in recs:
        assert not any("_nchwc" in t for t in x["target"]), x["target"]
        for node in x.get("target_nodes", []):
            assert (node["label"], node["original_name"]) == expected[node["name"]]
    for x in bound:
        shown = [t for t in x["target"] if not t.startswith("+")]  # "+N more Conv nodes"
        assert shown == [n["label"] for n in x["target_nodes"]]
    # the Conv items: ORT's NCHWc nodes, shown by their original Convs
    convs = [x for x in bound if "Conv" in x["action"]]
    assert convs and all(n["name"].endswith("_nchwc") for x in convs for n in x["target_nodes"])


def test_terminal_tables_show_original_names_and_ort_names_when_wide(resnet: Session) -> None:
    narrow = (resnet.path / "report" / "report.txt").read_text()  # 110 columns
    assert "/conv1/Conv +2 fused" in narrow
    assert "_nchwc" not in narrow and "ORT name" not in narrow
    wide = TerminalRenderer(width=160).render(resnet)
    assert wide.count("ORT name") >= 2  # top operators and roofline
    line = next(x for x in wide.splitlines() if x.startswith("/conv1/Conv +2 fused"))
    assert "/relu/Relu_output_0_nchwc" in line


class _Marks(HTMLParser):
    """Bars, icicle cells and roofline points of one page: their attributes and hover text."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: list[dict[str, Any]] = []
        self.chart = ""
        self._open: dict[str, Any] | None = None
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "svg":
            self.chart = a.get("id") or ""
        if a.get("class") in ("bar", "cell", "pt"):
            self._open = {"chart": self.chart, **a, "title": ""}
            self.marks.append(self._open)
        self._in_title = tag == "title" and self._open is not None

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            self._open = None

    def handle_data(self, data: str) -> None:
        if self._in_title and self._open is not None:
            self._open["title"] += data


def test_html_charts_label_by_original_node_with_ort_name_on_hover(resnet: Session) -> None:
    expected = _expected(resnet)
    parser = _Marks()
    parser.feed(HtmlRenderer().render(resnet))
    by_chart: dict[str, list[dict[str, Any]]] = {}
    for m in parser.marks:
        by_chart.setdefault(m["chart"], []).append(m)
    assert {"ops-bars", "icicle", "roofline-chart"} <= set(by_chart)
    checked = 0
    for chart in ("ops-bars", "icicle", "roofline-chart"):
        for m in by_chart[chart]:
            assert "_nchwc" not in m["data-name"], m
            node = m.get("data-node")
            if node is None:
                assert "ORT node:" not in m["title"]
                continue
            label = expected[node][0]
            assert m["data-name"] == label and m["title"].startswith(label)
            assert m["title"].endswith(f"\nORT node: {node}")
            checked += 1
    assert checked >= 30
    page = HtmlRenderer().render(resnet)
    # the recommendations name their targets' ORT nodes on hover too
    assert re.search(r'<td title="ORT nodes: [^"]*_nchwc[^"]*">/', page)
    text = re.sub(r'<title>.*?</title>|(data-node|title)="[^"]*"', "", page, flags=re.S)
    assert "_nchwc" not in text  # ORT's names only on hover


def test_perfetto_slices_are_original_names_with_the_ort_node_in_args(resnet: Session) -> None:
    expected = _expected(resnet)
    events = json.loads(export_perfetto(resnet))["traceEvents"]
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "op"]
    assert ops
    for e in ops:
        node = e["args"].get("ort_node")
        assert "_nchwc" not in e["name"]
        assert e["name"] == expected[node or e["name"]][0]
    reorder = [e for e in ops if e["args"].get("ort_node") == "ReorderOutput"]
    assert reorder and all(e["name"] == "ReorderOutput (ORT node)" for e in reorder)
    gemm = [e for e in ops if e["name"] == "/fc/Gemm"]
    assert gemm and all("ort_node" not in e["args"] for e in gemm)  # same name in both graphs


def test_diff_movers_carry_labels(resnet: Session) -> None:
    expected = _expected(resnet)
    movers = gather_evidence(resnet, resnet)["operators"]["top_movers"]
    assert movers
    for m in movers:
        assert "_nchwc" not in m["label"]
        assert (m["label"], m["original_name"]) == expected[m["name"]]


def test_imported_kineto_trace_keeps_its_names(tmp_path: Path) -> None:
    proc = aaco(
        "import", str(KINETO_CPU / "cpu_mlp.json.gz"), "-o", str(tmp_path), "--format", "none"
    )
    assert proc.returncode == 0, proc.stderr
    session = Session.load(tmp_path / "latest")
    report = json.loads((session.path / "report" / "report.json").read_text())
    assert [(o["label"], o["original_name"]) for o in report["top_ops"]] == [
        ("aten::linear", None),
        ("aten::relu", None),
    ]
    text = TerminalRenderer(width=160).render(session)
    assert "aten::linear" in text and "ORT name" not in text and "(ORT node)" not in text
    parser = _Marks()
    parser.feed(HtmlRenderer().render(session))
    bars = [m for m in parser.marks if m["chart"] == "ops-bars"]
    assert [m["data-name"] for m in bars] == ["aten::linear", "aten::relu"]
    assert all("data-node" not in m for m in bars)
    slices = json.loads(export_perfetto(session))["traceEvents"]
    assert {e["name"] for e in slices if e.get("cat") == "op"} >= {"aten::linear", "aten::relu"}
