"""Real sessions for the regress tests: `aaco run` on MatMul chains, plus bundles derived from
a real one with constructed latencies (for verdicts and histories known by construction)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from tests.cli.test_cli import aaco
from tests.onnx_models import make_matmul_chain

from aaco.analysis.stats import summarize_iterations
from aaco.session.bundle import Session, write_table


@dataclass
class Sessions:
    root: Path
    base: Path
    same: Path
    slow: Path


def _run(model: Path, root: Path, tag: str) -> Path:
    proc = aaco(
        "run", "--model", str(model), "--warmup", "10", "--iterations", "120",
        "--threads", "1", "--profile-iterations", "3", "--report", "none",
        "--tag", tag, "-o", str(root),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return (root / "latest").resolve()


@pytest.fixture(scope="session")
def regress_sessions(tmp_path_factory: pytest.TempPathFactory) -> Sessions:
    """Two runs of one model and one run of a materially slower variant of it (the same
    model name: a 4x deeper chain saved under the same file name)."""
    tmp = tmp_path_factory.mktemp("regress")
    (tmp / "v1").mkdir()
    (tmp / "v2").mkdir()
    fast = make_matmul_chain(tmp / "v1" / "net.onnx", 6, 512, 64)
    slow = make_matmul_chain(tmp / "v2" / "net.onnx", 24, 512, 64)
    root = tmp / "sessions"
    return Sessions(
        root=root,
        base=_run(fast, root, "base"),
        same=_run(fast, root, "same"),
        slow=_run(slow, root, "slow"),
    )


def derived_session(
    source: Path,
    root: Path,
    session_id: str,
    latencies_ms: np.ndarray,  # type: ignore[type-arg]
    created_utc: str | None = None,
) -> Path:
    """A copy of a real bundle whose measured iterations are replaced by ``latencies_ms``
    (summary recomputed with AACO's own code), published under ``root``."""
    day = f"{session_id[0:4]}-{session_id[4:6]}-{session_id[6:8]}"
    dst = root / day / session_id
    shutil.copytree(source, dst)
    s = Session.load(dst)
    iters = s.iters()
    assert iters is not None
    n = len(latencies_ms)
    ns = (np.asarray(latencies_ms) * 1e6).astype(np.int64)
    start = np.cumsum(np.r_[0, ns[:-1]]) + 1_000_000
    cols = {}
    for f in iters.schema:
        if f.name == "phase":
            cols[f.name] = pa.array(["measured"] * n, f.type)
        elif f.name == "iteration":
            cols[f.name] = pa.array(np.arange(n), f.type)
        elif f.name == "latency_ns":
            cols[f.name] = pa.array(ns, f.type)
        elif f.name == "start_ns":
            cols[f.name] = pa.array(start, f.type)
        elif f.name == "end_ns":
            cols[f.name] = pa.array(start + ns, f.type)
        else:
            cols[f.name] = pa.nulls(n, f.type)
    table = pa.table(cols, schema=iters.schema)
    write_table(dst / "metrics" / "inference_iters.parquet", table)
    summary = json.loads((dst / "metrics" / "inference_summary.json").read_text())
    summary.update(summarize_iterations(table, 1))
    # the source's telemetry did not watch these latencies: its CPU figures are unknown
    # here (a busy moment while the source ran must not judge the derived session)
    tel = summary.get("telemetry") or {}
    for key in ("sys_cpu_pct_mean", "proc_cpu_pct_mean"):
        if key in tel:
            tel[key] = None
    # nor did its scheduler or GPU telemetry (a derived session has none of its own)
    summary["sched"] = None
    summary["gpu"] = None
    (dst / "metrics" / "inference_summary.json").write_text(json.dumps(summary))
    meta = json.loads((dst / "session.json").read_text())
    meta["session_id"] = session_id
    if created_utc:
        meta["created_utc"] = created_utc
    (dst / "session.json").write_text(json.dumps(meta))
    return dst


def with_run_setting(source: Path, dst: Path, key: str, value: object) -> Path:
    """A copy of a bundle whose ``session.json`` run setting ``key`` is ``value``."""
    shutil.copytree(source, dst)
    meta = json.loads((dst / "session.json").read_text())
    meta["run"][key] = value
    (dst / "session.json").write_text(json.dumps(meta))
    return dst


HOSTILE = "<script>alert(1)</script>"


@pytest.fixture(scope="session")
def web_root(regress_sessions: Sessions, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sessions root for the report and web tests: the regress sessions, plus a real run of
    a model whose node is named ``<script>alert(1)</script>``, tagged with markup too."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    tmp = tmp_path_factory.mktemp("web")
    root = tmp / "sessions"
    shutil.copytree(regress_sessions.root, root, symlinks=True)
    w = numpy_helper.from_array(np.eye(16, dtype=np.float32), "w")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name=HOSTILE),
            helper.make_node("Relu", ["h"], ["y"], name="relu & <b>bold</b>"),
        ],
        "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    path = tmp / "hostile.onnx"
    onnx.save(model, str(path))
    proc = aaco(
        "run", "--model", str(path), "--warmup", "3", "--iterations", "30",
        "--profile-iterations", "3", "--report", "none", "--tag", HOSTILE, "-o", str(root),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return root
