"""`aaco sweep`: a 2 x 2 x 2 matrix of real `aaco run`s, here and on a local Ray instance
(identical result tables up to timing), a failing point with retries, --resume, GPUs given
by Ray's num_gpus, and the sweep file's errors."""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from tests.cli.test_cli import aaco, assert_one_line_error
from tests.onnx_models import make_matmul_chain

from aaco.errors import InputError, UsageError
from aaco.experiment.sweep import RESULTS_FILE, load_spec, point_argv, run_sweep
from aaco.lake.query import run_query

#: what differs between two runs of one sweep: when, where, and how fast
TIMING = ("session_id", "p50_ms", "p90_ms", "p99_ms", "throughput", "ttft_p50_ms", "ttft_p99_ms",
          "output_tokens_per_s", "host", "gpu_ids")  # fmt: skip


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sweep-models")
    make_matmul_chain(tmp / "a.onnx", 2, 32, 8)
    make_matmul_chain(tmp / "b.onnx", 3, 32, 8)
    return tmp


def _write(path: Path, spec: dict[str, Any]) -> Path:
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def _spec(models: Path, **extra: Any) -> dict[str, Any]:
    return {
        "name": "m",
        "options": {
            "iterations": 12,
            "warmup": 2,
            "no-profile": True,
            "no-telemetry": True,
            "no-calibrate": True,
        },
        "matrix": {
            "model": [str(models / "a.onnx"), str(models / "b.onnx")],
            "threads": [1, 2],
            "seed": [0, 1],
        },
        **extra,
    }


def _rows(folder: Path) -> list[dict[str, Any]]:
    table = pq.read_table(folder / RESULTS_FILE)
    return [{k: v for k, v in r.items() if k not in TIMING} for r in table.to_pylist()]


