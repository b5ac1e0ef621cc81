"""Bundles written now have the shape of bundles written before the pipeline redesign
(issue #16): the same files, the same table schemas, the same JSON keys. The recorded shapes
and the commands that wrote them are in tests/fixtures/bundle_shapes/README.md.

JSON files are compared on their object keys to depth 3 (``.run.batch``, not the elements
of lists, whose keys depend on the data) and ``env.json`` on its sections (what is found
depends on the machine). Two files changed on purpose, as docs/architecture.md says:
``runtime/worker_result.json`` holds the harness's fields plus only the runner's own, and
``runtime/worker_spec.json`` names the ``workload`` the harness loads.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aaco.runners.spec import COMMON_RESULT_FIELDS
from aaco.testing import bundle_shape

FIXTURES = Path(__file__).parent / "fixtures" / "bundle_shapes"
DEPTH = {"env.json": 1}

CHANGED_ON_PURPOSE = {
    "runtime/worker_result.json": "runner-specific keys only",
    "runtime/worker_spec.json": "new key: workload",
}
#: added since, on purpose (issue #18): the scheduler collector's tables, the capsule spec
#: (``aaco rerun``), and their keys; telemetry/gpu.parquet only where a GPU source exists
ADDED_FILES = {
    "runtime/capsule.json",
    "telemetry/sched_threads.parquet",
    "telemetry/sched_system.parquet",
    "telemetry/gpu.parquet",
    # issue #19: the critical path, where the bundle has a GPU trace
    "metrics/critical_path.json",
}
ADDED_KEYS = {
    "metrics/inference_summary.json": {".gpu", ".sched"},
    "session.json": {
        ".collectors",
        ".collectors.gpu",
        ".collectors.sched",
        ".capsule",
        ".rerun_of",
    },
    # issue #21: the session options aaco tune searches (backend entry and as applied)
    "runtime/worker_spec.json": {
        ".sentinel",
        ".cpus",
        ".backend.enable_mem_pattern",
        ".backend.enable_cpu_mem_arena",
        ".backend.io_binding",
    },
    "runtime/ort_config.json": {
        ".backend.enable_mem_pattern",
        ".backend.enable_cpu_mem_arena",
        ".backend.io_binding",
        ".session_options.enable_mem_pattern",
        ".session_options.enable_cpu_mem_arena",
        ".session_options.io_binding",
    },
    "runtime/worker_result.json": {
        ".affinity",
        ".sentinel",
        ".session_options.enable_mem_pattern",
        ".session_options.enable_cpu_mem_arena",
        ".session_options.io_binding",
    },
    "report/report.json": {".gpu", ".sched", ".capsule", ".critical_path"},
    # issue #19: a device-side sync's waited-on stream and event-record correlation
    "profiler/api_calls.parquet": {"wait_stream", "wait_correlation_id"},
    # the cpu-contention class and the signals of the GPU and scheduler telemetry
    # issue #20: a file named more than once is read once and listed
    "profiler/import.json": {".repeated"},
    "metrics/bottleneck.json": {
        ".confidence_by_class.cpu-contention",
        ".signals.runqueue_wait_share",
        ".signals.gpu_throttle_share",
        ".evidence_by_class.cpu-contention",
    },
}


def _normalise(shape: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in shape.items():
        if "/ort_profile_raw/" in name:
            out["profiler/ort_profile_raw/ort_profile_<time>.json"] = None
            continue
        if name == "profiler/torch_trace.json.gz" or not isinstance(value, list):
            out[name] = value
            continue
        depth = DEPTH.get(name, 3)
        out[name] = sorted(
            {p for p in value if "[]" not in p and p.count(".") <= depth and p != "$"}
        )
    return out


def _run(tmp_path: Path, *args: str) -> Path:
    proc = subprocess.run(
        [sys.executable, "-m", "aaco", "run", *args, "--report", "none", "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return (tmp_path / "latest").resolve()


def _without_additions(after: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in after.items():
        if name in ADDED_FILES:
            continue
        added = ADDED_KEYS.get(name, set())
        if isinstance(value, list):
            value = [
                p for p in value if p not in added and not any(p.startswith(a + ".") for a in added)
            ]
        elif isinstance(value, dict):  # a table's columns
            value = {k: v for k, v in value.items() if k not in added}
        out[name] = value
    return out


def _compare(before: dict[str, Any], after: dict[str, Any]) -> None:
    after = _without_additions(after)
    assert sorted(after) == sorted(before), "the bundle's files changed"
    for name, old in before.items():
        new = after[name]
        if name == "runtime/worker_result.json":
            common = {f".{f}" for f in COMMON_RESULT_FIELDS} - ADDED_KEYS[name]
            assert common <= set(new), name
            assert set(new) <= set(old), f"{name}: keys no runner wrote before"
        elif name == "runtime/worker_spec.json":
            assert sorted(set(new) - {".workload"}) == old, name
        else:
            assert new == old, name


def test_onnxruntime_bundle_shape_is_unchanged(tmp_path: Path) -> None:
    path = _run(tmp_path, "--model", "mlp", "--iterations", "30")
    before = _normalise(json.loads((FIXTURES / "onnxruntime.json").read_text()))
    _compare(before, _normalise(bundle_shape(path)))


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_torch_bundle_shape_is_unchanged(tmp_path: Path) -> None:
    path = _run(
        tmp_path,
        "--framework",
        "torch",
        "--model",
        "tests.fixtures.torch_models:tiny_mlp",
        "--iterations",
        "20",
    )
    before = _normalise(json.loads((FIXTURES / "torch.json").read_text()))
    _compare(before, _normalise(bundle_shape(path)))


def test_normalise_keeps_object_keys_only() -> None:
    shape = {"a.json": ["$", ".x", ".x.y", ".x.y.z.w", ".l[]", ".l[].k"]}
    assert _normalise(shape) == {"a.json": [".x", ".x.y"]}
