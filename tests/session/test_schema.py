from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from aaco.errors import BundleError
from aaco.session.schema import ALL_TABLES, INFERENCE_ITERS, render_markdown


def test_from_columns_builds_declared_schema() -> None:
    t = INFERENCE_ITERS.from_columns(
        {
            "phase": ["measured"],
            "iteration": [0],
            "start_ns": [10],
            "end_ns": [25],
            "latency_ns": [15],
            "preprocess_ns": [None],
        }
    )
    assert t.schema.equals(INFERENCE_ITERS.schema, check_metadata=False)
    assert t.column("latency_ns").type == pa.int64()


def test_from_columns_rejects_missing_and_unknown_columns() -> None:
    with pytest.raises(ValueError, match="missing columns"):
        INFERENCE_ITERS.from_columns({"phase": ["measured"]})
    with pytest.raises(ValueError, match="unknown"):
        INFERENCE_ITERS.from_columns(
            {
                "phase": [],
                "iteration": [],
                "start_ns": [],
                "end_ns": [],
                "latency_ns": [],
                "preprocess_ns": [],
                "x": [],
            }
        )


def test_conform_casts_and_rejects() -> None:
    raw = pa.table(
        {
            "phase": ["warmup"],
            "iteration": pa.array([0], pa.int64()),
            "start_ns": [1],
            "end_ns": [2],
            "latency_ns": [1],
        }
    )
    assert INFERENCE_ITERS.conform(raw).column("iteration").type == pa.int32()
    with pytest.raises(BundleError, match="lacks columns"):
        INFERENCE_ITERS.conform(raw.drop_columns(["end_ns"]))


def test_conform_reads_a_missing_nullable_column_as_nulls() -> None:
    from aaco.session.schema import ORT_RUNS

    old = pa.table(
        {"iteration": [0], "start_ns": [0], "dur_ns": [5], "node_ns": [4], "node_count": [1]}
    )
    t = ORT_RUNS.conform(old)
    assert t.column("wall_ns").to_pylist() == [None]


def test_every_table_has_units_and_docs() -> None:
    for spec in ALL_TABLES:
        assert spec.doc and spec.path.endswith(".parquet")
        for c in spec.columns:
            assert c.doc, f"{spec.name}.{c.name} lacks a description"
            if c.name.endswith("_ns"):
                assert c.unit == "ns", f"{spec.name}.{c.name} should be in ns"
            if c.name.endswith("_bytes"):
                assert c.unit == "B"


def test_docs_schema_md_is_generated_from_code() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "schema.md"
    assert doc.read_text() == render_markdown(), "run: python scripts/gen_schema_docs.py"
