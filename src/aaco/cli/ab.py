"""``aaco ab``: an interleaved A/B experiment between two ``aaco run`` configurations."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from aaco.cli._common import err, out, sessions_root
from aaco.cli.diff import parse_threshold
from aaco.errors import UsageError

if TYPE_CHECKING:
    from aaco.analysis.paired import PairedLook
    from aaco.experiment.ab import PairRecord
    from aaco.pipeline import RunOptions

#: aaco.analysis.paired's first look, without importing numpy when the command loads
DEFAULT_MIN_PAIRS = 12
#: aaco run options a side may not set: the experiment owns them
_OWNED = {"repeat": "--repeat", "output": "--output", "report_format": "--report"}


def parse_duration(value: str) -> float:
    """``90``, ``90s``, ``10m``, ``1.5h`` -> seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", value)
    if not m:
        raise UsageError(f"{value!r}: expected a duration such as 90s, 10m or 1h")
    seconds = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    if seconds <= 0:
        raise UsageError(f"{value!r}: the duration must be positive")
    return seconds


def side_options(label: str, text: str, output: Path) -> RunOptions:
    """A side's RunOptions from an ``aaco run`` option string, parsed by ``aaco run``'s own
    parser. The experiment measures only (no operator profile, no calibration in between)."""
    from aaco.cli.run import build_options, run

    try:
        args = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--{label.lower()} {text!r}: {exc}") from None
    try:
        ctx = run.make_context(f"aaco ab --{label.lower()}", args)
    except click.UsageError as exc:
        raise UsageError(f"--{label.lower()}: {exc.format_message()}") from None
    for key, flag in _OWNED.items():
        if ctx.get_parameter_source(key) is click.core.ParameterSource.COMMANDLINE:
            raise UsageError(f"--{label.lower()}: {flag} is set by aaco ab, not per side")
    params = dict(ctx.params)
    params["output"] = output
    opts = build_options(params, argv=["aaco", "run", *args])
    return dataclasses.replace(opts, profile=False, auto_calibrate=False)


def _session_options(label: str, path: Path, output: Path) -> tuple[RunOptions, Any]:
    from aaco.runners.capsule import prepare_rerun
    from aaco.session.bundle import Session

    plan = prepare_rerun(path, output=output, argv=None)
    for w in plan.warnings:
        err(f"warning: --{label.lower()}-session: {w}")
    opts = dataclasses.replace(plan.options, profile=False, auto_calibrate=False, rerun_of=None)
    return opts, Session.load(path)


@click.command()
@click.option(
    "--a",
    "a_text",
    metavar="OPTIONS",
    help='Side A: aaco run options, quoted ("--model m.onnx --threads 1").',
)
@click.option("--b", "b_text", metavar="OPTIONS", help="Side B: aaco run options, quoted.")
@click.option(
    "--a-session",
    type=click.Path(path_type=Path),
    help="Side A: the options of this recorded session (as aaco rerun); the session is "
    "shown beside the fresh runs as history, not judged.",
)
@click.option(
    "--b-session", type=click.Path(path_type=Path), help="Side B: a recorded session's options."
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Sessions root of every run, and of ab/<id>/ab.json (default ./sessions or "
    "$AACO_SESSIONS).",
)
@click.option(
    "--threshold",
    "-t",
    default="1%",
    show_default=True,
    help="Smallest change that matters, in percent: the equivalence margin.",
)
@click.option("--gate", default="p10", show_default=True, help="Quantile of each run compared.")
@click.option(
    "--method",
    type=click.Choice(["sign", "signed-rank", "bootstrap"]),
    default="sign",
    show_default=True,
    help="Interval of the pair ratios: sign (median, exact, no assumption), signed-rank "
    "(Hodges-Lehmann, symmetric), bootstrap (mean; hierarchical bootstrap).",
)
@click.option("--min-pairs", type=int, help="The first look (default 12, or --max-pairs if less).")
@click.option(
    "--max-pairs", type=int, default=160, show_default=True, help="Budget: valid pairs at most."
)
@click.option("--max-time", help="Budget: wall time (90s, 10m, 1h); stops before a new pair.")
@click.option("--alpha", type=float, default=0.05, show_default=True, help="Error rate.")
@click.option("--seed", type=int, help="Seed of the order within pairs (default: random).")
@click.option(
    "--allow-contention",
    is_flag=True,
    help="Keep pairs whose runs met CPU contention (by default such a pair is redone).",
)
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["terminal", "json"]),
    default="terminal",
    show_default=True,
)
@click.option("--quiet", "-q", is_flag=True, help="No progress line per pair.")
def ab(
    a_text: str | None,
    b_text: str | None,
    a_session: Path | None,
    b_session: Path | None,
    output: Path | None,
    threshold: str,
    gate: str,
    method: str,
    min_pairs: int | None,
    max_pairs: int,
    max_time: str | None,
    alpha: float,
    seed: int | None,
    allow_contention: bool,
    fmt: str,
    quiet: bool,
) -> int:
    """Interleaved A/B of two run configurations, alternating fresh runs until decided.

    A and B run in pairs, the order within each pair random, each run a fresh aaco run
    (worker process and bundle); the pairs' ratios are judged at a group-sequential schedule
    of looks, and the experiment stops once the verdict is decided or the budget is spent.
    Exit status as aaco diff: 0 no change or improvement, 1 regression (B slower than A),
    3 inconclusive, 2 bad input.
    """
    from aaco.experiment.ab import ABSettings, ab_summary_lines, run_ab

    root = sessions_root(output)
    if (a_text is None) == (a_session is None) or (b_text is None) == (b_session is None):
        raise UsageError(
            "give each side once: --a OPTIONS or --a-session S, and --b or --b-session"
        )
    history = None
    if a_session is not None:
        a_opts, history = _session_options("A", a_session, root)
    else:
        assert a_text is not None
        a_opts = side_options("A", a_text, root)
    if b_session is not None:
        b_opts, _ = _session_options("B", b_session, root)
    else:
        assert b_text is not None
        b_opts = side_options("B", b_text, root)
    settings = ABSettings(
        gate=gate,
        threshold=parse_threshold(threshold),
        alpha=alpha,
        method=method,
        min_pairs=min_pairs if min_pairs is not None else min(DEFAULT_MIN_PAIRS, max_pairs),
        max_pairs=max_pairs,
        max_time_s=parse_duration(max_time) if max_time else None,
        seed=seed,
        check_contention=not allow_contention,
    )
    settings.check()

    def progress(pair: PairRecord, look: PairedLook | None) -> None:
        if quiet:
            return
        va, vb = pair.a.value_ms, pair.b.value_ms
        line = f"pair {pair.index}: {pair.first} first, A {va:.3f} ms, B {vb:.3f} ms"
        if not pair.valid:
            why = pair.a.invalid or pair.b.invalid
            line += f", not valid ({why}): redone"
        if look is not None:
            lo, hi = look.ci_pct
            line += (
                f"; look at {look.pairs} pairs: {look.delta_pct:+.1f} % "
                f"[{lo:+.1f}, {hi:+.1f}] -> {look.verdict if look.decided else 'go on'}"
            )
        err(line)

    result = run_ab(a_opts, b_opts, settings, output=root, on_pair=progress, history=history)
    if fmt == "json":
        out(json.dumps(result, indent=2))
    else:
        out("\n".join(ab_summary_lines(result)))
    sys.stderr.write(f"ab: {result['path']}\n")
    code: int = result["exit_code"]
    return code
