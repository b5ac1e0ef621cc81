"""A GPU session's roofline uses the kernels' GPU time, never the nodes' host launch times.

The bundle is a real `aaco run` of a model built like the one ONNX Runtime's CUDA execution
provider profiled in tests/importers/fixtures/ort/cuda_ep_profile.json (conv1 -> relu1 ->
flatten -> fc; two runs whose Node events last 95 / 18 / 40 us on the host while their Kernel
events last 31 / 4 / 9 + 2 us on the GPU), turned into the CUDA session that profile came
from: provider CUDAExecutionProvider, an H100 in env.json, the profile's ops and kernels.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pyarrow.parquet as pq
import pytest
from onnx import TensorProto, helper, numpy_helper
from tests.cli.test_cli import aaco

from aaco.diagnose import diagnose_bundle
from aaco.importers.ort_profile import parse_ort_profile
from aaco.ingest import ingest_profile_kernels
from aaco.session.bundle import write_table
from aaco.session.schema import OPS

PROFILE = Path(__file__).parent / "importers" / "fixtures" / "ort" / "cuda_ep_profile.json"
# conv1: 16 output channels x 32 x 32 positions x 3 x 3 x 3 MACs, 2 FLOPs per MAC
CONV_FLOPS = 2 * 16 * 32 * 32 * 3 * 3 * 3


def _model(path: Path) -> Path:
    import numpy as np

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 3, 3, 3)).astype("float32"), "w")
    fw = numpy_helper.from_array(rng.standard_normal((10, 16384)).astype("float32"), "fw")
    nodes = [
        helper.make_node("Conv", ["X", "w"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu1"),
        helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw"], ["Y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cuda_ep_profile_model",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 10])],
        [w, fw],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def cpu_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("gpu_time")
    proc = aaco(
        "run", "--model", str(_model(tmp / "m.onnx")), "--warmup", "2", "--iterations", "5",
        "--profile-iterations", "2", "--report", "none", "--no-calibrate", "-o", str(tmp / "s"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return (tmp / "s" / "latest").resolve()


def _as_cuda_session(src: Path, dst: Path, with_kernels: bool) -> Path:
    import shutil

    shutil.copytree(src, dst)
    meta = json.loads((dst / "session.json").read_text())
    meta["backend"]["provider"] = "CUDAExecutionProvider"
    (dst / "session.json").write_text(json.dumps(meta))
    env_file = next(p for p in (dst / "env.json", dst / "environment" / "env.json") if p.is_file())
    env = json.loads(env_file.read_text())
    env["gpus"] = {"devices": [{"vendor": "nvidia", "index": 0, "name": "NVIDIA H100 80GB HBM3"}]}
    env_file.write_text(json.dumps(env))
    prof = parse_ort_profile(PROFILE)
    write_table(dst / OPS.path, prof.ops)
    for stale in ("profiler/kernels.parquet", "attribution/kernel_groups.parquet"):
        (dst / stale).unlink(missing_ok=True)
    if with_kernels:
        ingest_profile_kernels(dst, prof.kernels, prof.memcpy, prof.ops)
    return dst


def _node_rows(bundle: Path) -> dict[str, dict[str, object]]:
    rows = pq.read_table(bundle / "metrics" / "roofline.parquet").to_pylist()
    return {str(r["name"]): r for r in rows if r["level"] == "node"}


def test_gpu_roofline_uses_the_attributed_kernel_time(cpu_bundle: Path, tmp_path: Path) -> None:
    bundle = _as_cuda_session(cpu_bundle, tmp_path / "cuda", with_kernels=True)
    result = diagnose_bundle(bundle, auto_calibrate=False)
    summary = result["roofline"]
    assert summary["ceilings"]["device"] == "H100 SXM"
    assert summary["ceilings"]["source"] == "published"
    assert summary["time_basis"] == "partial_gpu"  # the two copy nodes launch no kernel
    rows = _node_rows(bundle)
    # per iteration: the kernels' durations, not the Node events' 95 / 18 / 40 us
    assert rows["conv1"]["time_ns"] == 31_000
    assert rows["relu1"]["time_ns"] == 4_000
    assert rows["fc"]["time_ns"] == 11_000  # sgemm 9 us + bias add 2 us
    assert rows["conv1"]["flops"] == CONV_FLOPS
    assert rows["conv1"]["achieved_flops_per_s"] == pytest.approx(CONV_FLOPS / 31e-6)
    # conv1's kernel is cuDNN's implicit_convolve_sgemm, a SIMT FP32 kernel: H100's FP32
    # vector roof (66.9 TF), not the TF32 tensor-core one (494.7 TF) an unknown FP32 op gets
    assert rows["conv1"]["peak_flops_per_s"] == pytest.approx(66.9e12)
    assert rows["conv1"]["bound"] is not None
    for copy in ("X_Memcpy", "Y_Memcpy"):
        assert rows[copy]["time_ns"] is None and rows[copy]["bound"] is None
    assert "GPU time unknown for 2 operators" in (summary["time_note"] or "")
    assert (summary["rows_timed"], summary["rows_untimed"]) == (3, 2)


def test_without_kernel_times_the_gpu_roofline_is_unknown(cpu_bundle: Path, tmp_path: Path) -> None:
    bundle = _as_cuda_session(cpu_bundle, tmp_path / "cuda", with_kernels=False)
    result = diagnose_bundle(bundle, auto_calibrate=False)
    summary = result["roofline"]
    assert summary["time_basis"] == "unknown"
    assert summary["time_share_unknown"] == 1.0
    assert summary["time_share_memory_bound"] == 0 and summary["time_share_compute_bound"] == 0
    assert summary["points"] == [] and summary["top_headroom"] == []
    rows = _node_rows(bundle)
    assert rows and all(r["time_ns"] is None and r["achieved_flops_per_s"] is None
                        for r in rows.values())  # fmt: skip
    signal = result["bottleneck"]["signals"]["memory_bound_time_share"]
    assert signal["value"] is None and "GPU time per operator unknown" in signal["missing"]
    # no recommendation rests on a roofline figure
    assert not any(r["class"] in ("memory-bound", "compute-bound")
                   for r in result["recommendations"])  # fmt: skip


ROCPROF_RUN = Path(__file__).parent / "importers" / "fixtures" / "rocprof" / "v3" / "run" / "node1"
KINETO = Path(__file__).parent / "importers" / "fixtures" / "kineto"


def _import(src: Path, root: Path) -> dict[str, object]:
    proc = aaco("import", str(src), "-o", str(root))
    assert proc.returncode == 0, proc.stderr
    bundle = (root / "latest").resolve()
    return json.loads((bundle / "metrics" / "roofline.json").read_text())


def test_an_imported_rocprofv3_run_gets_the_ceilings_of_the_gpu_it_names(tmp_path: Path) -> None:
    # agent_info.csv: two "AMD Instinct MI300X" agents, gfx942, 304 CUs
    summary = _import(ROCPROF_RUN, tmp_path / "s")
    ceilings = summary["ceilings"]
    assert isinstance(ceilings, dict)
    assert (ceilings["device"], ceilings["source"]) == ("MI300X", "published")
    assert ceilings["bytes_per_s"] == 5.3e12
    ident = summary["device_identity"]
    assert isinstance(ident, dict) and (ident["arch"], ident["compute_units"]) == ("gfx942", 304)
    assert summary["time_basis"] == "gpu" and summary["ceilings_note"] is None


def test_an_imported_trace_of_an_unknown_gpu_says_why_without_blaming_this_machine(
    tmp_path: Path,
) -> None:
    # a real Kineto trace of an "NVIDIA A100-PG509-200" with 40 GB: no published entry
    summary = _import(KINETO / "hta_event_sync_multi_stream.json.gz", tmp_path / "s")
    assert summary["ceilings"] is None
    note = str(summary["ceilings_note"])
    assert "NVIDIA A100-PG509-200" in note and "matches no published entry" in note
    # and a ROCm Kineto trace whose GPU is only "AMD Radeon Graphics" (104 CUs, 64 GB)
    summary = _import(KINETO / "hta_mi250_rocm6.2_train.json.gz", tmp_path / "t")
    ceilings = summary["ceilings"]
    assert isinstance(ceilings, dict)
    assert ceilings["device"] == "MI210 or one MI250 GCD (same figures)"
    assert ceilings["bytes_per_s"] == 1.6e12
