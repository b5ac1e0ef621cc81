"""Tests of the built-in model builders, the registry file and the on-disk model cache."""

from __future__ import annotations

import functools
import importlib.resources
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
import yaml

from aaco.errors import UsageError
from aaco.models import registry
from aaco.models.bert import bert
from aaco.models.gpt2 import gpt2
from aaco.models.resnet import resnet50
from aaco.models.small import mlp, tiny_convnet

ORT_TYPES: dict[str, type[np.generic]] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
}
SMALL_ENTRIES = ["mlp", "tiny-convnet", "bert-tiny", "gpt2-tiny", "gpt2-tiny-decode", "resnet-tiny"]
BERT_TINY: dict[str, Any] = {
    "layers": 2,
    "hidden": 128,
    "heads": 2,
    "intermediate": 512,
    "vocab": 1000,
}
GPT2_TINY: dict[str, Any] = {"layers": 2, "hidden": 128, "heads": 4, "vocab": 1000}


def registry_entries() -> dict[str, dict[str, Any]]:
    text = (importlib.resources.files("aaco") / "configs" / "models.yaml").read_text()
    entries: dict[str, dict[str, Any]] = yaml.safe_load(text)["models"]
    return entries


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def random_feeds(
    sess: ort.InferenceSession, shapes: dict[str, list[int]], high: int = 2
) -> dict[str, npt.NDArray[Any]]:
    rng = np.random.default_rng(0)
    feeds: dict[str, npt.NDArray[Any]] = {}
    for inp in sess.get_inputs():
        kind = ORT_TYPES[inp.type]
        if kind is np.int64:
            feeds[inp.name] = rng.integers(0, high, size=shapes[inp.name], dtype=np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(shapes[inp.name]).astype(kind)
    return feeds


# -- every small registry entry is a valid model that runs ------------------------------------


@pytest.mark.parametrize("entry_name", SMALL_ENTRIES)
def test_small_registry_entry_builds_checks_and_runs(entry_name: str) -> None:
    entry = registry_entries()[entry_name]
    model = registry.build(entry["builder"], entry.get("params", {}))
    assert model.ir_version <= 10
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    onnx.checker.check_model(model)

    names = [n.name for n in model.graph.node]
    assert all(names) and len(set(names)) == len(names)

    sess = session(model)
    assert {i.name for i in sess.get_inputs()} == set(entry["input_shapes"])
    # Token ids stay below every tiny vocabulary and the type-vocab of 2.
    outputs = sess.run(None, random_feeds(sess, entry["input_shapes"]))
    for meta, value in zip(sess.get_outputs(), outputs, strict=True):
        assert value.ndim == len(meta.shape)
        assert np.isfinite(value).all(), meta.name
        for dim, size in zip(meta.shape, value.shape, strict=True):
            if isinstance(dim, int):
                assert dim == size, meta.name


def test_registry_file_format() -> None:
    entries = registry_entries()
    expected = {"resnet50", "bert-base", "gpt2", "gpt2-decode", "mlp", "tiny-convnet"}
    assert expected | {"bert-tiny", "gpt2-tiny", "resnet-tiny"} <= set(entries)
    for name, entry in entries.items():
        assert entry["builder"] in registry.BUILDERS, name
        registry.resolve_params(entry["builder"], entry.get("params"))
        assert entry["dtype"] in ("float32", "float16")
        assert isinstance(entry["warmup"], int) and isinstance(entry["iterations"], int)
        assert isinstance(entry["description"], str) and "\n" not in entry["description"]
        for shape in entry["input_shapes"].values():
            assert all(isinstance(d, int) and d > 0 for d in shape), name


def test_registry_big_entries_name_the_real_inputs() -> None:
    # Same layer and head counts as the full models, tiny widths: same input names and ranks.
    entries = registry_entries()
    small_bert = bert(layers=12, hidden=24, heads=12, intermediate=8, vocab=10)
    decode = gpt2(layers=12, hidden=24, heads=12, vocab=10, n_positions=256, with_past=True)
    cases = [
        ("bert-base", small_bert),
        ("gpt2", gpt2(layers=12, hidden=24, heads=12, vocab=10)),
        ("gpt2-decode", decode),
    ]
    for name, model in cases:
        declared = {i.name: len(i.type.tensor_type.shape.dim) for i in model.graph.input}
        shapes = entries[name]["input_shapes"]
        assert {k: len(v) for k, v in shapes.items()} == declared, name
    for i in range(12):
        for kind in ("key", "value"):
            assert entries["gpt2-decode"]["input_shapes"][f"past.{i}.{kind}"] == [1, 12, 128, 64]


@pytest.mark.parametrize(
    ("builder", "params", "shapes"),
    [
        ("mlp", {}, {"input": [2, 256]}),
        ("tiny-convnet", {}, {"input": [2, 3, 32, 32]}),
        (
            "resnet50",
            {"blocks": [1, 1, 1, 1], "width": 8, "num_classes": 10, "image_size": 64},
            {"input": [1, 3, 64, 64]},
        ),
        (
            "bert",
            BERT_TINY,
            {k: [2, 16] for k in ("input_ids", "attention_mask", "token_type_ids")},
        ),
        ("gpt2", GPT2_TINY, {"input_ids": [2, 8]}),
    ],
)
def test_float16_variant(
    builder: str, params: dict[str, Any], shapes: dict[str, list[int]]
) -> None:
    model = registry.build(builder, {**params, "dtype": "float16"})
    floats = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT]
    assert not floats
    sess = session(model)
    for value in sess.run(None, random_feeds(sess, shapes)):
        assert value.dtype == np.float16
        assert np.isfinite(value).all()


