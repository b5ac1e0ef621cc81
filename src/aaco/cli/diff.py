"""``aaco diff``: did a session regress against a baseline?"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from aaco.cli._common import color, err, out, session_path, sessions_option, sessions_root, width
from aaco.errors import InputError, UsageError
from aaco.session.bundle import Session


def parse_threshold(value: str) -> float:
    """A percentage, with or without the sign: ``5%`` and ``5`` -> 0.05, ``0.5`` -> 0.005.

    Bare numbers are always percent: reading ``0.5`` as a fraction (50 %) but ``1`` as 1 %
    would make the meaning jump at 1.
    """
    text = value.strip()
    try:
        v = float(text[:-1] if text.endswith("%") else text) / 100.0
    except ValueError:
        raise UsageError(
            f"--threshold {value!r}: expected a percentage such as 5% or 2.5"
        ) from None
    if not (math.isfinite(v) and 0 <= v < 1):
        raise UsageError(f"--threshold {value!r}: must lie in [0 %, 100 %)")
    return abs(v)  # -0 % is 0 %


@click.command()
@click.option(
    "--baseline",
    "-b",
    "baselines",
    required=True,
    multiple=True,
    help="Baseline: a bundle path or a saved baseline name (repeat for several runs).",
)
@click.option(
    "--session",
    "-s",
    "session_args",
    multiple=True,
    help="Bundle to judge (default 'latest'; repeat for several runs of one configuration).",
)
@sessions_option("Sessions root (baselines).")
@click.option(
    "--threshold",
    "-t",
    default="3%",
    show_default=True,
    help="Smallest change that matters, in percent (3% or 3); the margin is max(this, the "
    "baseline's noise floor).",
)
@click.option(
    "--gate",
    default=None,
    help="Quantiles that gate the verdict, comma-separated, Holm-corrected: p10,p50,p90,p99 "
    "for model runs (default p10); METRIC:QUANTILE for serving sessions (default "
    "ttft:p50,ttft:p99,tpot:p50,output_tokens_per_s:p50; metrics ttft, tpot, e2e, "
    "output_tokens_per_s).",
)
@click.option(
    "--point",
    default=None,
    help="Serving sessions: the load point to compare, an index into the baseline's sweep "
    "(default 0, the first) or concurrency=N / rate=R; the session's point at the same load "
    "is compared.",
)
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["terminal", "json", "markdown"]),
    default="terminal",
    show_default=True,
)
@click.option(
    "--allow-model-change", is_flag=True, help="Compare bundles of differently named models."
)
@click.option(
    "--no-history", is_flag=True, help="Ignore the baseline's history (no learned noise floor)."
)
@click.option(
    "--allow-contention",
    is_flag=True,
    help="Judge even when other processes took the CPU during a measured phase (by default "
    "that makes a REGRESSION or IMPROVEMENT inconclusive).",
)
def diff(
    baselines: tuple[str, ...],
    session_args: tuple[str, ...],
    sessions: Path | None,
    threshold: str,
    gate: str | None,
    point: str | None,
    fmt: str,
    allow_model_change: bool,
    no_history: bool,
    allow_contention: bool,
) -> int:
    """Did SESSION regress against BASELINE? Writes regress/diff.json and verdict.json.

    Exit status: 0 no change or improvement, 1 regression, 3 inconclusive, 2 bad input,
    4 an internal error of AACO.
    """
    # lazy: scipy, rich (~0.9 s)
    from aaco.regress.baseline import resolve
    from aaco.regress.diff import diff_sessions, write_diff
    from aaco.report.regress import render_diff_markdown, render_diff_terminal

    root = sessions_root(sessions)
    base: list[Session] = []
    names: list[str] = []
    for spec in baselines:
        found, name = resolve(spec, root)
        base += found
        names += [name] if name else []
    targets = [Session.load(session_path(s, sessions)) for s in session_args or ("latest",)]
    gates = None if gate is None else [g.strip() for g in gate.split(",") if g.strip()]
    result = diff_sessions(
        base,
        targets,
        threshold=parse_threshold(threshold),
        gates=gates,
        baseline_name=",".join(names) or None,
        sessions_root=root.resolve() if root.is_dir() else None,
        allow_model_change=allow_model_change,
        use_history=not no_history,
        check_contention=not allow_contention,
        point=point,
    )
    for target in targets:
        try:
            write_diff(target, result)
        except OSError as exc:
            raise InputError(f"cannot write into {target.path}: {exc.strerror or exc}") from exc
    # loud on stderr whatever the format, so that CI logs show them next to the exit code
    for w in result["verdict"]["warnings"]:
        if w.startswith(("DIFFERENT", "different", "MEASUREMENT", "FAILED")):
            err(f"warning: {w}")
    if fmt == "json":
        out(json.dumps(result, indent=2))
    elif fmt == "markdown":
        out(render_diff_markdown(result))
    else:
        out(render_diff_terminal(result, width=width(), color=color()))
    code: int = result["verdict"]["exit_code"]
    return code
