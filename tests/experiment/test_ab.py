"""``aaco ab``: the experiment loop with bundles of known latencies injected at its seam (the
function that measures one configuration), and the real command end to end."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests.cli.test_cli import aaco, assert_one_line_error

from aaco.analysis.compare import INCONCLUSIVE, NO_CHANGE, REGRESSION
from aaco.errors import RunError, UsageError
from aaco.experiment.ab import ABSettings, run_ab, run_invalid_reason
from aaco.pipeline import RunOptions
from aaco.session.bundle import Session
from aaco.testing.bundles import make_bundle

CONTENDED = {
    "sched": {"scope": "window", "coverage": 1.0, "wait_share": 0.4, "other_cpu_pct_mean": 90.0}
}


def fake_runner(
    root: Path,
    level: dict[str, float],
    *,
    seed: int = 0,
    contended: Callable[[int], bool] = lambda i: False,
    status: str = "completed",
) -> tuple[Callable[[RunOptions], Session], list[str]]:
    """A ``run`` seam: each call writes a real bundle whose 30 latencies sit around the
    model's level (A or B, read from the options' model) with 1 % noise; ``contended(i)``
    marks the i-th run's scheduler summary as contended."""
    rng = np.random.default_rng(seed)
    calls: list[str] = []

    def run(opts: RunOptions) -> Session:
        i = len(calls)
        calls.append(opts.model)
        lat = level[opts.model] * rng.normal(1.0, 0.01, 30)
        extra = CONTENDED if contended(i) else None
        return make_bundle(
            root, list(lat), model=opts.model, tag=opts.tag, status=status, summary_extra=extra
        )

    return run, calls


class Clock:
    def __init__(self, step: float) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def _opts(model: str) -> RunOptions:
    return RunOptions(model=model, profile=False)


def test_a_clear_slowdown_is_a_regression_at_the_first_look(tmp_path: Path) -> None:
    run, calls = fake_runner(tmp_path, {"a": 10.0, "b": 12.0})
    seen: list[tuple[int, bool]] = []
    result = run_ab(
        _opts("a"),
        _opts("b"),
        ABSettings(seed=1),
        output=tmp_path,
        run=run,
        on_pair=lambda p, look: seen.append((p.index, look is not None)),
    )
    assert result["verdict"] == REGRESSION and result["exit_code"] == 1
    # the first look, at 12 pairs (the default schedule's), decides
    assert result["stopped"] == "decided" and result["pairs_valid"] == 12
    assert result["effect"]["pairs"] == 12 and 1.15 < result["effect"]["ratio"] < 1.25
    assert result["effect"]["ci_pct"][0] > 1.0 and result["design"]["threshold_pct"] == 1.0
    assert result["design"]["looks"] == [12, 18, 27, 41, 62, 93, 140, 160]
    assert len(calls) == 24 and calls.count("a") == calls.count("b") == 12
    # the order within pairs is random: both orders occur, and each pair runs both sides
    firsts = {p["first"] for p in result["pairs"]}
    assert firsts == {"A", "B"}
    for p, (i, j) in zip(result["pairs"], zip(calls[::2], calls[1::2], strict=True), strict=True):
        assert {i, j} == {"a", "b"} and p["first"] == ("A" if i == "a" else "B")
    assert seen[-1] == (12, True) and all(not look for _, look in seen[:-1])
    # the file, the text summary, and every run's bundle tagged with the experiment
    folder = Path(result["path"])
    on_disk = json.loads((folder / "ab.json").read_text())
    assert on_disk["verdict"] == REGRESSION and on_disk["ab_id"] == result["ab_id"]
    assert "REGRESSION" in (folder / "ab.txt").read_text()
    for p in result["pairs"]:
        s = Session.load(Path(p["b"]["path"]))
        assert s.meta["tag"] == f"{result['ab_id']}:B"
    assert result["sides"]["A"]["runs"] == 12 and len(result["sides"]["B"]["sessions"]) == 12


def test_same_configuration_is_no_change(tmp_path: Path) -> None:
    run, _ = fake_runner(tmp_path, {"a": 10.0, "b": 10.0}, seed=2)
    result = run_ab(
        _opts("a"), _opts("b"), ABSettings(seed=3, threshold=0.03), output=tmp_path, run=run
    )
    assert result["verdict"] == NO_CHANGE and result["exit_code"] == 0
    assert -3 < result["effect"]["ci_pct"][0] <= result["effect"]["ci_pct"][1] < 3