# -- architecture details ------------------------------------------------------------------


def test_resnet_basic_blocks_variant() -> None:
    model = resnet50(depth=18, width=8, num_classes=5, image_size=32)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Conv") == 1 + 8 * 2 + 3  # stem, two per basic block, three projections
    assert ops.count("BatchNormalization") == ops.count("Conv")
    sess = session(model)
    (out,) = sess.run(None, random_feeds(sess, {"input": [1, 3, 32, 32]}))
    assert out.shape == (1, 5)


def test_bert_attention_mask_hides_padding() -> None:
    model = bert(**BERT_TINY)
    sess = session(model)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 1000, size=(2, 12), dtype=np.int64)
    mask = np.ones((2, 12), dtype=np.int64)
    mask[:, 8:] = 0
    types = np.zeros((2, 12), dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    hidden, pooled = sess.run(None, feeds)
    assert hidden.shape == (2, 12, 128) and pooled.shape == (2, 128)
    changed = ids.copy()
    changed[:, 8:] = (changed[:, 8:] + 7) % 1000
    hidden2, _ = sess.run(None, {**feeds, "input_ids": changed})
    np.testing.assert_allclose(hidden2[:, :8], hidden[:, :8], atol=1e-5)
    assert np.abs(hidden2[:, 8:] - hidden[:, 8:]).max() > 1e-2


def test_bert_gelu_is_fused_by_onnxruntime(tmp_path: Path) -> None:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(
        bert(**BERT_TINY).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    ops = {n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node}
    assert "Erf" not in ops
    assert ops & {"Gelu", "BiasGelu", "FastGelu"}


def test_gpt2_decode_with_past_matches_prefill() -> None:
    prefill = session(gpt2(**GPT2_TINY))
    decode = session(gpt2(**GPT2_TINY, with_past=True))
    ids = np.random.default_rng(1).integers(0, 1000, size=(2, 9), dtype=np.int64)

    full = prefill.run(None, {"input_ids": ids})
    first = prefill.run(None, {"input_ids": ids[:, :8]})
    assert full[0].shape == (2, 9, 1000)
    assert first[1].shape == (2, 4, 8, 32)
    # Causality: the first 8 positions do not see the 9th token.
    np.testing.assert_allclose(full[0][:, :8], first[0], atol=1e-5)

    feeds = {"input_ids": ids[:, 8:]}
    for i in range(2):
        feeds[f"past.{i}.key"] = first[1 + 2 * i]
        feeds[f"past.{i}.value"] = first[2 + 2 * i]
    step = decode.run(None, feeds)
    assert step[0].shape == (2, 1, 1000)
    assert step[1].shape == (2, 4, 9, 32)
    np.testing.assert_allclose(step[0][:, 0], full[0][:, 8], atol=1e-4)
    for got, want in zip(step[1:], full[1:], strict=True):
        np.testing.assert_allclose(got, want, atol=1e-4)

    # The check above can fail: a cache one token short (wrong positions) gives other logits.
    shifted = prefill.run(None, {"input_ids": ids[:, 1:]})
    assert np.abs(step[0][:, 0] - shifted[0][:, 7]).max() > 1e-2


def test_gpt2_decode_several_tokens_over_past() -> None:
    # A multi-token step over a cache needs the past-offset causal mask, not just the last row.
    prefill = session(gpt2(**GPT2_TINY))
    decode = session(gpt2(**GPT2_TINY, with_past=True))
    ids = np.random.default_rng(2).integers(0, 1000, size=(1, 10), dtype=np.int64)
    full = prefill.run(None, {"input_ids": ids})
    first = prefill.run(None, {"input_ids": ids[:, :6]})
    feeds = {"input_ids": ids[:, 6:]}
    for i in range(2):
        feeds[f"past.{i}.key"] = first[1 + 2 * i]
        feeds[f"past.{i}.value"] = first[2 + 2 * i]
    step = decode.run(None, feeds)
    np.testing.assert_allclose(step[0], full[0][:, 6:], atol=1e-4)


# -- parameter counts, by construction -----------------------------------------------------


def bert_params(layers: int, hidden: int, intermediate: int, vocab: int, max_pos: int) -> int:
    embeddings = (vocab + max_pos + 2) * hidden + 2 * hidden
    attention = 4 * (hidden * hidden + hidden) + 2 * hidden
    ffn = 2 * hidden * intermediate + intermediate + hidden + 2 * hidden
    pooler = hidden * hidden + hidden
    return embeddings + layers * (attention + ffn) + pooler


def gpt2_params(layers: int, hidden: int, vocab: int, n_positions: int) -> int:
    block = 4 * hidden + (hidden * 3 * hidden + 3 * hidden) + (hidden * hidden + hidden)
    block += 2 * (hidden * 4 * hidden) + 4 * hidden + hidden
    return (vocab + n_positions) * hidden + layers * block + 2 * hidden


def test_parameter_counts_match_hand_computation() -> None:
    # mlp 256-512-512-10: weights and biases of three Linear layers.
    expected_mlp = 256 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    assert expected_mlp == 399_370
    assert registry.count_parameters(mlp()) == (expected_mlp, 4 * expected_mlp)
    assert registry.count_parameters(mlp(dtype="float16")) == (expected_mlp, 2 * expected_mlp)

    # tiny convnet: bias-free 3x3 convs 3-16-32-64, four BN tensors each, Gemm 64->10.
    convs = 9 * (3 * 16 + 16 * 32 + 32 * 64)
    expected_conv = convs + 4 * (16 + 32 + 64) + 64 * 10 + 10
    assert registry.count_parameters(tiny_convnet())[0] == expected_conv == 24_570

    assert registry.count_parameters(bert(**BERT_TINY))[0] == bert_params(2, 128, 512, 1000, 512)
    tiny = gpt2(**GPT2_TINY, n_positions=128)
    assert registry.count_parameters(tiny)[0] == gpt2_params(2, 128, 1000, 128)
    # The same formulas give the published sizes of the full models.
    assert bert_params(12, 768, 3072, 30522, 512) == 109_482_240  # bert-base-uncased
    assert gpt2_params(12, 768, 50257, 1024) == 124_439_808  # gpt2 (tied LM head)


def test_count_parameters_reads_a_path(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(tiny_convnet(), str(path))
    assert registry.count_parameters(path) == (24_570, 4 * 24_570)


def test_full_resnet50_has_torchvision_size() -> None:
    model = resnet50()
    count, size = registry.count_parameters(model)
    assert 25_500_000 < count < 25_700_000
    # torchvision's 25,557,032 plus the BatchNorm running mean and variance it calls buffers.
    bn_channels = sum(
        t.dims[0] for t in model.graph.initializer if t.name.endswith(".running_mean")
    )
    assert count - 2 * bn_channels == 25_557_032
    assert size == 4 * count
    assert model.graph.input[0].name == "input"
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Conv") == 53 and ops.count("BatchNormalization") == 53


# -- errors ---------------------------------------------------------------------------------


def test_unknown_builder_lists_valid_names() -> None:
    with pytest.raises(UsageError, match="no-such-model") as info:
        registry.build("no-such-model", {})
    for name in registry.BUILDERS:
        assert name in str(info.value)
    with pytest.raises(UsageError):
        registry.build_cached("no-such-model", {})


@pytest.mark.parametrize(
    ("builder", "params", "named"),
    [
        ("mlp", {"widht": 3}, "widht"),
        ("mlp", {"layers": 0}, "layers"),
        ("mlp", {"hidden": "big"}, "hidden"),
        ("mlp", {"dtype": "int8"}, "dtype"),
        ("mlp", {"seed": -1}, "seed"),
        ("bert", {"hidden": 100, "heads": 3}, "heads"),
        ("gpt2", {"with_past": "yes"}, "with_past"),
        ("resnet50", {"depth": 42}, "depth"),
        ("resnet50", {"blocks": [1, 2]}, "blocks"),
    ],
)
def test_bad_param_is_a_usage_error_naming_it(
    builder: str, params: dict[str, Any], named: str
) -> None:
    with pytest.raises(UsageError, match=named):
        registry.build(builder, params)


# -- cache ----------------------------------------------------------------------------------


def test_cache_dir_default_and_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AACO_CACHE_DIR", raising=False)
    default = registry.cache_dir()
    assert default.name == "models" and "aaco" in default.parts
    monkeypatch.setenv("AACO_CACHE_DIR", str(tmp_path))
    assert registry.cache_dir() == tmp_path


def test_build_cached_writes_once_and_reuses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AACO_CACHE_DIR", str(tmp_path / "cache"))
    calls: list[dict[str, Any]] = []

    @functools.wraps(mlp)
    def counting(**kwargs: Any) -> onnx.ModelProto:
        calls.append(kwargs)
        return mlp(**kwargs)

    monkeypatch.setitem(registry.BUILDERS, "mlp", counting)
    path = registry.build_cached("mlp", {"hidden": 32})
    assert path.parent == tmp_path / "cache"
    assert path.name.startswith("mlp-") and path.suffix == ".onnx"
    assert len(path.stem) == len("mlp-") + 12
    assert os.listdir(path.parent) == [path.name]  # no temp file left behind
    loaded = onnx.load(str(path))
    onnx.checker.check_model(loaded)
    assert registry.count_parameters(loaded)[0] == 256 * 32 + 32 + 32 * 32 + 32 + 32 * 10 + 10

    mtime = path.stat().st_mtime_ns
    assert registry.build_cached("mlp", {"hidden": 32}) == path
    # Explicit defaults name the same model as omitted ones.
    assert registry.build_cached("mlp", {"hidden": 32, "layers": 3, "seed": 0}) == path
    assert len(calls) == 1
    assert path.stat().st_mtime_ns == mtime

    other = registry.build_cached("mlp", {"hidden": 32, "seed": 1})
    assert other != path and len(calls) == 2
    monkeypatch.setattr(registry, "BUILDER_VERSION", registry.BUILDER_VERSION + 1)
    assert registry.build_cached("mlp", {"hidden": 32}) != path


def test_build_cached_leaves_nothing_on_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AACO_CACHE_DIR", str(tmp_path))

    def crash(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        registry.build_cached("mlp", {"hidden": 16})
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    monkeypatch.setenv("AACO_CACHE_DIR", str(tmp_path))
    path = registry.build_cached("mlp", {"hidden": 16})
    assert os.listdir(tmp_path) == [path.name]


def test_build_is_deterministic_per_seed() -> None:
    a = mlp(hidden=8, seed=3).SerializeToString()
    assert a == mlp(hidden=8, seed=3).SerializeToString()
    assert a != mlp(hidden=8, seed=4).SerializeToString()
    word_embeddings = onnx.numpy_helper.to_array(bert(**BERT_TINY).graph.initializer[0])
    assert math.isclose(float(word_embeddings.std()), 0.02, rel_tol=0.05)  # BERT's init scale
