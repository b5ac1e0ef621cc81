"""``aaco tune``: verification with answers known by construction, the search with a real
ONNX model verified by real ONNX Runtime sessions and its timed runs injected at the seam
(a planted candidate that is faster and wrong must never be accepted), applying the result,
and the command end to end."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from tests.cli.test_cli import aaco, assert_one_line_error

from aaco.config import BackendEntry
from aaco.errors import UsageError
from aaco.experiment.ab import ABSettings
from aaco.experiment.tune import (
    Candidate,
    TuneSettings,
    apply_entry,
    parse_slo,
    search_space,
    tune,
    verify,
)
from aaco.pipeline import RunOptions
from aaco.session.bundle import Session
from aaco.testing.bundles import make_bundle

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_regress import chain_model


def test_verify_exact_candidates_within_the_dtype_tolerance() -> None:
    ref = [np.linspace(-2, 2, 100, dtype=np.float32), np.arange(5, dtype=np.int64)]
    assert verify(ref, [r.copy() for r in ref])["passed"]
    # float32 moved by 1e-6 relative: summation order, fusions -> still the same result
    near = [ref[0] * np.float32(1 + 1e-6), ref[1].copy()]
    v = verify(ref, near)
    assert v["passed"] and v["outputs"][0]["max_rel_error"] < 1e-5
    # 1 % off: a different result
    far = [ref[0] * np.float32(1.01), ref[1].copy()]
    v = verify(ref, far)
    assert not v["passed"] and "beyond the float32 tolerance" in v["reason"]
    # integers must be equal; shapes and NaN positions must match
    assert not verify(ref, [ref[0], ref[1] + 1])["passed"]
    assert "shape" in verify(ref, [ref[0][:50], ref[1]])["reason"]
    nan = ref[0].copy()
    nan[3] = np.nan
    assert "NaN" in verify(ref, [nan, ref[1]])["reason"]
    assert "outputs instead of" in verify(ref, ref[:1])["reason"]


def test_verify_numerics_variants_by_max_error_and_cosine() -> None:
    rng = np.random.default_rng(0)
    ref = [rng.normal(0, 1, 1000).astype(np.float32)]
    scale = float(np.abs(ref[0]).max())
    small = [ref[0] + np.float32(0.005 * scale)]  # 0.5 % of the largest value everywhere
    v = verify(ref, small, numerics="int8", max_error=0.01)
    assert v["passed"]
    out = v["outputs"][0]
    assert out["max_rel_error"] == pytest.approx(0.005, rel=1e-3)
    assert out["max_abs_error"] == pytest.approx(0.005 * scale, rel=1e-3)
    assert 0.99 < out["cosine"] <= 1.0
    v = verify(ref, small, numerics="int8", max_error=0.001)
    assert not v["passed"] and "int8 error" in v["reason"]
    # small errors but the wrong direction: cosine fails
    flipped = [-ref[0]]
    assert not verify(ref, flipped, numerics="int8", max_error=0.9999)["passed"]


def test_search_space_and_slo() -> None:
    base = BackendEntry(name="cpu", provider="CPUExecutionProvider")
    space = search_space(base, cores=2, objective="latency", limit=10, seed=1)
    assert space[0].name == "reference" and space[0].settings == {}
    assert len(space) == 10 and len({c.name for c in space}) == 10
    assert all(c.batch is None for c in space)
    assert {c.settings["intra_op_threads"] for c in space[1:]} <= {1, 2}
    full = search_space(base, cores=2, objective="latency", limit=10_000)
    assert len(full) == 1 + 2 * 2 * 3 * 2 * 2 * 2
    tp = search_space(base, cores=2, objective="throughput", batches=(1, 4), limit=6)
    assert {c.batch for c in tp[1:]} == {1, 4} and tp[-1].name == "batch4"
    assert parse_slo("p99=20ms") == ("p99", 20.0) and parse_slo("p50 = 3.5") == ("p50", 3.5)
    for bad in ("p99", "p42=3ms", "p99=-1ms", "p99=fast"):
        with pytest.raises(UsageError):
            parse_slo(bad)
    with pytest.raises(UsageError):
        TuneSettings(objective="speed").check()
    with pytest.raises(UsageError):
        TuneSettings(numerics=("int4",)).check()


@pytest.fixture
def chain(tmp_path: Path) -> tuple[Path, Path]:
    model = tmp_path / "chain8.onnx"
    chain_model(model, 8, 64, 4)
    wrong = tmp_path / "chain4.onnx"  # half the layers: faster, and different outputs
    chain_model(wrong, 4, 64, 4)
    return model, wrong


def _fake_run(root: Path, levels: dict[str, float], wrong: Path, seed: int = 0):  # type: ignore[no-untyped-def]
    """The timed-run seam: a bundle whose 30 latencies sit at the level of the candidate
    the options name (its backend entry ``tune-<name>``; the wrong model at 2 ms), 1 % noise."""
    rng = np.random.default_rng(seed)
    calls: list[str] = []

    def run(opts: RunOptions) -> Session:
        name = "planted" if opts.model == str(wrong) else str(opts.backend).removeprefix("tune-")
        calls.append(name)
        level = levels.get(name, 10.0)
        lat = level * rng.normal(1.0, 0.01, opts.iterations or 30)
        return make_bundle(root, list(lat), model=opts.model, tag=opts.tag)

    return run, calls


def test_tune_accepts_only_a_verified_candidate_that_wins_its_ab(
    tmp_path: Path, chain: tuple[Path, Path]
) -> None:
    model, wrong = chain
    run, calls = _fake_run(tmp_path / "runs", {"c01": 8.0, "planted": 2.0}, wrong)
    planted = Candidate("planted", {}, model_path=str(wrong))
    settings = TuneSettings(budget_s=3600, ab=ABSettings(seed=1), seed=3)
    result = tune(
        RunOptions(model=str(model), profile=False), settings, output=tmp_path, run=run,
        extra_candidates=[planted],
    )  # fmt: skip
    trials = {t["name"]: t for t in result["trials"]}
    # the planted candidate is four times faster, and wrong: rejected before any timing
    p = trials["planted"]
    assert p["stage"] == "rejected: verification" and not p["accepted"]
    assert p["screening"] == [] and p["ab"] is None and "planted" not in calls
    assert "beyond the float32 tolerance" in p["verification"]["reason"]
    assert result["rejected"] == ["planted"]
    # the real winner: verified (same outputs), screened, and confirmed by its A/B
    assert result["found"] and result["best"]["name"] == "c01"
    c01 = trials["c01"]
    assert c01["verification"]["passed"] and c01["accepted"]
    assert c01["ab"]["verdict"] == "IMPROVEMENT" and c01["ab"]["against"] == "reference"
    gain = result["gain"]
    assert -25 < gain["delta_pct"] < -15 and gain["ci_pct"][1] < -3
    assert all(s["label"].startswith("screening") for s in c01["screening"])
    assert "beats the default" in result["summary"]
    # the entry names the winning settings; the files are written
    entry = result["backend_entry"]
    assert entry["provider"] == "CPUExecutionProvider"
    for k, v in c01["settings"].items():
        assert entry.get(k, BackendEntry(name="x", provider="y").__getattribute__(k)) == v
    folder = Path(result["path"])
    assert json.loads((folder / "tune.json").read_text())["best"]["name"] == "c01"
    assert "cpu-tuned" in yaml.safe_load((folder / "backends.yaml").read_text())["backends"]
    # every finalist was judged; the others say why they stopped
    judged = [t for t in result["trials"] if t["ab"]]
    assert 1 <= len(judged) <= 3
    assert trials["reference"]["stage"] == "reference"


def test_tune_says_when_nothing_beats_the_default(tmp_path: Path, chain: tuple[Path, Path]) -> None:
    model, wrong = chain
    run, _ = _fake_run(tmp_path / "runs", {}, wrong, seed=5)  # every candidate at 10 ms
    result = tune(
        RunOptions(model=str(model), profile=False),
        TuneSettings(budget_s=3600, ab=ABSettings(seed=2, max_pairs=12)), output=tmp_path, run=run,
    )  # fmt: skip
    assert not result["found"] and result["best"] is None and result["backend_entry"] is None
    assert result["summary"] == "no candidate beats the default in an interleaved A/B"
    assert all(not t["accepted"] for t in result["trials"])
    assert not (Path(result["path"]) / "backends.yaml").exists()
    with pytest.raises(UsageError, match="nothing to apply"):
        apply_entry(result, tmp_path / "cfg")


def test_apply_keeps_other_entries_and_the_previous_file(tmp_path: Path) -> None:
    cfg = tmp_path / "configs"
    cfg.mkdir()
    (cfg / "backends.yaml").write_text("backends:\n  mine:\n    provider: CPUExecutionProvider\n")
    entry = {"provider": "CPUExecutionProvider", "intra_op_threads": 1}
    result = {"found": True, "entry_name": "cpu-tuned", "backend_entry": entry}
    path, backup = apply_entry(result, cfg)
    doc = yaml.safe_load(path.read_text())
    assert set(doc["backends"]) == {"mine", "cpu-tuned"}
    assert backup is not None and "mine" in backup.read_text() and "tuned" not in backup.read_text()
    # the written entry loads in the registry as a backend
    from aaco.config import load_registry

    assert load_registry(cfg).backend("cpu-tuned").intra_op_threads == 1
    (cfg / "backends.yaml").write_text("- a list\n")
    with pytest.raises(UsageError, match="not changed"):
        apply_entry(result, cfg)


def test_tune_command_end_to_end(tmp_path: Path) -> None:
    proc = aaco(
        "tune", "--model", "mlp", "--budget", "25s", "--max-pairs", "4", "-o", str(tmp_path),
        "-f", "json", timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["trials"][0]["name"] == "reference"
    assert len(result["trials"]) == 24 and all(t["verification"] for t in result["trials"])
    assert all(t["verification"]["passed"] for t in result["trials"])  # options keep outputs
    assert "screening rung 0" in proc.stderr
    assert (Path(result["path"]) / "tune.json").is_file()
    assert math.isfinite(result["wall_s"]) and result["wall_s"] < 200


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--model", "mlp", "--budget", "never"], "duration"),
        (["--model", "mlp", "--slo", "p99=20ms"], "--objective throughput"),
        (["--model", "mlp", "--objective", "throughput", "--slo", "p99"], "QUANTILE=MS"),
        (["--model", "mlp", "--allow-numerics", "int4"], "int4"),
        (["--model", "nosuch"], "nosuch"),
    ],
)
def test_tune_bad_input_is_one_line(tmp_path: Path, args: list[str], fragment: str) -> None:
    assert_one_line_error(aaco("tune", *args, "-o", str(tmp_path)), 2, fragment)


def test_gpu_providers_search_their_provider_options() -> None:
    cuda = BackendEntry(
        name="cuda", provider="CUDAExecutionProvider", provider_options={"device_id": 0}
    )
    space = search_space(cuda, cores=16, objective="latency", limit=10_000)
    algos = {c.settings["provider_options"]["cudnn_conv_algo_search"] for c in space[1:]}
    assert algos == {"EXHAUSTIVE", "HEURISTIC", "DEFAULT"}
    from aaco.experiment.tune import _entry

    e = _entry(cuda, space[1], "tune-c01")
    assert e.provider_options["device_id"] == 0  # the user's options kept, the searched added
    assert "cudnn_conv_algo_search" in e.provider_options


def test_a_candidate_whose_screening_run_fails_ranks_last_and_is_written(
    tmp_path: Path, chain: tuple[Path, Path]
) -> None:
    model, wrong = chain
    inner, _ = _fake_run(tmp_path / "runs", {"c01": 8.0}, wrong, seed=9)

    def run(opts: RunOptions) -> Session:
        if opts.backend == "tune-c02":
            return make_bundle(tmp_path / "runs", [1.0] * 10, status="failed", error="boom")
        return inner(opts)

    result = tune(
        RunOptions(model=str(model), profile=False),
        TuneSettings(budget_s=3600, ab=ABSettings(seed=3, max_pairs=12)), output=tmp_path,
        run=run,
    )  # fmt: skip
    c02 = next(t for t in result["trials"] if t["name"] == "c02")
    assert c02["screening"][0]["score_ms"] is None and "boom" in c02["screening"][0]["error"]
    assert c02["stage"].startswith("eliminated") and not c02["accepted"]
    on_disk = json.loads((Path(result["path"]) / "tune.json").read_text())
    assert on_disk["trials"][2]["screening"][0]["score_ms"] is None


def test_verify_an_all_zero_reference() -> None:
    ref = [np.zeros(4, dtype=np.float32)]
    assert verify(ref, [np.zeros(4, dtype=np.float32)])["passed"]
    v = verify(ref, [np.full(4, 0.5, dtype=np.float32)], numerics="int8")
    assert not v["passed"] and v["outputs"][0]["max_rel_error"] is None
    json.dumps(v, allow_nan=False)  # writable as tune.json is


def test_verify_non_finite_values_must_match() -> None:
    ref = [np.array([1.0, -np.inf, 2.0, np.nan], dtype=np.float32)]
    assert verify(ref, [ref[0].copy()])["passed"]  # masks and NaN at the same places: equal
    v = verify(ref, [np.array([5.0, -np.inf, -7.0, np.nan], dtype=np.float32)], numerics="int8")
    assert not v["passed"]
    moved = [np.array([1.0, 0.0, 2.0, np.nan], dtype=np.float32)]
    assert "infinities differ" in verify(ref, moved)["reason"]
    over = [np.array([1.0, -np.inf, np.inf, np.nan], dtype=np.float32)]
    v = verify(ref, over, numerics="int8", max_error=0.5)
    assert not v["passed"]
    json.dumps(v, allow_nan=False)