def test_matrix_expands_in_order_with_stable_ids(models: Path, tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path / "s.yaml", _spec(models)))
    points = spec.points()
    assert len(points) == 8
    assert [(p.options["threads"], p.options["seed"]) for p in points[:4]] == [
        (1, 0), (1, 1), (2, 0), (2, 1)
    ]  # fmt: skip
    assert all(p.options["model"].endswith("a.onnx") for p in points[:4])
    again = load_spec(_write(tmp_path / "t.yaml", _spec(models)))
    assert [p.id for p in again.points()] == [p.id for p in points]
    assert len({p.key for p in points}) == 8
    argv = point_argv({"batch": 4, "no-profile": True, "sentinel": False, "shape": ["a=1", "b=2"],
                       "tag2": None})  # fmt: skip
    assert argv == ["--batch", "4", "--no-profile", "--no-sentinel", "--shape", "a=1",
                    "--shape", "b=2"]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"matrix": {"batch": []}}, "empty list"),
        ({"matrix": {"output": ["x"]}}, "set by the sweep"),
        ({"command": "train"}, "is not one of"),
        ({"matrix": [1, 2]}, "matrix must be a mapping"),
        ({"surprise": 1}, "unknown key"),
        ({"retries": -1}, "must not be negative"),
        ({"resources": {"memory": 1}}, "num_cpus and num_gpus"),
    ],
)
def test_a_bad_sweep_file_is_one_clear_error(
    tmp_path: Path, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(InputError, match=message):
        load_spec(_write(tmp_path / "s.yaml", spec))


def test_bad_options_are_refused_before_anything_runs(models: Path, tmp_path: Path) -> None:
    spec = _spec(models)
    spec["matrix"]["threads"] = [1, "two"]
    f = _write(tmp_path / "s.yaml", spec)
    root = tmp_path / "sessions"
    proc = aaco("sweep", str(f), "--sessions", str(root))
    assert_one_line_error(proc, 2, "p002-", "threads")
    assert not root.exists()
    spec = _spec(models)
    spec["options"]["frobnicate"] = 1
    proc = aaco("sweep", str(_write(tmp_path / "u.yaml", spec)), "--sessions", str(root))
    assert_one_line_error(proc, 2, "frobnicate")
    dry = aaco("sweep", str(f.with_name("u.yaml")), "--dry-run")
    assert dry.returncode == 2
    ok = aaco("sweep", str(_write(tmp_path / "v.yaml", _spec(models))), "--dry-run")
    assert ok.returncode == 0, ok.stderr
    assert len(ok.stdout.splitlines()) == 8 and "--threads 2" in ok.stdout


@pytest.fixture(scope="module")
def local_sweep(models: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sweep-local")
    root = tmp / "sessions"
    proc = aaco(
        "sweep", str(_write(tmp / "s.yaml", _spec(models))), "--sessions", str(root), timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    assert "8 completed, 0 failed" in proc.stdout
    return root


def test_local_sweep_runs_every_point_into_one_root(local_sweep: Path) -> None:
    record = json.loads((local_sweep / "sweeps" / "m" / "sweep.json").read_text())
    assert record["executor"] == "local:1"
    assert [p["status"] for p in record["points"]] == ["completed"] * 8
    rows = _rows(local_sweep / "sweeps" / "m")
    assert [r["status"] for r in rows] == ["completed"] * 8
    assert [r["threads"] for r in rows] == ["1", "1", "2", "2"] * 2
    # one at a time: no two points' runs overlap
    spans = []
    for p in record["points"]:
        meta = json.loads((local_sweep / p["bundle"] / "session.json").read_text())
        spans.append((meta["created_utc"], meta["finished_utc"]))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    # every bundle is tagged with its point, and aaco query groups over them
    table = run_query(
        local_sweep,
        "SELECT threads, count(*) AS n, count(DISTINCT model) AS models FROM sessions "
        "WHERE tag LIKE 'sweep:m:%' GROUP BY 1 ORDER BY 1",
    )
    assert table.to_pylist() == [
        {"threads": 1, "n": 4, "models": 2},
        {"threads": 2, "n": 4, "models": 2},
    ]


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    # the GPUs are declared: Ray's scheduling honours them on this CPU-only machine
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_sweep_gives_the_local_results(
    local_sweep: Path, models: Path, ray_instance: Any, tmp_path: Path
) -> None:
    root = tmp_path / "sessions"
    spec = load_spec(_write(tmp_path / "s.yaml", _spec(models)))
    result = run_sweep(spec, root, ray_address="local")
    assert result["executor"] == "ray:local"
    assert (result["completed"], result["failed"]) == (8, 0)
    assert _rows(root / "sweeps" / "m") == _rows(local_sweep / "sweeps" / "m")
    # the bundles came back from the tasks into this root
    assert len(list(root.glob("2*/*/session.json"))) == 8


def test_ray_assigns_gpus_and_reserves_several_together(
    models: Path, ray_instance: Any, tmp_path: Path
) -> None:
    base = _spec(models)
    base["matrix"] = {"seed": [0, 1]}
    base["options"]["model"] = str(models / "a.onnx")
    one = load_spec(_write(tmp_path / "one.yaml", {**base, "name": "one",
                                                  "resources": {"num_gpus": 1}}))  # fmt: skip
    result = run_sweep(one, tmp_path / "s1", ray_address="local", share_nodes=True)
    ids = [p["attempts"][-1]["gpu_ids"] for p in result["points"]]
    assert all(len(i) == 1 for i in ids) and {i[0] for i in ids} <= {"0", "1"}
    two = load_spec(_write(tmp_path / "two.yaml", {**base, "name": "two",
                                                  "resources": {"num_gpus": 2}}))  # fmt: skip
    result = run_sweep(two, tmp_path / "s2", ray_address="local")
    assert [sorted(p["attempts"][-1]["gpu_ids"]) for p in result["points"]] == [["0", "1"]] * 2
    # sharing nodes, points of both GPUs queue for them in Ray rather than block the sweep
    shared = load_spec(_write(tmp_path / "sh.yaml", {**base, "name": "shared",
                                                    "resources": {"num_gpus": 2}}))  # fmt: skip
    result = run_sweep(shared, tmp_path / "s4", ray_address="local", share_nodes=True)
    assert [p["status"] for p in result["points"]] == ["completed"] * 2
    # every reservation is given back (Ray frees a removed group's GPUs a moment later)
    deadline = time.monotonic() + 20
    while ray_instance.available_resources().get("GPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_instance.available_resources().get("GPU") == 2
    three = load_spec(_write(tmp_path / "three.yaml", {**base, "name": "three",
                                                      "resources": {"num_gpus": 3}}))  # fmt: skip
    with pytest.raises(UsageError, match="3 GPU"):
        run_sweep(three, tmp_path / "s3", ray_address="local")


def test_a_failing_point_is_retried_recorded_and_resumed(models: Path, tmp_path: Path) -> None:
    spec = _spec(models, retries=1)
    missing = tmp_path / "late.onnx"
    spec["matrix"] = {"model": [str(models / "a.onnx"), str(missing)]}
    f = _write(tmp_path / "s.yaml", spec)
    root = tmp_path / "sessions"
    proc = aaco("sweep", str(f), "--sessions", str(root), "--json", timeout=300)
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    ok, bad = result["points"]
    assert ok["status"] == "completed" and len(ok["attempts"]) == 1
    assert bad["status"] == "failed" and len(bad["attempts"]) == 2
    assert all("late.onnx" in a["error"] for a in bad["attempts"])
    assert "retrying" in proc.stderr
    again = aaco("sweep", str(f), "--sessions", str(root))
    assert_one_line_error(again, 2, "--resume")
    make_matmul_chain(missing, 2, 32, 8)
    proc = aaco("sweep", str(f), "--sessions", str(root), "--resume", "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr
    ok2, bad2 = json.loads(proc.stdout)["points"]
    assert ok2["session_id"] == ok["session_id"] and len(ok2["attempts"]) == 1
    assert ok2["skipped"] == "resumed: completed before"
    assert bad2["status"] == "completed" and len(bad2["attempts"]) == 3
    assert len(list(root.glob("2*/*/session.json"))) == 2


def test_sweep_exports_into_a_lake(models: Path, tmp_path: Path) -> None:
    spec = _spec(models)
    spec["matrix"] = {"threads": [1, 2]}
    spec["options"]["model"] = str(models / "a.onnx")
    root, lake = tmp_path / "sessions", tmp_path / "lake"
    proc = aaco("sweep", str(_write(tmp_path / "s.yaml", spec)), "--sessions", str(root),
                "--lake", str(lake), timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = run_query(lake, "SELECT threads FROM sessions ORDER BY 1").to_pylist()
    assert rows == [{"threads": 1}, {"threads": 2}]


def test_a_broken_ray_import_is_one_line(models: Path, tmp_path: Path) -> None:
    """Ray's import fails on machines with a broken amdsmi package: a fake `ray` that
    raises at import stands in for it."""
    fake = tmp_path / "fake"
    (fake / "ray").mkdir(parents=True)
    (fake / "ray" / "__init__.py").write_text("raise OSError('libamd_smi.so: cannot open')\n")
    f = _write(tmp_path / "s.yaml", _spec(models))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), *sys.path]))
    import subprocess

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "aaco",
            "sweep",
            str(f),
            "--ray",
            "local",
            "--sessions",
            str(tmp_path / "s"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert_one_line_error(proc, 2, "Ray failed to import", "amdsmi")


def test_llm_load_points_against_a_real_server(tmp_path: Path) -> None:
    """A sweep of `aaco llm bench` concurrency points against an OpenAI-compatible server
    started here: one serving bundle per point, their load points queryable."""
    from aaco.testing.llm_server import Script, serve_in_thread

    root = tmp_path / "sessions"
    with serve_in_thread(Script(ttft=0.005, itl=0.001)) as url:
        spec = {
            "name": "llm",
            "command": "llm bench",
            "options": {"url": url, "requests": 6, "output-tokens": 8, "input-tokens": 16},
            "matrix": {"concurrency": [1, 2]},
        }
        proc = aaco("sweep", str(_write(tmp_path / "s.yaml", spec)), "--sessions", str(root),
                    "--json", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert [p["status"] for p in result["points"]] == ["completed", "completed"]
    rows = run_query(
        root,
        "SELECT s.tag, p.load, p.requests FROM serving_points p JOIN sessions s "
        "USING (session_id) ORDER BY p.load",
    ).to_pylist()
    assert [(r["load"], r["requests"]) for r in rows] == [
        ("concurrency=1", 6),
        ("concurrency=2", 6),
    ]
    assert all(r["tag"].startswith("sweep:llm:p00") for r in rows)


def test_a_point_past_its_timeout_is_stopped_with_its_worker(models: Path, tmp_path: Path) -> None:
    """timeout_s ends a point: aaco run gets SIGTERM (it kills its worker, a process group
    of its own, and publishes the bundle as failed); nothing of it runs on afterwards."""
    import psutil

    spec = _spec(models, timeout_s=4, retries=0)
    spec["options"]["iterations"] = 10_000_000
    spec["matrix"] = {"seed": [0]}
    spec["options"]["model"] = str(models / "a.onnx")
    root = tmp_path / "sessions"
    result = run_sweep(load_spec(_write(tmp_path / "s.yaml", spec)), root)
    (point,) = result["points"]
    assert point["status"] == "failed"
    attempt = point["attempts"][0]
    assert "timeout_s" in attempt["error"], attempt
    left = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(str(root) in part for part in (p.info["cmdline"] or []))
    ]
    assert left == []
