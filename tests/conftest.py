"""Shared fixtures: an isolated model cache and sessions root, and tiny hand-made ONNX models."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One model cache for the whole test run, never the user's."""
    cache = tmp_path_factory.mktemp("aaco-cache")
    old = os.environ.get("AACO_CACHE_DIR")
    os.environ["AACO_CACHE_DIR"] = str(cache)
    os.environ.pop("AACO_SESSIONS", None)
    yield cache
    if old is None:
        os.environ.pop("AACO_CACHE_DIR", None)
    else:
        os.environ["AACO_CACHE_DIR"] = old


def save_model(model: onnx.ModelProto, path: Path) -> Path:
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def make_matmul_chain(
    path: Path, n_layers: int = 3, width: int = 64, batch: str | int = "batch"
) -> Path:
    """x[batch, width] -> (MatMul + Add + Relu) x n_layers -> y; symbolic batch by default."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    for i in range(n_layers):
        w = numpy_helper.from_array(rng.standard_normal((width, width), dtype=np.float32), f"w{i}")
        b = numpy_helper.from_array(np.zeros(width, dtype=np.float32), f"b{i}")
        inits += [w, b]
        nodes += [
            helper.make_node("MatMul", [prev, f"w{i}"], [f"mm{i}"], name=f"layer{i}.matmul"),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"], name=f"layer{i}.add"),
            helper.make_node("Relu", [f"add{i}"], [f"h{i}"], name=f"layer{i}.relu"),
        ]
        prev = f"h{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return save_model(model, path)


@pytest.fixture
def chain_model(tmp_path: Path) -> Path:
    return make_matmul_chain(tmp_path / "chain.onnx")


@pytest.fixture
def sessions_root(tmp_path: Path) -> Path:
    return tmp_path / "sessions"