def test_contended_pairs_are_redone_and_do_not_count(tmp_path: Path) -> None:
    # runs 0, 1 (pair 1) and 5 (pair 3) contended: two pairs redone
    bad = {0, 1, 5}
    run, calls = fake_runner(tmp_path, {"a": 10.0, "b": 12.0}, contended=lambda i: i in bad)
    result = run_ab(_opts("a"), _opts("b"), ABSettings(seed=4), output=tmp_path, run=run)
    assert result["verdict"] == REGRESSION
    assert result["pairs_invalid"] == 2 and result["pairs_valid"] == 12
    assert len(calls) == 28
    invalid = [p for p in result["pairs"] if not p["valid"]]
    assert [p["index"] for p in invalid] == [1, 3]
    assert "waited 40%" in (invalid[0]["a"]["invalid"] or invalid[0]["b"]["invalid"])
    # --allow-contention: every pair counts
    run, calls = fake_runner(tmp_path, {"a": 10.0, "b": 12.0}, contended=lambda i: True)
    result = run_ab(
        _opts("a"), _opts("b"), ABSettings(seed=4, check_contention=False),
        output=tmp_path, run=run,
    )  # fmt: skip
    assert result["pairs_invalid"] == 0 and result["verdict"] == REGRESSION


def test_a_busy_machine_exhausts_the_invalid_budget(tmp_path: Path) -> None:
    run, calls = fake_runner(tmp_path, {"a": 10.0, "b": 12.0}, contended=lambda i: True)
    result = run_ab(
        _opts("a"), _opts("b"), ABSettings(seed=5, min_pairs=8, max_pairs=10, max_invalid=3),
        output=tmp_path, run=run,
    )  # fmt: skip
    assert result["verdict"] == INCONCLUSIVE and result["exit_code"] == 3
    assert result["stopped"] == "invalid-pairs" and result["pairs_invalid"] == 4
    assert "not valid" in result["stopped_reason"] and len(calls) == 8


def test_budgets_stop_the_experiment_and_say_which(tmp_path: Path) -> None:
    # the sides differ by 2 % with 1 % noise: a margin of 3 % cannot be decided in 10 pairs
    run, _ = fake_runner(tmp_path, {"a": 10.0, "b": 10.25}, seed=6)
    result = run_ab(
        _opts("a"), _opts("b"), ABSettings(seed=6, min_pairs=8, max_pairs=10, threshold=0.03),
        output=tmp_path, run=run,
    )  # fmt: skip
    assert result["verdict"] == INCONCLUSIVE and result["stopped"] == "max-pairs"
    assert result["pairs_valid"] == 10 and [x["pairs"] for x in result["looks"]] == [8, 10]
    assert "straddles the margin" in result["warnings"][0]
    # --max-time: the clock advances 10 s per reading; a pair takes 4 readings (40 s), and
    # no new one starts past 65 s
    run, calls = fake_runner(tmp_path, {"a": 10.0, "b": 12.0}, seed=7)
    result = run_ab(
        _opts("a"), _opts("b"), ABSettings(seed=7, max_time_s=65), output=tmp_path, run=run,
        clock=Clock(10.0),
    )  # fmt: skip
    assert result["stopped"] == "max-time" and result["verdict"] == INCONCLUSIVE
    assert result["pairs_valid"] == 2 and len(calls) == 4
    assert "max-time 65 s" in result["stopped_reason"]
    assert "no look was reached" in result["warnings"][0]


def test_a_run_that_fails_ends_the_experiment_with_a_run_error(tmp_path: Path) -> None:
    run, _ = fake_runner(tmp_path, {"a": 10.0, "b": 12.0}, status="failed")
    with pytest.raises(RunError, match="does not run"):
        run_ab(_opts("a"), _opts("b"), ABSettings(seed=8), output=tmp_path, run=run)


def test_settings_are_checked() -> None:
    for bad in (
        ABSettings(gate="p42"),
        ABSettings(method="t"),
        ABSettings(min_pairs=1),
        ABSettings(min_pairs=10, max_pairs=5),
        ABSettings(max_time_s=0),
        ABSettings(alpha=1.5),
    ):
        with pytest.raises(UsageError):
            bad.check()


def test_invalid_reason_reads_the_bundles_evidence(tmp_path: Path) -> None:
    ok = make_bundle(tmp_path, [1.0] * 20)
    assert run_invalid_reason(ok) is None
    busy = make_bundle(tmp_path, [1.0] * 20, summary_extra=CONTENDED)
    assert "waited 40%" in (run_invalid_reason(busy) or "")
    assert run_invalid_reason(busy, check_contention=False) is None
    failed = make_bundle(tmp_path, [1.0] * 20, status="failed")
    assert run_invalid_reason(failed) == "the run failed"


# -- the command, end to end ----------------------------------------------------------------
@pytest.fixture(scope="module")
def ab_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    root = tmp_path_factory.mktemp("ab")
    side = "--model mlp --iterations 12 --warmup 2 --threads 1 --no-telemetry"
    proc = aaco(
        "ab", "--a", side, "--b", side + " --tag mine", "--min-pairs", "2", "--max-pairs", "2",
        "--seed", "9", "-o", str(root), "-f", "json", timeout=300,
    )  # fmt: skip
    yield root, proc


