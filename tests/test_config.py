from __future__ import annotations

from pathlib import Path

import pytest

from aaco.config import load_registry, parse_input_arg, parse_int_range, parse_shape_arg
from aaco.errors import InputError, UsageError


def test_builtin_registry_has_reference_models_and_backends(tmp_path: Path) -> None:
    reg = load_registry(cwd=tmp_path)
    for name in ("resnet50", "bert-base", "gpt2", "mlp", "tiny-convnet"):
        assert name in reg.models
    assert reg.backend("cpu").provider == "CPUExecutionProvider"
    assert reg.backend("MIGraphX").name == "migraphx"
    mig = reg.backend("migraphx")
    assert "migraphx_fp16_enable" in mig.provider_options
    assert reg.backend("OpenVINOExecutionProvider").provider == "OpenVINOExecutionProvider"
    with pytest.raises(UsageError, match=r"unknown backend 'tpu'.*cpu"):
        reg.backend("tpu")
    with pytest.raises(UsageError, match=r"unknown model 'nope'.*resnet50"):
        reg.model("nope")


def test_user_files_override_builtin(tmp_path: Path) -> None:
    cfg = tmp_path / "configs"
    cfg.mkdir()
    (cfg / "models.yaml").write_text(
        "models:\n"
        "  resnet50: {path: 'm/r.onnx', input_shapes: {input: [2, 3, 224, 224]}, iterations: 7}\n"
    )
    (cfg / "backends.yaml").write_text(
        "backends:\n"
        "  cpu: {provider: CPUExecutionProvider, intra_op_threads: 1, inter_op_threads: 1}\n"
    )
    reg = load_registry(cwd=tmp_path)  # ./configs is picked up
    r = reg.model("resnet50")
    assert r.path == cfg / "m" / "r.onnx" and r.iterations == 7 and r.builder is None
    assert reg.backend("cpu").intra_op_threads == 1
    assert reg.model("mlp").builder is not None  # untouched entries remain
    assert load_registry(config_dir=cfg).model("resnet50").iterations == 7


def test_malformed_user_files(tmp_path: Path) -> None:
    cfg = tmp_path / "c"
    cfg.mkdir()
    (cfg / "models.yaml").write_text("models: [1, 2\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_registry(config_dir=cfg)
    (cfg / "models.yaml").write_text("models:\n  x: {builder: mlp, path: a.onnx}\n")
    with pytest.raises(InputError, match="exactly one of 'builder' or 'path'"):
        load_registry(config_dir=cfg)
    (cfg / "models.yaml").write_text("models:\n  x: {path: a.onnx, warmup: -1}\n")
    with pytest.raises(InputError, match="warmup must be a non-negative integer"):
        load_registry(config_dir=cfg)
    (cfg / "models.yaml").write_text("")
    (cfg / "backends.yaml").write_text("backends:\n  x: {intra_op_threads: 2}\n")
    with pytest.raises(InputError, match="'provider'"):
        load_registry(config_dir=cfg)
    with pytest.raises(InputError, match="config directory not found"):
        load_registry(config_dir=tmp_path / "missing")


def test_shape_and_range_parsing() -> None:
    assert parse_shape_arg("input=1x3x224x224") == ("input", [1, 3, 224, 224])
    assert parse_shape_arg("ids=1,128") == ("ids", [1, 128])
    assert parse_shape_arg("x=-1x3x48x192") == ("x", [-1, 3, 48, 192])  # -1: left open
    assert parse_shape_arg("sr=scalar") == ("sr", [])
    assert parse_shape_arg("sr=[]") == ("sr", [])
    assert parse_input_arg("sr=16000") == ("sr", "16000")
    for bad in ("input", "=1x2", "input=", "input=1xAx3", "x=-2x2"):
        with pytest.raises(UsageError, match="malformed --shape"):
            parse_shape_arg(bad)
    with pytest.raises(UsageError, match="malformed --input"):
        parse_input_arg("sr=")
    assert parse_int_range("0:1000") == (0, 1000)
    for bad in ("5", "a:b", "10:10"):
        with pytest.raises(UsageError, match="malformed --int-range"):
            parse_int_range(bad)
