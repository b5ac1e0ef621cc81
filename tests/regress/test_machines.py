"""`aaco diff` across machines: which machines the runs ran on, on bundles whose env.json is
written by construction (:func:`aaco.testing.make_bundle` writes none), so that every
answer is known: another machine says so loudly and first, the same machine with other
software says that, and the same everything says neither."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.cli.test_cli import aaco

from aaco.regress.common import (
    DIFFERENT_MACHINES,
    describe_machine,
    machine_identity,
    same_machine,
)
from aaco.regress.diff import diff_sessions, write_diff
from aaco.report.html import HtmlRenderer
from aaco.report.regress import banner_warnings, render_diff_markdown, render_diff_terminal
from aaco.session.bundle import Session
from aaco.session.fingerprint import fingerprint, fingerprint_fields
from aaco.testing import make_bundle
from aaco.testing.serving import make_serving_bundle, scripted_results

XEON = "Intel(R) Xeon(R) Gold 6430"
EPYC = "AMD EPYC 9654 96-Core Processor"
H100 = "NVIDIA H100 80GB HBM3"


def _env(
    host: str | None = "node-a",
    *,
    cpu: str = XEON,
    gpus: Sequence[tuple[str, str]] = (),
    container: bool = False,
    ort: str = "1.18.0",
) -> dict[str, Any]:
    """An env.json as :func:`aaco.collectors.environment.capture_environment` writes one:
    ``gpus`` as (name, uuid) pairs, ``ort`` the onnxruntime version (software)."""
    env: dict[str, Any] = {
        "hostname": host,
        "cpu": {
            "model": cpu,
            "architecture": "x86_64",
            "physical_cores": 32,
            "logical_cores": 64,
            "flags": {"avx2": True, "avx512f": True},
        },
        "memory": {"total_bytes": 256 << 30},
        "os": {"system": "Linux", "release": "6.8.0", "distro": "Ubuntu 24.04"},
        "python": {"version": "3.11.9"},
        "onnxruntime": {"version": ort, "distribution": "onnxruntime"},
        "gpus": {
            "devices": [
                {
                    "vendor": "nvidia",
                    "index": i,
                    "name": name,
                    "driver": "550.54",
                    "memory_bytes": 80 << 30,
                    "uuid": uuid,
                }
                for i, (name, uuid) in enumerate(gpus)
            ]
        },
        "container": {"dockerenv": container, "containerenv": False},
    }
    env["fingerprint_fields"] = fingerprint_fields(env)
    env["fingerprint"] = fingerprint(env["fingerprint_fields"])
    return env


def _on(session: Session, env: dict[str, Any] | None) -> Session:
    """``session`` as if it had run where ``env`` says (its fingerprint too)."""
    if env is not None:
        (session.path / "env.json").write_text(json.dumps(env))
        meta = json.loads((session.path / "session.json").read_text())
        meta["fingerprint"] = env["fingerprint"]
        (session.path / "session.json").write_text(json.dumps(meta))
    return Session.load(session.path)


def _run(root: Path, env: dict[str, Any] | None, level: float = 1.0, seed: int = 0) -> Session:
    """A model run of 200 iterations around ``level`` ms (one mode) where ``env`` says."""
    lat = np.random.default_rng(seed).normal(level, 0.01 * level, 200)
    return _on(make_bundle(root, list(lat)), env)


def _diff(a: Session | list[Session], b: Session | list[Session]) -> dict[str, Any]:
    return diff_sessions(a, b, use_history=False)


def _loud(warnings: list[str]) -> list[str]:
    return [w for w in warnings if w.startswith(DIFFERENT_MACHINES)]


# -- the rule ----------------------------------------------------------------------------------
def test_another_hardware_is_another_machine_loudly_and_first(tmp_path: Path) -> None:
    a = _run(tmp_path, _env("node-a", gpus=[(H100, "GPU-aaaa")]))
    b = _run(tmp_path, _env("node-b", cpu=EPYC, gpus=[(H100, "GPU-bbbb")]), 1.3, 1)
    v = _diff(a, b)["verdict"]
    assert v["verdict"] == "REGRESSION"
    w0 = v["warnings"][0]
    assert w0 == (
        f"DIFFERENT MACHINES: baseline ran on node-a ({XEON}, {H100}), session on node-b "
        f"({EPYC}, {H100}): this compares hardware, not code (hardware differs: cpu_model)"
    )
    m = v["machines"]
    assert m["same"] is False and m["between_sides"] is False and m["mixed"] == []
    assert [d["key"] for d in m["differences"]] == ["cpu_model", "hostname", "gpu_uuids"]
    assert m["baseline"]["hostname"] == "node-a" and m["session"]["cpu_model"] == EPYC
    assert m["baseline"]["gpus"] == [f"nvidia:{H100}"]
    assert m["baseline"]["hardware_fingerprint"] != m["session"]["hardware_fingerprint"]
    # the first candidate cause, and the suspect: the comparison measured the hardware
    assert v["suspected_cause"] == "different machine"
    assert v["candidate_causes"][0]["detail"].startswith(f"cpu_model: {XEON} -> AMD EPYC")
    # the hardware is not named a second time as an environment change
    assert all(c["cause"] != "environment change" for c in v["candidate_causes"])
    assert "different machines" in v["recommendation"]


def test_same_model_on_another_host_is_another_machine(tmp_path: Path) -> None:
    a = _run(tmp_path, _env("node-a"))
    b = _run(tmp_path, _env("node-b"), seed=1)
    v = _diff(a, b)["verdict"]
    assert v["machines"]["same"] is False
    assert v["machines"]["basis"] == "same hardware model, another host"
    assert v["machines"]["differences"] == [
        {"key": "hostname", "baseline": "node-a", "session": "node-b"}
    ]
    assert v["warnings"][0].startswith(
        f"DIFFERENT MACHINES: baseline ran on node-a ({XEON}, no GPU), session on node-b"
    )
    assert v["warnings"][0].endswith(
        "this compares hardware, not code (same hardware model, another host)"
    )
    assert not any(w.startswith("DIFFERENT SOFTWARE") for w in v["warnings"])


def test_same_machine_other_software_warns_of_software_only(tmp_path: Path) -> None:
    a = _run(tmp_path, _env("node-a", ort="1.18.0"))
    b = _run(tmp_path, _env("node-a", ort="1.19.2"), 1.3, 1)
    v = _diff(a, b)["verdict"]
    assert not _loud(v["warnings"])
    assert v["machines"]["same"] is True and v["machines"]["between_sides"] is True
    assert v["machines"]["differences"] == []
    assert v["warnings"][0] == (
        f"DIFFERENT SOFTWARE ON THE SAME MACHINE: both sides ran on node-a ({XEON}, no GPU), "
        "with different software (onnxruntime_version: 1.18.0 -> 1.19.2); the difference may "
        "be the software's, not the code's"
    )
    assert v["suspected_cause"] == "environment change"
    assert "different machine" not in [c["cause"] for c in v["candidate_causes"]]


def test_same_everything_warns_of_neither(tmp_path: Path) -> None:
    a = _run(tmp_path, _env("node-a", gpus=[(H100, "GPU-aaaa")]))
    b = _run(tmp_path, _env("NODE-A", gpus=[(H100, "GPU-aaaa")]), seed=1)  # host: any case
    v = _diff(a, b)["verdict"]
    assert v["machines"]["same"] is True
    assert v["machines"]["basis"] == "same hardware, a GPU in common (same uuid)"
    assert not [w for w in v["warnings"] if w.startswith(("DIFFERENT", "machine"))]


def test_without_env_json_the_machine_is_unknown_not_different(tmp_path: Path) -> None:
    a, b = _run(tmp_path, None), _run(tmp_path, None, seed=1)
    v = _diff(a, b)["verdict"]
    m = v["machines"]
    assert m["same"] is None and m["between_sides"] is None
    assert m["basis"] == f"no env.json in {a.session_id}, {b.session_id}"
    assert m["baseline"]["known"] is False and m["differences"] == []
    assert not [w for w in v["warnings"] if w.startswith(("DIFFERENT", "machine"))]


def test_container_host_names_leave_the_machine_unknown(tmp_path: Path) -> None:
    # Docker names the container, not the machine: 3f2a9c1b0d7e is not a host
    a = _run(tmp_path, _env("3f2a9c1b0d7e", container=True))
    b = _run(tmp_path, _env("8b1e0f4c2a9d", container=True), seed=1)
    v = _diff(a, b)["verdict"]
    assert v["machines"]["same"] is None and not _loud(v["warnings"])
    note = next(w for w in v["warnings"] if w.startswith("machine not identified"))
    assert "3f2a9c1b0d7e vs 8b1e0f4c2a9d" in note and f"({XEON}, no GPU)" in note
    # a GPU they share says it is one machine after all
    a = _run(tmp_path, _env("3f2a9c1b0d7e", gpus=[(H100, "GPU-1")], container=True))
    b = _run(tmp_path, _env("8b1e0f4c2a9d", gpus=[(H100, "GPU-1")], container=True), seed=1)
    v = _diff(a, b)["verdict"]
    assert v["machines"]["same"] is True
    assert not [w for w in v["warnings"] if w.startswith(("DIFFERENT", "machine"))]


@pytest.mark.parametrize(
    ("a", "b", "same", "basis"),
    [
        ({"gpus": [(H100, "GPU-1")]}, {"gpus": [(H100, "GPU-2")]}, False,
         "same hardware model, other physical GPUs (no GPU uuid in common)"),
        ({"gpus": [(H100, "GPU-1"), (H100, "GPU-2")]}, {"gpus": [(H100, "GPU-2"), (H100, "GPU-3")]},
         True, "same hardware, a GPU in common (same uuid)"),
        ({}, {"host": None}, None, "same hardware model; host name unknown"),
        ({}, {"cpu": EPYC, "host": "node-a"}, False, "hardware differs: cpu_model"),
        ({"gpus": [(H100, "GPU-1")]}, {"gpus": []}, False, "hardware differs: gpus"),
    ],
)  # fmt: skip
def test_same_machine_rule(
    tmp_path: Path, a: dict[str, Any], b: dict[str, Any], same: bool | None, basis: str
) -> None:
    sa = _run(tmp_path, _env(a.pop("host", "node-a"), **a))
    sb = _run(tmp_path, _env(b.pop("host", "node-a"), **b), seed=1)
    assert same_machine(machine_identity(sa), machine_identity(sb)) == (same, basis)


def test_describe_machine() -> None:
    m = {"known": True, "hostname": "gpu-7", "cpu_model": EPYC, "gpus": [f"nvidia:{H100}"] * 8}
    assert describe_machine(m) == f"gpu-7 ({EPYC}, 8x {H100})"
    assert describe_machine({"known": True, "gpus": []}) == "an unknown host (unknown CPU, no GPU)"
    assert describe_machine({"known": True}) == "an unknown host (unknown CPU, GPUs unknown)"
    assert describe_machine({"known": False}) == "an unknown machine (no env.json)"


def test_what_a_side_could_not_read_is_no_difference(tmp_path: Path) -> None:
    a = _run(tmp_path, _env("node-a", gpus=[(H100, "GPU-1")]))
    failed = _env("node-a")  # nvidia-smi timed out: no devices, which is not "no GPU"
    failed["gpus"]["errors"] = ["nvidia-smi: timed out after 5 s"]
    failed["cpu"]["flags"] = None  # /proc/cpuinfo unreadable
    b = _run(tmp_path, failed, seed=1)
    mb = machine_identity(b)
    assert mb["gpus"] is None and mb["cpu_flags"] is None
    assert mb["hardware_fingerprint"] != machine_identity(a)["hardware_fingerprint"]
    assert same_machine(machine_identity(a), mb) == (True, "same hardware and host name")
    assert describe_machine(mb) == f"node-a ({XEON}, GPUs unknown)"


def test_malformed_env_reads_as_unknown(tmp_path: Path) -> None:
    env = _env("node-a")
    env["cpu"]["flags"] = ["avx2"]  # an object in every env.json AACO writes
    s = _run(tmp_path, env)
    assert machine_identity(s)["known"] is False


# -- pooled sides ------------------------------------------------------------------------------
def test_a_pooled_side_mixing_machines_says_so(tmp_path: Path) -> None:
    bases = [_run(tmp_path, _env("node-a"), seed=i) for i in range(2)]
    news = [_run(tmp_path, _env("node-a"), seed=2), _run(tmp_path, _env("node-b"), seed=3)]
    v = _diff(bases, news)["verdict"]
    m = v["machines"]
    assert m["between_sides"] is True  # the first runs: one machine
    assert m["same"] is False and m["mixed"] == ["session"]
    assert [r["hostname"] for r in m["runs"]["session"]] == ["node-a", "node-b"]
    loud = _loud(v["warnings"])
    assert loud == [v["warnings"][0]] and loud[0] == (
        f"DIFFERENT MACHINES among the session runs: {news[0].session_id} on node-a ({XEON}, "
        f"no GPU); {news[1].session_id} on node-b ({XEON}, no GPU): the pooled session mixes "
        "hardware into the comparison"
    )


def test_sides_on_one_machine_each_but_not_the_same(tmp_path: Path) -> None:
    bases = [_run(tmp_path, _env("node-a"), seed=i) for i in range(2)]
    news = [_run(tmp_path, _env("node-b"), 1.3, seed=2 + i) for i in range(2)]
    v = _diff(bases, news)["verdict"]
    m = v["machines"]
    assert m["same"] is False and m["between_sides"] is False and m["mixed"] == []
    assert len(_loud(v["warnings"])) == 1 and v["warnings"][0].startswith(
        "DIFFERENT MACHINES: baseline ran on node-a"
    )
    assert v["suspected_cause"] == "different machine"


def test_other_software_among_the_runs_of_one_machine(tmp_path: Path) -> None:
    bases = [_run(tmp_path, _env("node-a"), seed=0), _run(tmp_path, _env("node-a"), seed=1)]
    news = [_run(tmp_path, _env("node-a"), seed=2), _run(tmp_path, _env("node-a", ort="2"), seed=3)]
    v = _diff(bases, news)["verdict"]
    assert v["machines"]["same"] is True and not _loud(v["warnings"])
    assert v["warnings"][0].startswith(
        "DIFFERENT SOFTWARE among the runs of one side on the same machine"
    )


def test_other_machine_and_other_software(tmp_path: Path) -> None:
    a = _run(tmp_path, _env("node-a", ort="1.18.0"))
    b = _run(tmp_path, _env("node-b", cpu=EPYC, ort="1.19.2"), 1.3, 1)
    v = _diff(a, b)["verdict"]
    assert v["warnings"][0].startswith("DIFFERENT MACHINES: ")
    assert v["warnings"][1] == "DIFFERENT SOFTWARE as well: onnxruntime_version: 1.18.0 -> 1.19.2"
    causes = [c["cause"] for c in v["candidate_causes"]]
    assert causes[:2] == ["different machine", "environment change"]
    env_cause = v["candidate_causes"][1]["detail"]
    assert "onnxruntime_version" in env_cause and "cpu_model" not in env_cause


# -- renderers ---------------------------------------------------------------------------------
def test_renderers_put_the_banner_under_the_verdict(tmp_path: Path) -> None:
    a = _run(tmp_path, _env("node-a"))
    b = _run(tmp_path, _env("node-b", cpu=EPYC), 1.3, 1)
    diff = _diff(a, b)
    loud = diff["verdict"]["warnings"][0]
    text = render_diff_terminal(diff, width=400)
    lines = text.splitlines()
    assert lines[0] == diff["summary"] and lines[1] == f"!! {loud}"
    assert text.count("DIFFERENT MACHINES") == 1  # not a second time among the warnings
    md = render_diff_markdown(diff)
    head, _, rest = loud.partition(":")
    assert md.splitlines()[2] == f"> ⚠️ **{head}**:{rest}"
    assert md.count("DIFFERENT MACHINES") == 1
    assert banner_warnings(["x", loud]) == ([loud], ["x"])
    write_diff(b, diff, refresh_reports=False)
    html = HtmlRenderer().render(Session.load(b.path))
    assert '<p class="verdict machines"' in html and "DIFFERENT MACHINES: baseline ran" in html
    assert html.count("DIFFERENT MACHINES") == 1


def test_cli_prints_the_machines_warning_on_stderr(tmp_path: Path) -> None:
    a = _run(tmp_path, _env("node-a"))
    b = _run(tmp_path, _env("node-b"), seed=1)
    proc = aaco("diff", "-b", str(a.path), "-s", str(b.path), "--no-history")
    assert "warning: DIFFERENT MACHINES: baseline ran on node-a" in proc.stderr
    assert proc.stdout.splitlines()[1].startswith("!! DIFFERENT MACHINES")
    verdict = json.loads((b.path / "regress" / "verdict.json").read_text())
    assert verdict["machines"]["same"] is False


# -- serving sessions --------------------------------------------------------------------------
def _serving(root: Path, env: dict[str, Any] | None, level: float, seed: int) -> Session:
    ttft = list(level * np.exp(np.random.default_rng(seed).normal(0.0, 0.05, 400)))
    return _on(make_serving_bundle(root, scripted_results(400, ttft_ms=ttft)), env)


def test_serving_diff_across_machines(tmp_path: Path) -> None:
    a = _serving(tmp_path, _env("node-a", gpus=[(H100, "GPU-1")]), 20, 1)
    b = _serving(tmp_path, _env("node-b", gpus=[(H100, "GPU-2")]), 26, 2)
    diff = _diff(a, b)
    v = diff["verdict"]
    assert v["kind"] == "serving" and v["verdict"] == "REGRESSION"
    assert v["machines"]["same"] is False
    assert v["warnings"][0].startswith(
        f"DIFFERENT MACHINES: baseline ran on node-a ({XEON}, {H100}), session on node-b"
    )
    assert v["candidate_causes"][0]["cause"] == "different machine"
    lines = render_diff_terminal(diff, width=400).splitlines()
    assert lines[0] == diff["summary"] and lines[1].startswith("!! DIFFERENT MACHINES")
    assert "> ⚠️ **DIFFERENT MACHINES**" in render_diff_markdown(diff)
    # the same machine with other software: the software warning, no machines banner
    c = _serving(tmp_path, _env("node-a", gpus=[(H100, "GPU-1")], ort="9"), 20, 3)
    v = _diff(a, c)["verdict"]
    assert v["machines"]["same"] is True and not _loud(v["warnings"])
    assert any(w.startswith("DIFFERENT SOFTWARE ON THE SAME MACHINE") for w in v["warnings"])
