"""`aaco calibrate` end to end: real subprocesses measuring this CPU, a private store, real
CPU hogs for a busy machine, and the quality rules between stored and new calibrations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def calibrate(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="120", AACO_CALIBRATION_DIR=str(store))
    return subprocess.run(
        [sys.executable, "-m", "aaco", "calibrate", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@contextmanager
def cpu_hogs() -> Iterator[None]:
    """One spinning process per logical CPU, at the lowest priority: they take whatever CPU
    time the calibration leaves, so that every repetition sees other processes hold a
    large share of the machine, without slowing its start-up much."""
    spin = "import os, time\nos.nice(19)\nt = time.time()\nwhile time.time() - t < 120: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """One quick calibration into an empty store: (store, its --json output). --allow-busy:
    the shared machine may be busy; these tests are about the store, not the figures."""
    store = tmp_path_factory.mktemp("calibration")
    proc = calibrate(store, "--quick", "--json", "--allow-busy")
    assert proc.returncode == 0, proc.stderr
    return store, json.loads(proc.stdout)


def _store_copy(measured: tuple[Path, dict[str, object]], to: Path, **fields: str) -> Path:
    """The measured calibration copied into the store ``to``, with ``fields`` replaced (its
    quality, to set up a stored calibration of a known kind)."""
    src = Path(str(measured[1]["path"]))
    data = json.loads(src.read_text())
    data.update(fields)
    to.mkdir(parents=True, exist_ok=True)
    (to / src.name).write_text(json.dumps(data))
    return to / src.name


def test_first_call_measures_and_stores_one_file(
    measured: tuple[Path, dict[str, object]],
) -> None:
    store, out = measured
    files = list(store.glob("*.json"))
    assert len(files) == 1 and files[0] == Path(str(out["path"]))
    assert files[0].name == f"{out['fingerprint']}-cpu.json"
    assert out["reused"] is False and out["stored"] is True
    assert out["source"] == "calibrated" and out["backend"] == "cpu"
    assert out["mode"] == "quick" and out["contention"] in ("quiet", "disturbed")
    assert out["quality"] == f"quick, {out['contention']}"
    flops = out["flops_per_s"]
    assert isinstance(flops, dict) and flops["float32"] > 1e8 and flops["float64"] > 0
    stored = json.loads(files[0].read_text())
    assert stored["flops_per_s"] == flops and stored["bytes_per_s"] == out["bytes_per_s"]
    assert stored["mode"] == "quick" and stored["contention"] == out["contention"]
    levels = stored["memory_levels"]
    assert levels[-1]["name"] == "DRAM" and levels[-1]["bytes_per_s"] == out["bytes_per_s"]


def test_a_quiet_stored_calibration_is_reused_for_quick(
    measured: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    _, out = measured
    path = _store_copy(measured, tmp_path, contention="quiet")
    proc = calibrate(tmp_path, "--quick")
    assert proc.returncode == 0, proc.stderr
    assert "reused the stored calibration" in proc.stdout and str(path) in proc.stdout
    assert "quality: quick, quiet" in proc.stdout
    # the table shows the stored figures: float32 in GFLOP/s with one decimal
    flops = out["flops_per_s"]
    assert isinstance(flops, dict)
    assert f"{flops['float32'] / 1e9:,.1f}" in proc.stdout
    again = json.loads(calibrate(tmp_path, "--quick", "--json").stdout)
    assert again["reused"] is True and again["measured_utc"] == out["measured_utc"]


def test_a_disturbed_stored_calibration_is_measured_again(
    measured: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    path = _store_copy(measured, tmp_path, contention="disturbed")
    proc = calibrate(tmp_path, "--quick", "--json", "--allow-busy")
    assert proc.returncode == 0, proc.stderr
    new = json.loads(proc.stdout)
    # measured again and stored (a disturbed one ranks last: nothing new ranks below it)
    assert new["reused"] is False and new["stored"] is True
    assert json.loads(path.read_text())["details"]["seconds"] == new["details"]["seconds"]


def test_a_quick_stored_calibration_is_not_enough_for_a_full_one(
    measured: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    # a quick quiet calibration is stored; plain `aaco calibrate` asks for a full one, so it
    # measures, not reuses: with every CPU busy it is refused, exit 1, and the stored file
    # is left as it was
    path = _store_copy(measured, tmp_path, contention="quiet")
    before = path.read_bytes()
    with cpu_hogs():
        proc = calibrate(tmp_path)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "reused" not in proc.stdout and "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("aaco: error: calibration refused: ")
    assert "other processes held" in lines[0] and "--allow-busy" in lines[0]
    assert path.read_bytes() == before


def test_a_busy_machine_gets_no_calibration(tmp_path: Path) -> None:
    with cpu_hogs():
        proc = calibrate(tmp_path, "--quick")
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "calibration refused" in proc.stderr and "nothing was stored" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_show_lists_stored_calibrations_with_their_quality(
    measured: tuple[Path, dict[str, object]],
) -> None:
    store, out = measured
    proc = calibrate(store, "--show")
    assert proc.returncode == 0, proc.stderr
    assert str(out["path"]) in proc.stdout and "memory GB/s (DRAM)" in proc.stdout
    assert f"quality: {out['quality']}" in proc.stdout and "L1 (" in proc.stdout
    shown = json.loads(calibrate(store, "--show", "--json").stdout)
    assert [c["path"] for c in shown["calibrations"]] == [out["path"]]
    assert shown["calibrations"][0]["quality"] == out["quality"]
    assert isinstance(shown["published"], list)


def test_show_on_an_empty_store_says_so(tmp_path: Path) -> None:
    proc = calibrate(tmp_path, "--show")
    assert proc.returncode == 0 and "no stored calibration" in proc.stdout
    assert list(tmp_path.iterdir()) == []  # --show measures and writes nothing


def test_force_measures_again(measured: tuple[Path, dict[str, object]], tmp_path: Path) -> None:
    _, first = measured
    path = _store_copy(measured, tmp_path, contention="disturbed")
    proc = calibrate(tmp_path, "--quick", "--json", "--force", "--allow-busy")
    assert proc.returncode == 0, proc.stderr
    second = json.loads(proc.stdout)
    assert second["reused"] is False and second["path"] == str(path)
    assert second["measured_utc"] >= first["measured_utc"]
    # a new measurement replaced the file: its figures are the ones stored now
    stored = json.loads(path.read_text())
    assert stored["details"]["seconds"] == second["details"]["seconds"]
    assert second["details"] != first["details"]


def test_force_quick_never_replaces_a_full_quiet_calibration(
    measured: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    path = _store_copy(measured, tmp_path, mode="full", contention="quiet")
    before = path.read_bytes()
    proc = calibrate(tmp_path, "--quick", "--json", "--force", "--allow-busy")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["reused"] is False and out["stored"] is False and out["mode"] == "quick"
    assert "not stored: the stored one is better (full, quiet)" in out["note"]
    assert path.read_bytes() == before


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
