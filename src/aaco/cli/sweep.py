"""``aaco sweep``: a matrix of runs from a YAML file, here one at a time or over Ray."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from aaco.cli._common import color, err, out, sessions_option, sessions_root, width
from aaco.errors import UsageError


def _command(name: str) -> click.Command:
    """The click command a sweep's points run (its parser checks every point up front)."""
    if name == "run":
        from aaco.cli.run import run

        return run
    from aaco.cli.llm import llm_app

    command = llm_app.commands[name.split()[1]]
    return command


def check_points(command_name: str, points: list[Any]) -> None:
    """Parse every point's options with the command's own parser before any runs: an
    unknown option or a bad value is a usage error naming the point."""
    from aaco.experiment.sweep import point_argv

    command = _command(command_name)
    for point in points:
        argv = point_argv(point.options)
        try:
            with command.make_context(f"aaco {command_name}", list(argv)) as _ctx:
                pass
        except click.exceptions.Exit:
            continue
        except click.UsageError as exc:
            shown = ", ".join(f"{k}={v}" for k, v in point.options.items())
            raise UsageError(f"point {point.id} ({shown}): {exc.format_message()}") from None


@click.command()
@click.argument("sweep_file", type=click.Path(path_type=Path))
@sessions_option("Sessions root the points' bundles go to.")
@click.option("--name", help="The sweep's name (default: the file's `name`, else its stem).")
@click.option("--resume", is_flag=True, help="Continue the sweep of that name: skip done points.")
@click.option(
    "--ray",
    "ray_address",
    metavar="local|auto|ADDRESS",
    help="Run the points as Ray tasks: local starts Ray here, auto or ADDRESS joins a cluster "
    "(pip install 'aaco[ray]').",
)
@click.option(
    "--share-nodes",
    is_flag=True,
    help="Ray: let points share a node by their resources (default: one measurement per node).",
)
@click.option(
    "--parallel",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Without Ray: points at once on this machine (more than 1 measures them together).",
)
@click.option(
    "--lake", type=click.Path(path_type=Path), help="Export the sessions root into this lake."
)
@click.option("--dry-run", is_flag=True, help="List the points and their commands; run nothing.")
@click.option("--json", "as_json", is_flag=True, help="The sweep's record as JSON.")
def sweep(
    sweep_file: Path,
    sessions: Path | None,
    name: str | None,
    resume: bool,
    ray_address: str | None,
    share_nodes: bool,
    parallel: int,
    lake: Path | None,
    dry_run: bool,
    as_json: bool,
) -> int:
    """Run a matrix of runs (models x backends x batch x threads x any option of aaco run,
    or load points of aaco llm bench) from SWEEP_FILE, one at a time here or fanned over
    Ray; exit 1 when a point failed."""
    from aaco.experiment.sweep import COMMANDS, load_spec, point_argv, run_sweep

    spec = load_spec(sweep_file, name)
    points = spec.points()
    check_points(spec.command, points)
    if share_nodes and ray_address is None:
        raise UsageError("--share-nodes is for --ray")
    if parallel > 1 and ray_address is not None:
        raise UsageError("--parallel is for runs without --ray (Ray places points itself)")
    if dry_run:
        words = " ".join(COMMANDS[spec.command])
        for p in points:
            out(f"{p.id}  aaco {words} {' '.join(point_argv(p.options))}")
        return 0
    root = sessions_root(sessions)
    total = len(points)
    count = [0]

    def progress(record: dict[str, Any]) -> None:
        count[0] += 1
        shown = " ".join(f"{k}={record['options'].get(k)}" for k in spec.matrix)
        last = record["attempts"][-1]
        if last["error"] is None:
            figure = (
                f"p50 {record['p50_ms']:.4g} ms"
                if record.get("p50_ms") is not None
                else f"TTFT p50 {record['ttft_p50_ms']:.4g} ms"
                if record.get("ttft_p50_ms") is not None
                else "latency unknown"
            )
            what = f"completed, {figure} ({last['session_id']})"
        else:
            what = f"failed: {last['error']}" + (", retrying" if record["retrying"] else "")
        err(f"sweep [{count[0]}/{total}] {record['id']} {shown}: {what}")

    result = run_sweep(
        spec,
        root,
        resume=resume,
        ray_address=ray_address,
        share_nodes=share_nodes,
        parallel=parallel,
        lake=lake,
        progress=progress,
    )
    if as_json:
        out(json.dumps(result, indent=2, default=str))
    else:
        from aaco.experiment.sweep import results_table
        from aaco.report.query import render_sweep

        table = results_table(result["points"], result["option_keys"])
        out(render_sweep(result, table, width=width(), color=color()))
    return 1 if result["failed"] else 0
