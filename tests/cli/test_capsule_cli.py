"""The measurement capsule end to end: ``aaco doctor`` over fake /proc + /sys trees, ``aaco
run --isolate`` on a real small ONNX model (the worker really pinned, threads to match, the
sentinel's points), and ``aaco rerun`` (round trip, a vanished model, a bundle from before
capsules). Real subprocesses throughout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.machine_trees import fake_machine
from tests.onnx_models import make_matmul_chain

from aaco.session.bundle import Session
from aaco.session.paths import CAPSULE_FILE
from aaco.testing import make_bundle

AACO = shutil.which("aaco", path=str(Path(sys.executable).parent)) or "aaco"
PINNABLE = hasattr(os, "sched_setaffinity")


def aaco(
    *args: str, module: bool = False, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "aaco", *args] if module else [AACO, *args]
    env = dict(os.environ, NO_COLOR="1", COLUMNS="120")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


def one_line_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


# -- aaco doctor ---------------------------------------------------------------------------------


def test_doctor_on_a_tuned_machine_is_ready_and_both_entry_points_agree(tmp_path: Path) -> None:
    root = fake_machine(tmp_path)
    proc = aaco("doctor", "--root", str(root), "--cpus", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Machine state for measuring on CPU 1 (--cpus)"
    assert "ok       CPU scaling governor         performance on CPU 1" in lines
    assert "ok       IRQ affinity                 no IRQ routed to CPU 1" in lines
    assert lines[-1] == "ready for stable measurement"
    assert aaco("doctor", "--root", str(root), "--cpus", "1", module=True).stdout == proc.stdout


def test_doctor_warnings_print_their_fix_and_still_exit_0(tmp_path: Path) -> None:
    root = fake_machine(
        tmp_path, **{"sys/devices/system/cpu/cpu1/cpufreq/scaling_governor": "powersave"}
    )
    proc = aaco("doctor", "--root", str(root), "--cpus", "1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    i = lines.index("warning  CPU scaling governor         powersave on CPU 1")
    assert lines[i + 2] == "         fix: sudo cpupower -c 1 frequency-set -g performance"
    assert lines[-1].startswith("ready, with 1 warning")


def test_doctor_exits_1_on_an_error_and_json_says_why(tmp_path: Path) -> None:
    root = fake_machine(
        tmp_path,
        **{
            "sys/class/power_supply/AC/online": "0",
            "sys/class/power_supply/BAT0/type": "Battery",
            "sys/class/power_supply/BAT0/status": "Discharging",
        },
    )
    proc = aaco("doctor", "--root", str(root), "--cpus", "2")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("not ready: 1 error")
    proc = aaco("doctor", "--root", str(root), "--cpus", "2", "--format", "json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert doc["ready"] is False and doc["cpus"] == [2] and doc["counts"]["error"] == 1
    (power,) = [c for c in doc["checks"] if c["name"] == "power_supply"]
    assert power["state"] == "error" and power["fix"] == "plug in the power cable"


def test_doctor_refuses_a_cpu_it_does_not_have(tmp_path: Path) -> None:
    line = one_line_error(aaco("doctor", "--root", str(fake_machine(tmp_path)), "--cpus", "9"), 2)
    assert "--cpus: CPU 9 is not available" in line
    assert "not a CPU list" in one_line_error(aaco("doctor", "--cpus", "x"), 2)


def test_doctor_on_this_machine_runs(tmp_path: Path) -> None:
    proc = aaco("doctor", "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr  # 1: this machine is busy or on battery
    doc = json.loads(proc.stdout)
    assert doc["cpus"] and doc["cpus_source"] in ("least busy", "isolcpus")
    assert len(doc["checks"]) == 13


# -- aaco run --isolate, aaco rerun --------------------------------------------------------------


def _run(root: Path, model: Path, *extra: str) -> Path:
    proc = aaco(
        "run", "--model", str(model), "--warmup", "3", "--iterations", "20", "--no-profile",
        "--no-telemetry", "--report", "none", "-o", str(root), *extra,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return (root / "latest").resolve()


@pytest.fixture(scope="module")
def isolated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model, bundle) of one ``aaco run --isolate`` of a small MatMul chain."""
    tmp = tmp_path_factory.mktemp("capsule")
    model = make_matmul_chain(tmp / "chain.onnx")
    return model, _run(tmp / "sessions", model, "--isolate", "--batch", "4")


