"""Tests of the ONNX Runtime importer plug-in (aaco.importers.ort_trace)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from aaco.errors import InputError
from aaco.importers.base import TABLE_FIELDS, read_head
from aaco.importers.ort_trace import OrtTraceImporter

FIXTURES = Path(__file__).parent / "fixtures" / "ort"
CUDA = FIXTURES / "cuda_ep_profile.json"
ROCM = FIXTURES / "rocm_ep_profile.json"


def _sniff(path: Path) -> bool:
    return OrtTraceImporter.sniff(path, read_head(path))


def test_reads_a_cuda_ep_profile() -> None:
    t = OrtTraceImporter().read(CUDA)
    for name, spec in TABLE_FIELDS.items():
        assert getattr(t, name).schema == spec.schema, name
    assert (t.ops.num_rows, t.kernels.num_rows, t.memcpy.num_rows) == (10, 8, 4)
    assert t.api_calls.num_rows == 0 and t.kernel_counters.num_rows == 0
    assert t.annotations.to_pylist() == [
        {"source": "onnxruntime", "kind": "step", "name": "model_run", "process_id": None,
         "thread_id": None, "device": None, "stream": None, "start_ns": 60_002_000,
         "dur_ns": 260_000, "step": 0},
        {"source": "onnxruntime", "kind": "step", "name": "model_run", "process_id": None,
         "thread_id": None, "device": None, "stream": None, "start_ns": 61_002_000,
         "dur_ns": 260_000, "step": 1},
    ]  # fmt: skip
    assert t.meta["tool"] == "onnxruntime"
    assert t.meta["runs"] == 2
    assert t.meta["session_events_ns"] == {
        "model_loading_uri": 412_000,
        "session_initialization": 52_180_000,
    }
    assert (t.meta["ops"], t.meta["kernels"], t.meta["memcpy"]) == (10, 8, 4)


def test_sniffs_ort_profiles_only(tmp_path: Path) -> None:
    assert _sniff(CUDA) and _sniff(ROCM)
    gz = tmp_path / "p.json.gz"
    gz.write_bytes(gzip.compress(CUDA.read_bytes()))
    assert _sniff(gz)
    kineto = tmp_path / "k.json"
    kineto.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}]}')
    chrome = tmp_path / "c.json"
    chrome.write_text('[{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2}]')
    csv = tmp_path / "k.csv"
    csv.write_text("Kind,Agent_Id,Queue_Id\n")
    for path in (kineto, chrome, csv):
        assert not _sniff(path), path


def test_reads_a_real_cpu_profile(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "prof")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, {"X": np.ones((1, 4), np.float32)})
    path = Path(sess.end_profiling())
    assert _sniff(path)
    t = OrtTraceImporter().read(path)
    assert t.ops.column("node_name").to_pylist() == ["mm"] * 3
    assert t.annotations.column("step").to_pylist() == [0, 1, 2]
    assert t.kernels.num_rows == 0 and t.memcpy.num_rows == 0  # CPU build: no Kernel events
    assert "model_loading_array" in t.meta["session_events_ns"]


def test_truncated_profile_is_an_input_error(tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    text = CUDA.read_text()
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(InputError) as info:
        OrtTraceImporter().read(cut)
    assert str(cut) in str(info.value) and "truncated" in str(info.value)
    assert "\n" not in str(info.value)
