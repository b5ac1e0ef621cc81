"""The library API behind ``aaco run``: real worker processes on the built-in small models."""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest

from aaco.errors import UsageError, attached_warnings
from aaco.report.model import build_report
from aaco.run import RunOptions, run_model
from aaco.session.bundle import BundleWriter, Session, iter_sessions


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


# --- a failed run whose bundle cannot be published (salvage) ------------------------------


def _planted_bug(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> RunOptions:
    """Options of a run that hits a planted AACO bug once its bundle folder exists."""
    from tests.onnx_models import make_matmul_chain

    def bug(*args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError("planted bug")

    monkeypatch.setattr("aaco.pipeline._run_into", bug)
    model = make_matmul_chain(tmp_path / "m.onnx", batch=1)
    return RunOptions(model=str(model), output=tmp_path / "sessions", auto_calibrate=False)


def _fails_with(exc: OSError) -> Callable[..., NoReturn]:
    def fail(*args: object, **kwargs: object) -> NoReturn:
        raise exc

    return fail


def test_a_bundle_that_cannot_be_published_is_kept_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = _planted_bug(tmp_path, monkeypatch)
    no_space = OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(BundleWriter, "publish", _fails_with(no_space))
    with pytest.raises(RuntimeError, match="planted bug") as info:  # the bug stays the error
        run_model(opts)
    (partial,) = (tmp_path / "sessions").glob("*/.*.partial")
    (warning,) = attached_warnings(info.value)
    assert str(partial) in warning and "No space left on device" in warning
    assert "\n" not in warning
    meta = json.loads((partial / "session.json").read_text())
    assert meta["status"] == "failed" and "planted bug" in meta["error"]["message"]


def test_a_bundle_folder_without_files_is_removed_and_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = _planted_bug(tmp_path, monkeypatch)
    read_only = OSError(errno.EROFS, "Read-only file system")
    # session.json has one writer: on a read-only file system it is what fails first
    monkeypatch.setattr("aaco.pipeline.save_session", _fails_with(read_only))
    monkeypatch.setattr("aaco.session.salvage.save_session", _fails_with(read_only))
    with pytest.raises(RuntimeError, match="planted bug") as info:
        run_model(opts)
    (warning,) = attached_warnings(info.value)
    assert "Read-only file system" in warning and "held no files to keep" in warning
    assert not list((tmp_path / "sessions").glob("**/*.partial"))


def test_a_published_bundle_whose_latest_pointer_failed_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = _planted_bug(tmp_path, monkeypatch)
    monkeypatch.setattr(
        "aaco.session.bundle.update_latest", _fails_with(OSError(errno.EACCES, "Permission denied"))
    )
    with pytest.raises(RuntimeError, match="planted bug") as info:
        run_model(opts)
    (bundle,) = iter_sessions(tmp_path / "sessions")
    (warning,) = attached_warnings(info.value)
    assert f"the failed run's bundle is {bundle}" in warning and "Permission denied" in warning
    assert Session.load(bundle).status == "failed"


def test_a_salvaged_bundle_attaches_no_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = _planted_bug(tmp_path, monkeypatch)
    with pytest.raises(RuntimeError, match="planted bug") as info:
        run_model(opts)
    assert attached_warnings(info.value) == []
    assert Session.load(tmp_path / "sessions" / "latest").status == "failed"