def test_ab_command_runs_fresh_sessions_and_writes_its_result(ab_run: tuple[Path, Any]) -> None:
    root, proc = ab_run
    assert proc.returncode in (0, 1, 3), proc.stderr
    result = json.loads(proc.stdout)
    assert result["exit_code"] == proc.returncode
    assert result["design"]["looks"] == [2] and result["design"]["seed"] == 9
    assert result["pairs_valid"] == 2  # --no-telemetry: no contention evidence to invalidate
    assert (Path(result["path"]) / "ab.json").is_file()
    assert "pair 1:" in proc.stderr and "look at 2 pairs" in proc.stderr
    sessions = [Path(p[s]["path"]) for p in result["pairs"] for s in ("a", "b")]
    tags = sorted(Session.load(p).meta["tag"] for p in sessions)
    ab_id = result["ab_id"]
    assert tags == [f"{ab_id}:A"] * 2 + [f"mine ({ab_id}:B)"] * 2
    for p in sessions:
        s = Session.load(p)
        assert s.status == "completed" and s.path.parent.parent == root
        assert s.meta["run"]["iterations"] == 12
        # measured only: no operator profile pass
        assert s.ops() is None


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--a", "--model mlp --repeat 3", "--b", "--model mlp"], "--repeat is set by aaco ab"),
        (["--a", "--model mlp", "--b", "--model mlp -o x"], "--output is set by aaco ab"),
        (["--a", "--model mlp"], "give each side once"),
        (["--a", "--model mlp", "--b", "--modle mlp"], "--b: No such option"),
        (["--a", "--model 'mlp", "--b", "--model mlp"], "--a"),
        (["--a", "--model mlp", "--b", "--model mlp", "--max-time", "soon"], "duration"),
        (["--a", "--model mlp", "--b", "--model mlp", "--min-pairs", "1"], "min-pairs"),
        (
            ["--a", "--model nosuch", "--b", "--model mlp", "--max-pairs", "2", "--min-pairs", "2"],
            "nosuch",
        ),
    ],
)
def test_ab_bad_input_is_one_line(tmp_path: Path, args: list[str], fragment: str) -> None:
    proc = aaco("ab", *args, "-o", str(tmp_path))
    assert_one_line_error(proc, 2, fragment)


def test_ab_from_a_recorded_session_shows_it_as_history(
    ab_run: tuple[Path, Any], tmp_path: Path
) -> None:
    """--a-session S: A's options are S's (as aaco rerun reads them); S itself is shown
    beside the fresh A runs, not judged."""
    _root, proc = ab_run
    first = json.loads(proc.stdout)["pairs"][0]["a"]
    side = "--model mlp --iterations 12 --warmup 2 --threads 1 --no-telemetry"
    proc = aaco(
        "ab", "--a-session", first["path"], "--b", side, "--max-pairs", "2", "--seed", "1",
        "-o", str(tmp_path), "-f", "json", timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1, 3), proc.stderr
    result = json.loads(proc.stdout)
    h = result["history"]
    assert h["session_id"] == first["session_id"] and h["value_ms"] == first["value_ms"]
    fresh = result["sides"]["A"]["value_ms_median"]
    assert h["drift_pct"] == pytest.approx((fresh / h["value_ms"] - 1) * 100)
    a_runs = [Session.load(Path(p["a"]["path"])) for p in result["pairs"]]
    assert all(s.meta["run"]["iterations"] == 12 for s in a_runs)
    assert all(s.meta.get("rerun_of") is None for s in a_runs)


def test_an_interrupted_experiment_writes_what_it_did(tmp_path: Path) -> None:
    inner, calls = fake_runner(tmp_path, {"a": 10.0, "b": 12.0})

    def run(opts: RunOptions) -> Session:
        if len(calls) == 7:  # during the fourth pair
            raise KeyboardInterrupt
        return inner(opts)

    with pytest.raises(KeyboardInterrupt):
        run_ab(_opts("a"), _opts("b"), ABSettings(seed=1), output=tmp_path, run=run)
    (written,) = (tmp_path / "ab").glob("*/ab.json")
    result = json.loads(written.read_text())
    assert result["stopped"] == "interrupted" and result["verdict"] == INCONCLUSIVE
    assert result["pairs_valid"] == 3 and "interrupted after 3" in result["stopped_reason"]


def test_a_side_that_stops_running_keeps_the_pairs_done(tmp_path: Path) -> None:
    inner, calls = fake_runner(tmp_path, {"a": 10.0, "b": 12.0})

    def run(opts: RunOptions) -> Session:
        if len(calls) == 5:  # the third pair's first run
            calls.append("x")
            return make_bundle(tmp_path, [1.0] * 20, status="failed", error="worker died")
        return inner(opts)

    with pytest.raises(RunError, match="does not run"):
        run_ab(_opts("a"), _opts("b"), ABSettings(seed=1), output=tmp_path, run=run)
    (written,) = (tmp_path / "ab").glob("*/ab.json")
    result = json.loads(written.read_text())
    assert result["stopped"] == "failed" and result["pairs_valid"] == 2
