"""The labeled workload zoo: each model builds, checks, and has the work its class needs."""

from __future__ import annotations

import onnx
import pytest

from aaco.analysis.cost import cost_summary, model_costs
from aaco.config import load_registry
from aaco.models.catalog import describe_models
from aaco.models.registry import build_cached

EXPECTED = {
    "zoo-launch": "launch-bound",
    "zoo-compute": "compute-bound",
    "zoo-memory": "memory-bound",
    "zoo-latency": "latency-bound",
    "zoo-host": "cpu-bound",
    "zoo-warmup": "warmup-instability",
}


def test_registry_lists_the_zoo_with_classes() -> None:
    rows = {r["name"]: r for r in describe_models(load_registry(None))}
    assert {n: rows[n]["expected_bottleneck"] for n in EXPECTED} == EXPECTED
    assert rows["zoo-host"]["preprocess"] == "image"
    assert rows["resnet50"]["expected_bottleneck"] is None


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_zoo_model_builds_and_has_its_signature(name: str) -> None:
    entry = load_registry(None).models[name]
    path = build_cached(entry.builder or "", entry.params)
    onnx.checker.check_model(onnx.load(str(path)))
    s = cost_summary(model_costs(path, {k: list(v) for k, v in entry.input_shapes.items()}))
    if name == "zoo-launch":
        assert s["nodes"] == 400 and s["flops"] < 10_000  # ~16 FLOPs per op
    elif name == "zoo-compute":
        # 8 x 2 x 256 x 1024 x 1024 FLOPs; traffic 8 x (1 + 4 + 1) MiB: ~85 FLOP/B
        assert s["flops"] == 8 * 2 * 256 * 1024 * 1024
        assert s["flops"] / s["bytes"] > 80
    elif name == "zoo-memory":
        # 4 ops x 32 Mi elements, 1 FLOP and 8 bytes (+ a 4-byte scalar) each
        assert s["flops"] == 4 * 32 * 1024 * 1024
        assert s["flops"] / s["bytes"] == pytest.approx(0.125, rel=1e-6)
    elif name == "zoo-latency":
        assert s["flops"] < 1000
    elif name == "zoo-warmup":
        assert s["bytes"] >= 2 * 128 * 1024 * 1024  # the buffer written and read once
