"""The capsule's parts without a run: choosing CPUs, resolving --isolate, RunOptions to JSON
and back, and the errors of a rerun that cannot be made."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from tests.machine_trees import fake_machine, proc_stat

from aaco.collectors.machine_state import CpuSample
from aaco.errors import BundleError, InputError, UsageError
from aaco.runners import capsule as capsule_mod
from aaco.runners.base import RunOptions
from aaco.runners.capsule import (
    CAPSULE_FILE,
    THREAD_ENV_VARS,
    choose_cpus,
    options_from_json,
    options_to_json,
    parse_cpus,
    plan_capsule,
    prepare_rerun,
)
from aaco.testing import make_bundle


def _sample(*busy: float) -> CpuSample:
    return CpuSample(0.2, dict(enumerate(busy)))


def test_two_cpus_pick_the_least_busy_one() -> None:
    assert choose_cpus([0, 1], _sample(0.0, 0.5)) == (0,)
    assert choose_cpus([0, 1], _sample(0.3, 0.0)) == (1,)
    assert choose_cpus([0, 1], _sample(0.0, 0.0)) == (1,)  # a tie: not CPU 0
    assert choose_cpus([0, 1], None) == (1,)
    assert choose_cpus([0], None) == (0,)


def test_more_cpus_leave_cpu0s_core_and_take_one_cpu_per_quiet_core() -> None:
    # 8 logical CPUs, SMT pairs (0,4) (1,5) (2,6) (3,7); CPU 2 busy
    def siblings(c: int) -> tuple[int, ...]:
        return (c % 4, c % 4 + 4)

    chosen = choose_cpus(range(8), _sample(0, 0, 0.6, 0, 0, 0.02, 0, 0), (), siblings)
    assert chosen == (1, 6, 7)  # per core the quieter sibling (a tie: the higher); core 0 left
    busy_core = _sample(0, 0, 0.6, 0, 0, 0.02, 0.5, 0)
    assert choose_cpus(range(8), busy_core, (), siblings) == (1, 7)  # core 2 busy
    assert choose_cpus([0, 1, 2, 3], _sample(0, 0.9, 0.8, 0.9)) == (2,)  # all busy: least
    assert choose_cpus([0, 1, 2], None) == (1, 2)


def test_isolated_cpus_win() -> None:
    assert choose_cpus([0, 1], _sample(0, 0), isolated=[2, 3]) == (2, 3)


def test_cpus_option_parsing() -> None:
    assert parse_cpus("0-1,3") == (0, 1, 3)
    with pytest.raises(UsageError, match="--cpus: not a CPU list"):
        parse_cpus("one")
    with pytest.raises(UsageError, match="no CPU given"):
        parse_cpus(",")


def test_plan_resolves_cpus_threads_and_sentinel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fake_machine(tmp_path, **{"sys/devices/system/cpu/isolated": "", "proc/cmdline": ""})
    monkeypatch.setattr(capsule_mod, "_allowed_cpus", lambda: {0, 1, 2, 3})

    def busier(_: float) -> None:  # CPU 3 busy during the sample
        (root / "proc/stat").write_text(proc_stat([100, 100, 100, 190], [1100, 1100, 1100, 1010]))

    plain = RunOptions(model="m")
    p = plan_capsule(plain, root, sleep=busier)
    assert (p.cpus, p.sentinel, p.options) == (None, False, plain)
    assert p.worker_env() == {}

    p = plan_capsule(RunOptions(model="m", isolate=True), root, sleep=busier)
    assert p.cpus == (1, 2) and p.cpus_source == "least busy"
    assert p.options.threads == 2 and p.asked.threads is None
    assert p.sentinel is True
    assert p.worker_env() == dict.fromkeys(THREAD_ENV_VARS, "2")
    record = p.record()
    assert record["threads_source"] == "pinned CPUs" and record["cpu_sample"]["busy"]["3"] == 0.9

    p = plan_capsule(RunOptions(model="m", cpus=(3,), threads=4, sentinel=False), root)
    assert (p.cpus, p.cpus_source, p.options.threads, p.sentinel) == ((3,), "--cpus", 4, False)
    assert p.record()["threads_source"] == "--threads"

    with pytest.raises(UsageError, match="CPU 7 is not available to this process"):
        plan_capsule(RunOptions(model="m", cpus=(7,)), root)
    # an isolated CPU may be named though this process may not run there
    root2 = fake_machine(tmp_path / "iso", **{"sys/devices/system/cpu/online": "0-7"})
    (root2 / "sys/devices/system/cpu/isolated").write_text("6-7\n")
    assert plan_capsule(RunOptions(model="m", cpus=(7,)), root2).cpus == (7,)
    assert plan_capsule(RunOptions(model="m", isolate=True), root2).cpus_source == "isolcpus"


def test_every_run_option_but_argv_round_trips_through_json() -> None:
    opts = RunOptions(
        model="m.onnx",
        backend="cpu",
        batch=2,
        shapes={"x": [1, 3]},
        values={"sr": "16000"},
        warmup=1,
        iterations=3,
        threads=2,
        tag="t",
        output=Path("/tmp/out"),
        int_range=(1, 9),
        config_dir=Path("cfg"),
        argv=["aaco", "run"],
        collectors=("system",),
        isolate=True,
        cpus=(1, 3),
        sentinel=False,
        rerun_of="20260101_000000_abcdef",
    )
    data = options_to_json(opts)
    assert "argv" not in data
    back, unknown = options_from_json(json.loads(json.dumps(data)))
    assert unknown == []
    assert back == dataclasses.replace(opts, argv=None)
    # a newer AACO's option is left out and named
    back, unknown = options_from_json({**data, "quantum": 3})
    assert unknown == ["quantum"]
    with pytest.raises(BundleError, match="no model"):
        options_from_json({})


def test_a_bundle_from_before_capsules_says_how_to_rerun_it(tmp_path: Path) -> None:
    s = make_bundle(tmp_path, [1.0, 2.0])
    with pytest.raises(UsageError) as info:
        prepare_rerun(s.path, output=tmp_path)
    message = str(info.value)
    assert "was recorded before capsules" in message
    assert "rerun it with the command line in session.json: aaco" in message
    assert "\n" not in message
    with pytest.raises(BundleError, match="not a session bundle"):
        prepare_rerun(tmp_path / "nothing", output=tmp_path)


def _capsule(bundle: Path, model: dict[str, object], **env: object) -> None:
    (bundle / CAPSULE_FILE).parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "capsule_format": 1,
        "session_id": "S1",
        "model": model,
        "options": options_to_json(RunOptions(model=str(model.get("path")), seed=7)),
        "environment": {"fingerprint": "aaaa", "fingerprint_fields": {"cpu_model": "old"}, **env},
    }
    (bundle / CAPSULE_FILE).write_text(json.dumps(doc))


def test_rerun_checks_the_model_file_and_the_environment(tmp_path: Path) -> None:
    s = make_bundle(tmp_path / "sessions", [1.0])
    model = tmp_path / "m.onnx"
    model.write_bytes(b"weights")
    sha = hashlib.sha256(b"weights").hexdigest()
    _capsule(s.path, {"path": str(model), "source": "file", "sha256": sha})
    now = {"fingerprint": "bbbb", "fingerprint_fields": {"cpu_model": "new"}}
    rerun = prepare_rerun(s.path, output=tmp_path / "out", environment=now)
    assert rerun.options.model == str(model) and rerun.options.seed == 7
    assert rerun.options.rerun_of == "S1" and rerun.options.tag == "rerun-of:S1"
    assert rerun.options.output == tmp_path / "out"
    (warning,) = rerun.warnings
    assert "fingerprint aaaa -> bbbb" in warning and "cpu_model 'old' -> 'new'" in warning
    same = {"fingerprint": "aaaa"}
    assert prepare_rerun(s.path, output=tmp_path, environment=same, tag="x").warnings == ()

    model.write_bytes(b"other weights")
    with pytest.raises(InputError, match="model file changed since session S1"):
        prepare_rerun(s.path, output=tmp_path, environment=same)
    model.unlink()
    with pytest.raises(InputError, match=f"model file not found: {model}"):
        prepare_rerun(s.path, output=tmp_path, environment=same)


def test_a_change_of_speed_becomes_a_summary_warning() -> None:
    from aaco.pipeline import _finish_capsule
    from aaco.runners.launch import LaunchOutcome
    from aaco.runners.spec import WorkerResult

    sentinel = {
        "speed_changed": True,
        "drift_pct": 7.5,
        "threshold_pct": 3.0,
        "drift_between_pct": 0.4,
        "threshold_between_pct": 3.0,
    }
    result = WorkerResult(status="completed", sentinel=sentinel, affinity={"process": [1]})
    outcome = LaunchOutcome("completed", None, 0, result, 1, "done")
    meta: dict[str, Any] = {"capsule": {"cpus": [1]}}
    summary: dict[str, Any] = {"warnings": ["noisy"]}
    _finish_capsule(meta, outcome, summary)
    assert meta["capsule"] == {
        "cpus": [1],
        "worker_affinity": {"process": [1]},
        "sentinel": sentinel,
    }
    assert summary["warnings"][0] == "noisy"
    assert summary["warnings"][1].startswith(
        "CPU speed changed during the run: the sentinel loop's time moved +0.4% after the warmup "
        "(threshold 3.0%), +7.5% after the measured phase (threshold 3.0%)"
    )
    # a run without a capsule record (not isolated, no sentinel) is left alone
    quiet: dict[str, Any] = {"warnings": []}
    _finish_capsule({}, outcome, quiet)
    assert quiet == {"warnings": []}


def test_an_import_bundle_is_not_a_run_to_repeat(tmp_path: Path) -> None:
    s = make_bundle(tmp_path, [1.0])
    meta = json.loads((s.path / "session.json").read_text())
    (s.path / "session.json").write_text(json.dumps({**meta, "kind": "import"}))
    with pytest.raises(UsageError, match="was not written by aaco run \\(session kind 'import'\\)"):
        prepare_rerun(s.path, output=tmp_path)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("cpus", 5, "options.cpus: expected a list of integers"),
        ("iterations", "fifty", "options.iterations: expected an integer"),
        ("iterations", float("nan"), "options.iterations: expected an integer"),
        ("sample_hz", "ten", "options.sample_hz: expected a number"),
        ("sample_hz", float("inf"), "options.sample_hz: expected a number"),
        ("collectors", "system", "options.collectors: expected a list of strings"),
        ("output", 3, "options.output: expected a path"),
        ("shapes", [1], "options.shapes: expected an object of integer lists"),
        ("profile", None, "options.profile: must not be null"),
        ("int_range", [1], "options.int_range: expected two integers"),
    ],
)
def test_a_hand_edited_capsule_option_is_a_one_line_bundle_error(
    key: str, value: object, message: str
) -> None:
    data = options_to_json(RunOptions(model="m.onnx"))
    with pytest.raises(BundleError, match=message):
        options_from_json({**data, key: value})
    with pytest.raises(BundleError, match="options is not an object"):
        options_from_json([1, 2])  # type: ignore[arg-type]
