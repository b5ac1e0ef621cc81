"""`aaco calibrate` end to end: real subprocesses measuring this CPU, a private store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def calibrate(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="120", AACO_CALIBRATION_DIR=str(store))
    return subprocess.run(
        [sys.executable, "-m", "aaco", "calibrate", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """One quick calibration into an empty store: (store, its --json output)."""
    store = tmp_path_factory.mktemp("calibration")
    proc = calibrate(store, "--quick", "--json")
    assert proc.returncode == 0, proc.stderr
    return store, json.loads(proc.stdout)


def test_first_call_measures_and_stores_one_file(
    measured: tuple[Path, dict[str, object]],
) -> None:
    store, out = measured
    files = list(store.glob("*.json"))
    assert len(files) == 1 and files[0] == Path(str(out["path"]))
    assert files[0].name == f"{out['fingerprint']}-cpu.json"
    assert out["reused"] is False and out["source"] == "calibrated" and out["backend"] == "cpu"
    flops = out["flops_per_s"]
    assert isinstance(flops, dict) and flops["float32"] > 1e9 and flops["float64"] > 0
    stored = json.loads(files[0].read_text())
    assert stored["flops_per_s"] == flops and stored["bytes_per_s"] == out["bytes_per_s"]


def test_second_call_reuses_the_stored_calibration(
    measured: tuple[Path, dict[str, object]],
) -> None:
    store, out = measured
    proc = calibrate(store, "--quick")
    assert proc.returncode == 0, proc.stderr
    assert "reused the stored calibration" in proc.stdout
    assert str(out["path"]) in proc.stdout
    # the table shows the stored figures: float32 in GFLOP/s with one decimal
    flops = out["flops_per_s"]
    assert isinstance(flops, dict)
    assert f"{flops['float32'] / 1e9:,.1f}" in proc.stdout
    proc = calibrate(store, "--json")
    again = json.loads(proc.stdout)
    assert again["reused"] is True and again["measured_utc"] == out["measured_utc"]


def test_show_lists_stored_calibrations(measured: tuple[Path, dict[str, object]]) -> None:
    store, out = measured
    proc = calibrate(store, "--show")
    assert proc.returncode == 0, proc.stderr
    assert str(out["path"]) in proc.stdout and "memory GB/s" in proc.stdout
    shown = json.loads(calibrate(store, "--show", "--json").stdout)
    assert [c["path"] for c in shown["calibrations"]] == [out["path"]]
    assert isinstance(shown["published"], list)


def test_show_on_an_empty_store_says_so(tmp_path: Path) -> None:
    proc = calibrate(tmp_path, "--show")
    assert proc.returncode == 0 and "no stored calibration" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # --show measures and writes nothing


def test_force_measures_again(measured: tuple[Path, dict[str, object]], tmp_path: Path) -> None:
    _, first = measured
    path = Path(str(first["path"]))
    (tmp_path / path.name).write_text(path.read_text())  # a store holding that calibration
    proc = calibrate(tmp_path, "--quick", "--json", "--force")
    assert proc.returncode == 0, proc.stderr
    second = json.loads(proc.stdout)
    assert second["reused"] is False and second["path"] == str(tmp_path / path.name)
    assert second["measured_utc"] >= first["measured_utc"]
    # a new measurement replaced the file: its figures are the ones stored now
    stored = json.loads(Path(second["path"]).read_text())
    assert stored["details"]["seconds"] == second["details"]["seconds"]
    assert second["details"] != first["details"]


def _torch_sees_a_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_torch_sees_a_gpu(), reason="this machine has torch with a GPU")
@pytest.mark.parametrize("backend", ["cuda", "rocm"])
def test_gpu_backend_without_torch_gpu_is_a_one_line_error(tmp_path: Path, backend: str) -> None:
    proc = calibrate(tmp_path, "--backend", backend, "--quick")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("aaco: error: ")
    assert f"--backend {backend}" in lines[0]
    assert list(tmp_path.iterdir()) == []
