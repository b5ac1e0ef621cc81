"""The library API behind ``aaco run``: real worker processes on the built-in small models."""

from __future__ import annotations

from pathlib import Path

import pytest

from aaco.errors import UsageError
from aaco.report.model import build_report
from aaco.run import RunOptions, run_model


@pytest.mark.parametrize(
    "model", ["tiny-convnet", "resnet-tiny", "bert-tiny", "gpt2-tiny", "gpt2-tiny-decode"]
)
def test_builtin_small_models_profile_end_to_end(tmp_path: Path, model: str) -> None:
    s = run_model(
        RunOptions(model=model, warmup=2, iterations=10, profile_iterations=2, output=tmp_path)
    )
    assert s.status == "completed", s.error
    r = build_report(s)
    assert r["summary"]["latency_ms"]["count"] == 10
    assert r["top_ops"], "the profiled pass produced operator rows"
    assert r["model"]["parameter_count"] > 10_000
    assert (s.path / "report" / "report.json").is_file()
    assert (s.path / "report" / "report.txt").is_file()
    # each peak RSS belongs to its process: the worker's own, and aaco's (the parent)
    assert r["worker"]["max_rss_source"] == "worker" and r["worker"]["max_rss_bytes"] > 0
    assert r["aaco_process"]["max_rss_bytes"] > 0
    assert r["model"]["node_count"] and s.model_meta["data_propagation"]["mode"] in (
        "full",
        "guarded",
    )
    # the registry's shapes were used and recorded
    shapes = {i["name"]: i["shape"] for i in s.meta["run"]["inputs"]}
    if model.startswith("bert"):
        assert shapes["input_ids"] == [1, 32] and shapes["attention_mask"] == [1, 32]
    if model == "gpt2-tiny-decode":
        assert shapes["input_ids"] == [1, 1] and shapes["past.0.key"] == [1, 4, 16, 32]


def test_batch_overrides_registry_leading_dim(tmp_path: Path) -> None:
    s = run_model(
        RunOptions(
            model="bert-tiny",
            batch=3,
            warmup=1,
            iterations=3,
            profile=False,
            telemetry=False,
            output=tmp_path,
        )
    )
    assert s.status == "completed"
    assert {tuple(i["shape"]) for i in s.meta["run"]["inputs"]} == {(3, 32)}
    assert s.meta["run"]["batch"] == 3 and s.meta["run"]["batch_source"] == "--batch"


def test_user_registry_entry_with_path(tmp_path: Path) -> None:
    from tests.onnx_models import make_matmul_chain

    cfg = tmp_path / "configs"
    cfg.mkdir()
    make_matmul_chain(cfg / "chain.onnx", width=32)
    (cfg / "models.yaml").write_text(
        "models:\n"
        "  chain: {path: chain.onnx, input_shapes: {x: [5, 32]}, warmup: 1, iterations: 4}\n"
    )
    s = run_model(RunOptions(model="chain", config_dir=cfg, profile=False, output=tmp_path / "s"))
    assert s.status == "completed"
    assert s.meta["model"]["source"] == "registry"
    assert s.meta["run"]["inputs"][0]["shape"] == [5, 32]
    iters = s.iters()
    assert iters is not None and iters.num_rows == 5  # 1 warmup + 4 measured


def test_validation_happens_before_any_bundle(tmp_path: Path) -> None:
    for opts in (
        RunOptions(model="mlp", iterations=0, output=tmp_path),
        RunOptions(model="mlp", duration_s=-1, output=tmp_path),
        RunOptions(model="mlp", warmup=-1, output=tmp_path),
        RunOptions(model="mlp", sample_hz=0, output=tmp_path),
    ):
        with pytest.raises(UsageError):
            run_model(opts)
    assert not tmp_path.joinpath("latest").exists()
