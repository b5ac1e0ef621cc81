"""``aaco ls``, ``aaco history``, ``aaco check`` and ``aaco baseline``: the sessions under a
sessions root, their trend, SLA rules, and named baselines."""

from __future__ import annotations

import json
from pathlib import Path

import click

from aaco.cli._common import (
    color,
    json_option,
    out,
    session_path,
    sessions_option,
    sessions_root,
    width,
)
from aaco.errors import BundleError, InputError, UsageError


@click.command("ls")
@sessions_option()
@click.option(
    "--limit", type=int, default=20, show_default=True, help="Newest N sessions (0 = all)."
)
@json_option("JSON lines instead of a table.")
def ls_command(sessions: Path | None, limit: int, as_json: bool) -> None:
    """List sessions: time, model, backend, batch, p50, status."""
    from aaco.session.catalog import list_sessions  # lazy: ~5 ms of start-up

    root = sessions_root(sessions)
    rows = list_sessions(root)
    if limit > 0:
        rows = rows[-limit:]
    if as_json:
        if rows:  # JSON lines, written at once
            out("\n".join(json.dumps(r) for r in rows))
        return
    if not rows:
        out(f"no sessions under {root}")
        return
    from aaco.report.listing import render_sessions_table  # lazy: rich, the report modules

    out(render_sessions_table(rows, width=width(), color=color()))


@click.command()
@sessions_option()
@click.option(
    "--lake",
    type=click.Path(path_type=Path),
    help="Read the sessions from this lake (aaco lake export) instead: every machine's.",
)
@click.option("--model", "-m", help="Only this model.")
@click.option("--backend", help="Only this backend.")
@click.option("--tag", help="Only sessions with this tag.")
@click.option("--window", type=int, default=50, show_default=True, help="Change-point window.")
@click.option(
    "--max-p", type=float, default=0.001, show_default=True, help="Change-point significance."
)
@json_option("JSON instead of tables.")
def history(
    sessions: Path | None,
    lake: Path | None,
    model: str | None,
    backend: str | None,
    tag: str | None,
    window: int,
    max_p: float,
    as_json: bool,
) -> None:
    """Sessions of each configuration over time, with detected change points (one series
    per configuration and machine)."""
    # lazy: scipy, rich (~0.9 s)
    from aaco.regress.history import folder_rows, history_from_rows
    from aaco.report.regress import render_history_terminal

    if window < 6:
        raise UsageError("--window must be at least 6")
    if not 0 < max_p < 1:
        raise UsageError("--max-p must lie in (0, 1)")
    if lake is not None:
        from aaco.lake.layout import open_lake  # lazy: pyarrow
        from aaco.lake.read import history_rows

        open_lake(lake, create=False)
        rows = history_rows(lake)
    else:
        root = sessions_root(sessions)
        if not root.is_dir():
            raise InputError(f"{root}: no such sessions root")
        rows = list(folder_rows(root))
    groups = history_from_rows(
        rows, model=model, backend=backend, tag=tag, window=window, max_p=max_p
    )
    if as_json:
        out(json.dumps(groups, indent=2))
    else:
        out(render_history_terminal(groups, width=width(), color=color()))


@click.command()
@click.option("--session", "-s", default="latest", show_default=True, help="Bundle, or 'latest'.")
@sessions_option("Sessions root for 'latest'.")
@click.option("--sla", required=True, type=click.Path(path_type=Path), help="YAML file of rules.")
@click.option("--allow-unknown", is_flag=True, help="A rule whose metric is missing passes.")
@click.option(
    "--point",
    default=None,
    help="Serving sessions: the load point the rules bound, an index into the sweep (default "
    "0, the first) or concurrency=N / rate=R.",
)
@json_option("JSON instead of text.")
def check(
    session: str,
    sessions: Path | None,
    sla: Path,
    allow_unknown: bool,
    point: str | None,
    as_json: bool,
) -> int:
    """Check a session against SLA rules (p99_ms <= 12, throughput >= 200, ttft_p99_ms < 200,
    failed_fraction <= 0.01 ...); exit 1 on a violation."""
    # lazy: yaml, scipy, rich
    from aaco.regress.sla import check as run_check
    from aaco.regress.sla import load_rules
    from aaco.report.regress import render_check_terminal
    from aaco.session.bundle import Session  # lazy: pyarrow, which `aaco ls` does without

    rules = load_rules(sla)
    s = Session.load(session_path(session, sessions))
    if s.status != "completed":
        raise BundleError(f"{s.path}: the run {s.status}; there is nothing to check")
    result = run_check(s, rules, allow_unknown=allow_unknown, point=point)
    if as_json:
        out(json.dumps(result, indent=2))
    else:
        out(render_check_terminal(result))
    return 0 if result["passed"] else 1


@click.group("baseline")
def baseline_app() -> None:
    """Named baselines to diff against (stored under the sessions root)."""


@baseline_app.command("save")
@click.argument("name")
@click.option(
    "--session",
    "-s",
    "session_args",
    multiple=True,
    help="Bundle, or 'latest' (default); repeat to save several runs of one configuration.",
)
@sessions_option()
@click.option("--force", is_flag=True, help="Replace a baseline of that name.")
def baseline_save(
    name: str, session_args: tuple[str, ...], sessions: Path | None, force: bool
) -> None:
    """Save SESSION(s) as baseline NAME."""
    # lazy: ~3 ms of start-up
    from aaco.regress.baseline import check_name, save_baseline
    from aaco.session.bundle import Session  # lazy: pyarrow, which `aaco ls` does without

    check_name(name)
    runs = [Session.load(session_path(s, sessions)) for s in session_args or ("latest",)]
    f = save_baseline(sessions_root(sessions), name, runs, force=force)
    out(f"baseline {name} -> {', '.join(s.session_id for s in runs)} ({f})")


@baseline_app.command("list")
@sessions_option()
@json_option()
def baseline_list(sessions: Path | None, as_json: bool) -> None:
    """List saved baselines."""
    from aaco.regress.baseline import list_baselines  # lazy: ~3 ms of start-up

    root = sessions_root(sessions)
    rows = list_baselines(root)
    if as_json:
        out(json.dumps(rows, indent=2))
        return
    if not rows:
        out(f"no baselines under {root}")
        return
    for r in rows:
        if "error" in r:
            out(f"{r['name']}: {r['error']}")
            continue
        if r.get("kind") == "serving":
            first = (r.get("serving_points") or [{}])[0]
            p50, what = first.get("ttft_p50_ms"), f"at {first.get('load')}, ttft p50"
        else:
            p50, what = (r.get("latency_ms") or {}).get("p50"), "p50"
        out(
            f"{r['name']:<20} {r.get('session_id')}  {(r.get('model') or {}).get('name')} on "
            f"{(r.get('backend') or {}).get('name')}  {what} "
            f"{'unknown' if p50 is None else format(p50, '.4g') + ' ms'}  "
            f"saved {r.get('saved_utc')}" + ("" if r.get("exists") else "  [bundle missing]")
        )


@baseline_app.command("show")
@click.argument("name")
@sessions_option()
def baseline_show(name: str, sessions: Path | None) -> None:
    """Show a baseline's record (JSON)."""
    from aaco.regress.baseline import load_baseline  # lazy: ~3 ms of start-up

    out(json.dumps(load_baseline(sessions_root(sessions), name), indent=2))