@pytest.mark.skipif(not PINNABLE, reason="pinning needs Linux")
def test_isolated_run_is_pinned_with_threads_to_match(isolated: tuple[Path, Path]) -> None:
    _, bundle = isolated
    meta = json.loads((bundle / "session.json").read_text())
    capsule = meta["capsule"]
    cpus = capsule["cpus"]
    assert capsule["isolated"] is True and capsule["cpus_source"] in ("least busy", "isolcpus")
    assert cpus and set(cpus) <= set(range(os.cpu_count() or 1))
    if (os.cpu_count() or 1) <= 2:
        assert len(cpus) == 1
    # the worker read its own affinity: it and every one of its threads ran on those CPUs
    assert capsule["worker_affinity"]["process"] == cpus
    assert capsule["worker_affinity"]["threads"] == cpus
    # threads match: ONNX Runtime's intra-op count, the BLAS/OpenMP variables, the record
    assert capsule["threads"] == len(cpus) and meta["run"]["threads"] == len(cpus)
    ort = json.loads((bundle / "runtime" / "ort_config.json").read_text())
    assert ort["session_options"]["intra_op_num_threads"] == len(cpus)
    assert capsule["thread_env"]["OMP_NUM_THREADS"] == str(len(cpus))
    # the machine's state as the run met it
    names = {c["name"] for c in capsule["machine_state"]}
    assert {"cpu_governor", "irq_affinity", "load", "virtualization"} <= names


@pytest.mark.skipif(not PINNABLE, reason="pinning needs Linux")
def test_isolated_run_times_the_sentinel(isolated: tuple[Path, Path]) -> None:
    _, bundle = isolated
    sentinel: dict[str, Any] = json.loads((bundle / "session.json").read_text())["capsule"][
        "sentinel"
    ]
    assert list(sentinel["points"]) == ["before", "between", "after"]
    for point in sentinel["points"].values():
        # ~10 ms each, loosely: a shared machine may slow it several times over
        assert 1e6 < point["median_ns"] < 2e8 and len(point["samples_ns"]) == 5
    assert isinstance(sentinel["drift_pct"], float)
    assert isinstance(sentinel["speed_changed"], bool)
    assert sentinel["threshold_pct"] >= 3.0
    assert sentinel["cost_ns"] < 1e9
    summary = json.loads((bundle / "metrics" / "inference_summary.json").read_text())
    changed = any("CPU speed changed" in w for w in summary["warnings"])
    assert changed == sentinel["speed_changed"]


def test_every_run_saves_a_capsule_and_rerun_repeats_it(
    isolated: tuple[Path, Path], tmp_path: Path
) -> None:
    model, bundle = isolated
    capsule = json.loads((bundle / CAPSULE_FILE).read_text())
    meta_sha = json.loads((bundle / "model" / "model_meta.json").read_text())["sha256"]
    assert capsule["model"]["path"] == str(model) and capsule["model"]["sha256"] == meta_sha
    assert capsule["options"]["isolate"] is True and capsule["options"]["batch"] == 4
    assert capsule["options"]["threads"] is None  # as asked: one per pinned CPU again
    assert "argv" not in capsule["options"]
    assert capsule["seeds"] == {"inputs": 0}
    old = Session.load(bundle)
    assert capsule["environment"]["fingerprint"] == old.meta["fingerprint"]

    proc = aaco("rerun", str(bundle), "-o", str(tmp_path / "again"), "--report", "none")
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr  # same machine, same environment
    new = Session.load(tmp_path / "again" / "latest")
    assert new.path != old.path and new.status == "completed"
    assert new.meta["rerun_of"] == old.meta["session_id"]
    assert new.meta["tag"] == f"rerun-of:{old.meta['session_id']}"
    assert new.meta["command_line"][:2] == ["aaco", "rerun"]
    assert new.meta["run"]["batch"] == 4 and new.meta["run"]["iterations"] == 20
    again = json.loads((new.path / CAPSULE_FILE).read_text())
    assert again["model"]["sha256"] == capsule["model"]["sha256"]
    assert again["options"]["rerun_of"] == old.meta["session_id"]
    if PINNABLE:
        assert new.meta["capsule"]["isolated"] is True


def test_rerun_of_a_vanished_model_is_one_line(tmp_path: Path) -> None:
    model = make_matmul_chain(tmp_path / "gone.onnx", width=16)
    bundle = _run(tmp_path / "s", model, "--batch", "2")
    assert "capsule" not in json.loads((bundle / "session.json").read_text())  # not isolated
    model.unlink()
    line = one_line_error(aaco("rerun", str(bundle), "-o", str(tmp_path / "r")), 2)
    assert line == (
        f"aaco: error: model file not found: {model} (measured by session "
        f"{Session.load(bundle).meta['session_id']})"
    )
    assert not (tmp_path / "r").exists()


def test_rerun_of_a_bundle_from_before_capsules_is_one_line(tmp_path: Path) -> None:
    s = make_bundle(tmp_path, [1.0, 2.0], model="old")
    proc = aaco("rerun", str(s.path), module=True)
    line = one_line_error(proc, 2)
    assert line == (
        f"aaco: error: {s.path} was recorded before capsules (aaco 0.1.0, no {CAPSULE_FILE}); "
        "rerun it with the command line in session.json: aaco"
    )
