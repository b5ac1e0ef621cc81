"""The metadata registry, and the two callers that took their key lists from it: the
catalog's run settings (pooling, history, ``aaco ls``) and ``aaco diff``'s candidate
causes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from aaco.regress import common, diff
from aaco.session import catalog, metadata
from aaco.session.bundle import Session, atomic_write_json

FIXTURES = Path(__file__).parent / "fixtures"
BUNDLE_V1 = FIXTURES / "bundle_v1"
SAMPLES = [FIXTURES / "records" / "ort", FIXTURES / "records" / "torch", BUNDLE_V1]

#: the two lists the registry replaced, as they were at f9a9957
OLD_RUN_SETTINGS = ("batch", "threads", "inputs", "preprocess", "framework", "device", "compile")
OLD_DIFF_RUN_KEYS = ("batch", "threads", "inputs", "preprocess", "framework", "profile_mode")


def _meta(bundle: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((bundle / "session.json").read_text())
    return data


def test_keys_and_roles() -> None:
    roles = {k.key: k.role for k in metadata.REGISTRY.values()}
    assert {k for k, r in roles.items() if r == "setting"} == {
        "model.name",
        "backend.name",
        "run.batch",
        "run.threads",
        "run.inputs",
        "run.preprocess",
        "run.framework",
        "run.device",
        "run.compile",
    }
    assert {k for k, r in roles.items() if r == "cause"} == {"run.profile_mode", "backend.provider"}
    assert {k for k, r in roles.items() if r == "label"} == {
        "created_utc",
        "status",
        "tag",
        "kind",
    }
    environment = {k for k, r in roles.items() if r == "environment"}
    assert {"fingerprint", "env.packages", "env.cpu.governors", "env.gpus"} <= environment
    assert all(k == "fingerprint" or k.startswith("env.") for k in environment)
    for entry in metadata.REGISTRY.values():
        assert entry.role in metadata.ROLES
        assert entry.description and "\n" not in entry.description
        # a cause-role key is by definition a candidate cause
        assert entry.cause or entry.role != "cause"
    assert [k.key for k in metadata.settings()] == [k for k, r in roles.items() if r == "setting"]
    for role in metadata.ROLES:
        assert metadata.by_role(role)
    with pytest.raises(ValueError, match="unknown role"):
        metadata.by_role("colour")  # type: ignore[arg-type]


def test_the_old_lists_are_registry_queries() -> None:
    """Both call sites keep the exact keys (and order) of the lists they had."""
    assert catalog.RUN_SETTINGS == OLD_RUN_SETTINGS
    assert metadata.run_fields(metadata.settings()) == OLD_RUN_SETTINGS
    assert common._run_keys() == OLD_DIFF_RUN_KEYS
    assert metadata.run_fields(metadata.causes()) == OLD_DIFF_RUN_KEYS
    # why they differ: the profiled pass is apart from the timed one (not a setting), a
    # torch device is diffed as backend.provider, compile was never a diff cause
    assert metadata.lookup("run.profile_mode").role == "cause"
    assert not metadata.lookup("run.device").cause
    assert metadata.lookup("backend.provider").cause
    assert not metadata.lookup("run.compile").cause


def test_get_walks_session_json_and_env_json() -> None:
    meta = _meta(BUNDLE_V1)
    env = json.loads((BUNDLE_V1 / "env.json").read_text())
    assert metadata.get(meta, "run.batch") == 1
    assert metadata.get(meta, "model.name") == "tiny-convnet"
    assert metadata.get(meta, "backend.provider") == "CPUExecutionProvider"
    assert metadata.get(meta, "tag") == "fixture"
    assert metadata.get(meta, "run.profile_mode") is None  # older than the key
    assert metadata.get(meta, "env.cpu.logical_cores") is None  # no env given
    assert metadata.get(meta, "env.cpu.logical_cores", env) == env["cpu"]["logical_cores"]
    assert metadata.get(None, "env.packages", env) == env["packages"]
    assert metadata.get({"run": "odd"}, "run.batch") is None
    assert metadata.get({"run": None}, "run.batch") is None
    assert metadata.get({}, "tag") is None
    with pytest.raises(KeyError, match="not a registered metadata key"):
        metadata.get(meta, "run.colour")


@pytest.mark.parametrize("bundle", SAMPLES, ids=lambda p: p.name)
def test_registered_types_fit_the_samples(bundle: Path) -> None:
    meta = _meta(bundle)
    env_file = bundle / "env.json"
    env = json.loads(env_file.read_text()) if env_file.is_file() else None
    for entry in metadata.REGISTRY.values():
        value = metadata.get(meta, entry.key, env)
        assert value is None or isinstance(value, entry.type), entry.key
        assert isinstance(metadata.format_value(entry.key, value), str)


def test_format_value() -> None:
    fmt = metadata.format_value
    assert fmt("run.threads", None) == "unset"
    assert fmt("env.cpu.model", None) == "unknown"
    assert fmt("run.batch", 4) == "4"
    assert fmt("run.compile", True) == "yes" and fmt("run.compile", False) == "no"
    inputs = _meta(FIXTURES / "records" / "ort")["run"]["inputs"]
    assert fmt("run.inputs", inputs) == "input[1x256] float32"
    torch_inputs = [{"name": "arg0", "shape": [4, 16], "dtype": "float32"}, {"name": "x"}]
    assert fmt("run.inputs", torch_inputs) == "arg0[4x16] float32, x[?]"
    assert fmt("env.packages", {"numpy": "2.4.6", "onnx": "1.23.2"}) == "numpy 2.4.6, onnx 1.23.2"
    assert fmt("env.cpu.governors", ["performance"]) == "performance"
    assert fmt("env.memory.total_bytes", 2**34) == "16.0 GiB"
    assert metadata.lookup("env.memory.total_bytes").unit == "B"
    with pytest.raises(KeyError):
        fmt("nope", 1)


# -- the callers behave as before -------------------------------------------------------------
def _old_run_settings(meta: dict[str, Any]) -> str:
    run = meta.get("run")
    run = run if isinstance(run, dict) else {}
    return json.dumps({k: run.get(k) for k in OLD_RUN_SETTINGS}, sort_keys=True, default=str)


def _old_row_meta(meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "created_utc": meta.get("created_utc"),
        "model": (meta.get("model") or {}).get("name"),
        "backend": (meta.get("backend") or {}).get("name"),
        "batch": (meta.get("run") or {}).get("batch"),
        "tag": meta.get("tag"),
        "fingerprint": meta.get("fingerprint"),
        "threads": (meta.get("run") or {}).get("threads"),
        "preprocess": (meta.get("run") or {}).get("preprocess"),
        "framework": (meta.get("run") or {}).get("framework"),
        "settings": _old_run_settings(meta),
    }


@pytest.mark.parametrize("bundle", SAMPLES, ids=lambda p: p.name)
def test_run_settings_string_is_unchanged(bundle: Path) -> None:
    meta = _meta(bundle)
    assert catalog.run_settings(meta) == _old_run_settings(meta)
    for odd in ({}, {"run": None}, {"run": "odd"}, {"run": {"batch": 2, "profile_mode": "x"}}):
        assert catalog.run_settings(odd) == _old_run_settings(odd)


def _copy(src: Path, dst: Path, **run: Any) -> Session:
    shutil.copytree(src, dst)
    meta = _meta(dst)
    for key, value in run.items():
        section, _, name = key.partition("__")
        meta[section][name] = value
    atomic_write_json(dst / "session.json", meta)
    return Session.load(dst)


def test_session_row_is_unchanged(tmp_path: Path) -> None:
    for i, meta_edit in enumerate([{}, {"run__threads": 4, "run__preprocess": "resize"}]):
        s = _copy(BUNDLE_V1, tmp_path / f"b{i}", **meta_edit)
        row = catalog.session_row(s)
        old = _old_row_meta(s.meta)
        assert {k: row[k] for k in old} == old
        assert list(row) == [
            "id",
            "path",
            "created_utc",
            "model",
            "backend",
            "batch",
            "tag",
            "status",
            "p50_ms",
            "p90_ms",
            "p99_ms",
            "iterations",
            "throughput",
            "iterations_per_s",
            "fingerprint",
            "threads",
            "preprocess",
            "framework",
            "settings",
            # since issue 17: what made the bundle (a serving one adds its TTFT headline)
            "kind",
        ]


def test_diff_run_differences_are_unchanged(tmp_path: Path) -> None:
    """A change of a cause key is a configuration difference; device and compile are not
    (device shows as backend.provider, as before)."""
    base = _copy(BUNDLE_V1, tmp_path / "base")
    changed = _copy(
        BUNDLE_V1,
        tmp_path / "changed",
        run__threads=2,
        run__profile_mode="kernels",
        run__device="cuda",
        run__compile=True,
        backend__provider="cuda",
    )
    env = diff.environment_differences(base, changed)
    assert [d["key"] for d in env["run"]] == ["profile_mode", "threads"]
    assert [d["key"] for d in env["backend"]] == ["provider"]
    assert diff.environment_differences(base, base)["run"] == []
