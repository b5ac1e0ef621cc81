"""The renderer contract, checked for every registered renderer over every kind of bundle
(pyinstrument's test_renderers.py pattern): a new renderer is covered as soon as the registry
lists it, a new bundle format version as soon as its fixture is under tests/session/fixtures.

Each renderer turns each bundle into non-empty text (or bytes, for a binary format) without
raising; a renderer whose files are ``.json`` writes JSON that parses. The bundles: every
format-version fixture, a real ``aaco run --model mlp``, a real run that failed (ONNX
Runtime rejects the model), a real ``aaco import`` of a trace, and copies of the fixture and
of the real run that failed mid-way (status failed, no metrics, no timed iterations).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper
from tests.cli.test_cli import aaco

import aaco.report as report_package
from aaco.report.base import Renderer
from aaco.report.renderers import create_renderer, renderer_names
from aaco.session.bundle import Session

FIXTURES = Path(__file__).parents[1] / "session" / "fixtures"
ORT_PROFILE = Path(__file__).parents[1] / "importers" / "fixtures" / "ort" / "cuda_ep_profile.json"
VERSION_FIXTURES = sorted(p.name for p in FIXTURES.glob("bundle_v*") if p.is_dir())

#: every bundle the renderers are run over, by id (built by the ``bundles`` fixture)
BUNDLES = [
    *VERSION_FIXTURES,
    *(f"{name}-failed" for name in VERSION_FIXTURES),
    "run-mlp",
    "run-mlp-failed",
    "run-rejected-model",
    "import-ort-profile",
]


def _rejected_model(path: Path) -> Path:
    """A model ONNX Runtime refuses to load: the run fails at its load stage."""
    node = helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, str(path))
    return path


def _published(root: Path, *args: str, code: int) -> Path:
    proc = aaco(*args, "-o", str(root))
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    return (root / "latest").resolve()


def _failed_copy(src: Path, dst: Path) -> Path:
    """A copy of a bundle as a run that crashed during measurement leaves it: status failed,
    an error, no metrics and no timed iterations."""
    shutil.copytree(src, dst)
    meta = json.loads((dst / "session.json").read_text())
    meta.update(status="failed", error={"stage": "measure", "message": "worker crashed"})
    (dst / "session.json").write_text(json.dumps(meta))
    shutil.rmtree(dst / "metrics", ignore_errors=True)
    shutil.rmtree(dst / "report", ignore_errors=True)
    return dst


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("renderer-contract")
    root = tmp / "sessions"
    out = {name: FIXTURES / name for name in VERSION_FIXTURES}
    for name in VERSION_FIXTURES:
        out[f"{name}-failed"] = _failed_copy(FIXTURES / name, tmp / f"{name}-failed")
    run = ("run", "--report", "none")
    out["run-mlp"] = _published(root, *run, "--model", "mlp", "--iterations", "5", code=0)
    out["run-mlp-failed"] = _failed_copy(out["run-mlp"], tmp / "run-mlp-failed")
    model = str(_rejected_model(tmp / "rejected.onnx"))
    out["run-rejected-model"] = _published(root, *run, "--model", model, code=1)
    out["import-ort-profile"] = _published(
        root, "import", str(ORT_PROFILE), "--format", "none", code=0
    )
    assert set(out) == set(BUNDLES)
    return out


def test_fixtures_and_real_runs_are_the_bundles_they_claim(bundles: dict[str, Path]) -> None:
    assert VERSION_FIXTURES, "no bundle_v* fixture under tests/session/fixtures"
    for name in VERSION_FIXTURES:
        assert Session.load(bundles[name]).meta["format_version"] == int(name.removeprefix(
            "bundle_v"))  # fmt: skip
    assert Session.load(bundles["run-mlp"]).status == "completed"
    assert Session.load(bundles["import-ort-profile"]).status == "completed"
    failed = ["run-rejected-model", "run-mlp-failed", *(f"{n}-failed" for n in VERSION_FIXTURES)]
    for name in failed:
        assert Session.load(bundles[name]).status == "failed", name


def _aaco_renderer_classes() -> set[type[Renderer]]:
    """Every Renderer subclass defined in aaco.report (its modules imported first)."""
    for info in pkgutil.iter_modules(report_package.__path__, "aaco.report."):
        importlib.import_module(info.name)
    found: set[type[Renderer]] = set()
    todo = list(Renderer.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("aaco."):
            found.add(cls)
    return found


def test_every_renderer_is_registered() -> None:
    registered = {type(create_renderer(name)) for name in renderer_names()}
    missing = sorted(c.__qualname__ for c in _aaco_renderer_classes() - registered)
    assert not missing, f"Renderer subclasses not in aaco.report.renderers: {missing}"


def _check_output(renderer: Renderer, out: Any) -> None:
    if renderer.output_is_binary:
        assert isinstance(out, bytes), type(out)
    else:
        assert isinstance(out, str), type(out)
    assert out.strip(), "empty output"
    if renderer.output_file_extension == ".json":
        json.loads(out)


@pytest.mark.parametrize("bundle", BUNDLES)
@pytest.mark.parametrize("name", renderer_names())
def test_renderer_renders_every_bundle(name: str, bundle: str, bundles: dict[str, Path]) -> None:
    renderer = create_renderer(name)
    _check_output(renderer, renderer.render(Session.load(bundles[bundle])))
