"""The ``aaco`` command line: thin commands over the library; the only module that prints.

Exit codes: 0 success; 1 a run that failed or timed out, a regression (``diff``) or a
violated rule (``check``); 2 a usage error (bad option, unknown name, unreadable or malformed
input, a path that is not a bundle); 3 an inconclusive ``diff``; 4 an internal error of AACO
itself (a bug: rerun with --debug and report the traceback); 130 interrupted.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

import click

from aaco import __version__
from aaco.errors import (
    AacoError,
    BundleError,
    InputError,
    RunError,
    UsageError,
    attached_warnings,
)

_CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=_CONTEXT)
@click.option("--debug", is_flag=True, help="Show tracebacks on errors.")
@click.version_option(__version__, "--version", prog_name="aaco", message="%(prog)s %(version)s")
def app(debug: bool) -> None:
    """AACO, the AI Compute Observatory: where the time of an AI inference went, and why."""


@app.group("models")
def models_app() -> None:
    """Built-in and registered models."""


def _sessions_root(value: Path | None) -> Path:
    if value is not None:
        return value
    env = os.environ.get("AACO_SESSIONS")
    return Path(env) if env else Path("sessions")


def _out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(f"aaco: {text}\n")
    sys.stderr.flush()


def _color() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def _width() -> int:
    try:
        return max(80, min(160, os.get_terminal_size().columns))
    except OSError:
        return 110


def _parse_shapes(values: list[str] | None) -> dict[str, list[int]]:
    from aaco.config import parse_shape_arg

    shapes: dict[str, list[int]] = {}
    for v in values or []:
        name, dims = parse_shape_arg(v)
        shapes[name] = dims
    return shapes


@app.command()
@click.option(
    "--model",
    "-m",
    required=True,
    help="Registry name or .onnx path; with --framework torch: module:function, "
    "file.py:function or a saved torch.export .pt2.",
)
@click.option(
    "--framework",
    type=click.Choice(["onnxruntime", "torch"]),
    default="onnxruntime",
    show_default=True,
    help="Runtime that executes the model (torch needs pip install 'aaco[torch]').",
)
@click.option(
    "--backend",
    default=None,
    help="cpu (default), cuda, rocm, migraphx, ... or any ONNX Runtime provider name.",
)
@click.option("--device", help="torch only: cpu (default), cuda or cuda:N (ROCm GPUs too).")
@click.option("--compile", "compile_", is_flag=True, help="torch only: apply torch.compile.")
@click.option("--batch", type=int, help="Batch size for symbolic leading dimensions.")
@click.option(
    "--shape",
    multiple=True,
    help="Input shape NAME=1x3x224x224 (repeatable; -1 leaves a dimension open, "
    "NAME=scalar for rank 0).",
)
@click.option(
    "--input",
    "input_values",
    multiple=True,
    help="Input values NAME=NUMBER (every element) or NAME=FILE.npy (repeatable).",
)
@click.option("--warmup", type=int, help="Warmup iterations (registry value, else 10).")
@click.option("--iterations", type=int, help="Measured iterations (registry value, else 100).")
@click.option(
    "--duration", type=float, help="Measure for this many seconds instead of --iterations."
)
@click.option("--threads", type=int, help="Intra-op threads (0 = onnxruntime default).")
@click.option("--tag", help="Free text stored with the session.")
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run N sessions in a row, each in a fresh worker (runs to pool in aaco diff).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Sessions root (default ./sessions or $AACO_SESSIONS).",
)
@click.option("--no-profile", is_flag=True, help="Skip the operator-profile pass.")
@click.option(
    "--profile",
    "profile_mode",
    type=click.Choice(["ops", "kernels"]),
    default="ops",
    show_default=True,
    help="ops: operator profile; kernels: also a GPU kernel trace (rocprofv3 on rocm/migraphx).",
)
@click.option(
    "--profile-iterations",
    type=int,
    default=10,
    show_default=True,
    help="Iterations of the profiled pass.",
)
@click.option(
    "--preprocess",
    help="Host-side step inside each timed iteration: image (a full-HD frame normalised and "
    "resized to the model's [N,3,H,W] input) or none.",
)
@click.option("--no-telemetry", is_flag=True, help="Do not sample telemetry.")
@click.option(
    "--no-calibrate",
    is_flag=True,
    help="Without a stored calibration, leave the CPU roofline without ceilings instead of "
    "measuring a quick one after the run (also: AACO_AUTO_CALIBRATE=0).",
)
@click.option("--sample-hz", type=float, default=10.0, show_default=True, help="Telemetry rate.")
@click.option(
    "--timeout",
    type=float,
    default=3600.0,
    show_default=True,
    help="Kill the worker after this many seconds.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of generated inputs.")
@click.option("--int-range", help="Range LOW:HIGH of generated integer inputs (default 0:100).")
@click.option(
    "--config",
    type=click.Path(path_type=Path),
    help="Directory with models.yaml/backends.yaml overriding the built-ins.",
)
@click.option(
    "--report",
    "report_format",
    type=click.Choice(["terminal", "json", "none"]),
    default="terminal",
    show_default=True,
    help="Report printed after the run.",
)
def run(
    model: str,
    framework: str,
    backend: str | None,
    device: str | None,
    compile_: bool,
    batch: int | None,
    shape: tuple[str, ...],
    input_values: tuple[str, ...],
    warmup: int | None,
    iterations: int | None,
    duration: float | None,
    threads: int | None,
    tag: str | None,
    repeat: int,
    output: Path | None,
    no_profile: bool,
    profile_mode: str,
    profile_iterations: int,
    preprocess: str | None,
    no_telemetry: bool,
    no_calibrate: bool,
    sample_hz: float,
    timeout: float,
    seed: int,
    int_range: str | None,
    config: Path | None,
    report_format: str,
) -> None:
    """Profile a model: warmup, measured iterations, operator profile, telemetry -> a bundle."""
    from aaco.config import parse_input_arg, parse_int_range
    from aaco.run import RunOptions, run_model

    opts = RunOptions(
        model=model,
        backend=backend,
        batch=batch,
        shapes=_parse_shapes(list(shape)),
        values=dict(parse_input_arg(v) for v in input_values),
        warmup=warmup,
        iterations=iterations,
        duration_s=duration,
        threads=threads,
        tag=tag,
        output=_sessions_root(output),
        profile=not no_profile,
        profile_iterations=profile_iterations,
        telemetry=not no_telemetry,
        sample_hz=sample_hz,
        timeout_s=timeout,
        seed=seed,
        int_range=parse_int_range(int_range) if int_range else None,
        config_dir=config,
        argv=["aaco", *sys.argv[1:]],
        framework=framework,
        device=device,
        compile=compile_,
        profile_mode=profile_mode,
        preprocess=preprocess,
        auto_calibrate=False if no_calibrate else None,
    )
    for i in range(repeat):
        session = run_model(opts)
        if i == repeat - 1:
            _print_report(session, report_format)
        sys.stderr.write(f"bundle: {session.path}\n")
        if session.status != "completed":
            err = session.error or {}
            raise RunError(f"run {session.status}: {err.get('message', 'no reason recorded')}")


def _print_report(session: Any, fmt: str) -> None:
    if fmt == "none":
        return
    if fmt == "json":
        from aaco.report.json import JsonRenderer

        _out(JsonRenderer().render(session))
    else:
        from aaco.report.terminal import TerminalRenderer

        _out(TerminalRenderer(width=_width(), color=_color()).render(session))


@app.command()
@click.option(
    "--session",
    "-s",
    default="latest",
    show_default=True,
    help="Bundle path, or 'latest' under the sessions root.",
)
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["terminal", "json", "html"]),
    default="terminal",
    show_default=True,
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Write to this file instead of stdout (html: default report.html in the bundle).",
)
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root for 'latest'.")
def report(session: str, fmt: str, output: Path | None, sessions: Path | None) -> None:
    """Show a session's report in the terminal, as JSON, or as one self-contained HTML file."""
    from aaco.report.base import Renderer
    from aaco.report.html import HtmlRenderer
    from aaco.report.json import JsonRenderer
    from aaco.report.terminal import TerminalRenderer
    from aaco.session.bundle import Session, atomic_write_bytes

    path = _sessions_root(sessions) / "latest" if session == "latest" else Path(session)
    s = Session.load(path)
    renderer: Renderer
    if fmt == "json":
        renderer = JsonRenderer()
    elif fmt == "html":
        renderer = HtmlRenderer()
        if output is None:
            output = s.path / "report" / "report.html"
    else:
        renderer = TerminalRenderer(width=_width(), color=output is None and _color())
    # A malformed bundle is refused where it is read (Session.load, its JSON and table
    # readers: BundleError, exit 2); anything a renderer raises past that is a bug (exit 4).
    text = renderer.render(s)
    if output is None:
        _out(text)
        return
    try:
        atomic_write_bytes(output, text.encode())
    except OSError as exc:
        raise InputError(f"cannot write {output}: {exc.strerror or exc}") from exc
    sys.stderr.write(f"wrote {output}\n")


@app.command()
@click.option(
    "--session",
    "-s",
    default="latest",
    show_default=True,
    help="Bundle path, or 'latest' under the sessions root.",
)
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root for 'latest'.")
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["terminal", "json", "none"]),
    default="terminal",
    show_default=True,
    help="Report printed after the analysis.",
)
@click.option(
    "--no-calibrate",
    is_flag=True,
    help="Without a stored calibration, do not measure a quick one (also: AACO_AUTO_CALIBRATE=0).",
)
def analyze(session: str, sessions: Path | None, fmt: str, no_calibrate: bool) -> None:
    """Recompute a bundle's roofline, bottleneck verdict and recommendations.

    Uses the calibration stored for this machine (aaco calibrate) or the published peaks of
    its GPU; for a CPU session of this machine without either, a quick calibration is
    measured and stored first. Run it again after `aaco import` or a new calibration.
    """
    from aaco.diagnose import diagnose_bundle, write_reports
    from aaco.session.bundle import Session

    path = _sessions_root(sessions) / "latest" if session == "latest" else Path(session)
    s = Session.load(path)
    if s.status != "completed":
        raise UsageError(f"{path}: the run {s.status}; there is nothing to analyze")
    diagnose_bundle(s.path, auto_calibrate=False if no_calibrate else None)
    write_reports(s.path)
    _print_report(Session.load(s.path), fmt)


@app.command()
@click.option(
    "--backend",
    type=click.Choice(["cpu", "cuda", "rocm", "gpu"]),
    default="cpu",
    show_default=True,
    help="What to measure: the CPU (numpy, ONNX Runtime) or the GPU torch sees (cuda, rocm "
    "and gpu all measure it, with a CUDA or a ROCm build; stored per device, whatever "
    "framework later runs on it).",
)
@click.option("--quick", is_flag=True, help="Small sizes and a short budget (a rough figure).")
@click.option("--show", is_flag=True, help="List stored calibrations; measure nothing.")
@click.option("--force", is_flag=True, help="Measure again even when a good enough one is stored.")
@click.option(
    "--allow-busy",
    is_flag=True,
    help="Store a calibration even when other processes held the CPU (marked disturbed); "
    "by default it is refused.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def calibrate(
    backend: str, quick: bool, show: bool, force: bool, allow_busy: bool, as_json: bool
) -> None:
    """Measure this machine's peak FLOP/s and memory bandwidth (roofline ceilings).

    Stored per device ($AACO_CALIBRATION_DIR, else the user data folder): a CPU by its
    hardware fingerprint, a GPU by its identity (vendor, model, architecture), and used by
    every later session's roofline on that device, whatever framework ran it. A stored
    calibration is reused when it is at least as good as asked for (a full quiet one
    always; a quiet one for --quick); a quick or disturbed one never replaces a full quiet
    one. Other processes holding the CPU while it measures make it refuse (exit 1).
    """
    from aaco.analysis.ceilings import (
        GPU_BACKEND,
        calibration_dir,
        calibration_file,
        hardware_fingerprint,
        list_calibrations,
        load_calibration,
        published_ceilings,
        quality_label,
        replaces,
        reusable,
        save_calibration,
    )
    from aaco.collectors.calibrate import calibrate as measure
    from aaco.collectors.environment import capture_environment
    from aaco.report.calibration import render_calibration, render_calibrations

    env = capture_environment([], [])
    if show:
        items = list_calibrations()
        names = [str(d.get("name")) for d in (env.get("gpus") or {}).get("devices") or []]
        published = [c for c in (published_ceilings(n) for n in names) if c is not None]
        if as_json:
            _out(json.dumps({"calibrations": [{"path": str(p), "quality": quality_label(c),
                                               **c.to_json()} for p, c in items],
                             "published": [c.to_json() for c in published]}, indent=2))  # fmt: skip
        else:
            _out(render_calibrations(items, published, width=_width()))
        return
    fp: str | None = hardware_fingerprint(env)
    kind = backend
    if backend != "cpu":
        from aaco.analysis.devices import env_gpu

        ident = env_gpu(env)  # what the vendor tools report; torch confirms it when measuring
        fp, kind = (ident.key if ident is not None else None), GPU_BACKEND
    stored = load_calibration(fp, kind) if fp else None
    path = calibration_file(fp, kind) if fp else calibration_dir()
    saved = False
    if stored is not None and not force and reusable(stored, quick):
        result, where = stored, path
        note = "reused the stored calibration for this machine (--force measures again)"
    else:
        result = measure(backend, quick=quick, env=env, allow_busy=allow_busy)
        seconds = f"measured in {result.details.get('seconds', 0):.1f} s"
        if result.fingerprint != fp:  # torch named the GPU otherwise than the vendor tools
            stored = load_calibration(result.fingerprint or "", result.backend or kind)
        if stored is None or replaces(result, stored):
            where = save_calibration(result)
            saved = True
            note = seconds
        else:
            where = path
            note = (
                f"{seconds} ({quality_label(result)}); not stored: the stored one is better "
                f"({quality_label(stored)})"
            )
    if as_json:
        _out(json.dumps({"path": str(where), "reused": result is stored, "stored": saved,
                         "quality": quality_label(result), "note": note, **result.to_json()},
                        indent=2))  # fmt: skip
    else:
        _out(render_calibration(result, where, note, width=_width()))


@app.command("ls")
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root.")
@click.option(
    "--limit", type=int, default=20, show_default=True, help="Newest N sessions (0 = all)."
)
@click.option("--json", "as_json", is_flag=True, help="JSON lines instead of a table.")
def ls_command(sessions: Path | None, limit: int, as_json: bool) -> None:
    """List sessions: time, model, backend, batch, p50, status."""
    from aaco.report.listing import render_sessions_table
    from aaco.session.catalog import list_sessions

    root = _sessions_root(sessions)
    rows = list_sessions(root)
    if limit > 0:
        rows = rows[-limit:]
    if as_json:
        for r in rows:
            _out(json.dumps(r))
        return
    if not rows:
        _out(f"no sessions under {root}")
        return
    _out(render_sessions_table(rows, width=_width(), color=_color()))


def _threshold(value: str) -> float:
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


def _session_path(session: str, sessions: Path | None) -> Path:
    return _sessions_root(sessions) / "latest" if session == "latest" else Path(session)


@app.command()
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
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root (baselines).")
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
    default="p10",
    show_default=True,
    help="Quantiles that gate the verdict, comma-separated (p10,p50,p90,p99); Holm-corrected.",
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
    gate: str,
    fmt: str,
    allow_model_change: bool,
    no_history: bool,
    allow_contention: bool,
) -> int:
    """Did SESSION regress against BASELINE? Writes regress/diff.json and verdict.json.

    Exit status: 0 no change or improvement, 1 regression, 3 inconclusive, 2 bad input,
    4 an internal error of AACO.
    """
    from aaco.regress.baseline import resolve
    from aaco.regress.diff import diff_sessions, write_diff
    from aaco.report.regress import render_diff_markdown, render_diff_terminal
    from aaco.session.bundle import Session

    root = _sessions_root(sessions)
    base: list[Session] = []
    names: list[str] = []
    for spec in baselines:
        found, name = resolve(spec, root)
        base += found
        names += [name] if name else []
    targets = [Session.load(_session_path(s, sessions)) for s in session_args or ("latest",)]
    gates = [g.strip() for g in gate.split(",") if g.strip()]
    result = diff_sessions(
        base,
        targets,
        threshold=_threshold(threshold),
        gates=gates,
        baseline_name=",".join(names) or None,
        sessions_root=root.resolve() if root.is_dir() else None,
        allow_model_change=allow_model_change,
        use_history=not no_history,
        check_contention=not allow_contention,
    )
    for target in targets:
        try:
            write_diff(target, result)
        except OSError as exc:
            raise InputError(f"cannot write into {target.path}: {exc.strerror or exc}") from exc
    # loud on stderr whatever the format, so that CI logs show them next to the exit code
    for w in result["verdict"]["warnings"]:
        if w.startswith(("DIFFERENT", "different", "MEASUREMENT")):
            _err(f"warning: {w}")
    if fmt == "json":
        _out(json.dumps(result, indent=2))
    elif fmt == "markdown":
        _out(render_diff_markdown(result))
    else:
        _out(render_diff_terminal(result, width=_width(), color=_color()))
    code: int = result["verdict"]["exit_code"]
    return code


@app.group("baseline")
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
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root.")
@click.option("--force", is_flag=True, help="Replace a baseline of that name.")
def baseline_save(
    name: str, session_args: tuple[str, ...], sessions: Path | None, force: bool
) -> None:
    """Save SESSION(s) as baseline NAME."""
    from aaco.regress.baseline import check_name, save_baseline
    from aaco.session.bundle import Session

    check_name(name)
    runs = [Session.load(_session_path(s, sessions)) for s in session_args or ("latest",)]
    f = save_baseline(_sessions_root(sessions), name, runs, force=force)
    _out(f"baseline {name} -> {', '.join(s.session_id for s in runs)} ({f})")


@baseline_app.command("list")
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def baseline_list(sessions: Path | None, as_json: bool) -> None:
    """List saved baselines."""
    from aaco.regress.baseline import list_baselines

    root = _sessions_root(sessions)
    rows = list_baselines(root)
    if as_json:
        _out(json.dumps(rows, indent=2))
        return
    if not rows:
        _out(f"no baselines under {root}")
        return
    for r in rows:
        if "error" in r:
            _out(f"{r['name']}: {r['error']}")
            continue
        lat = r.get("latency_ms") or {}
        p50 = lat.get("p50")
        _out(
            f"{r['name']:<20} {r.get('session_id')}  {(r.get('model') or {}).get('name')} on "
            f"{(r.get('backend') or {}).get('name')}  p50 "
            f"{'unknown' if p50 is None else format(p50, '.4g') + ' ms'}  "
            f"saved {r.get('saved_utc')}" + ("" if r.get("exists") else "  [bundle missing]")
        )


@baseline_app.command("show")
@click.argument("name")
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root.")
def baseline_show(name: str, sessions: Path | None) -> None:
    """Show a baseline's record (JSON)."""
    from aaco.regress.baseline import load_baseline

    _out(json.dumps(load_baseline(_sessions_root(sessions), name), indent=2))


@app.command()
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root.")
@click.option("--model", "-m", help="Only this model.")
@click.option("--backend", help="Only this backend.")
@click.option("--tag", help="Only sessions with this tag.")
@click.option("--window", type=int, default=50, show_default=True, help="Change-point window.")
@click.option(
    "--max-p", type=float, default=0.001, show_default=True, help="Change-point significance."
)
@click.option("--json", "as_json", is_flag=True, help="JSON instead of tables.")
def history(
    sessions: Path | None,
    model: str | None,
    backend: str | None,
    tag: str | None,
    window: int,
    max_p: float,
    as_json: bool,
) -> None:
    """Sessions of each configuration over time, with detected change points."""
    from aaco.regress.history import history as build_history
    from aaco.report.regress import render_history_terminal

    if window < 6:
        raise UsageError("--window must be at least 6")
    if not 0 < max_p < 1:
        raise UsageError("--max-p must lie in (0, 1)")
    root = _sessions_root(sessions)
    if not root.is_dir():
        raise InputError(f"{root}: no such sessions root")
    groups = build_history(root, model=model, backend=backend, tag=tag, window=window, max_p=max_p)
    if as_json:
        _out(json.dumps(groups, indent=2))
    else:
        _out(render_history_terminal(groups, width=_width(), color=_color()))


@app.command()
@click.option("--session", "-s", default="latest", show_default=True, help="Bundle, or 'latest'.")
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root for 'latest'.")
@click.option("--sla", required=True, type=click.Path(path_type=Path), help="YAML file of rules.")
@click.option("--allow-unknown", is_flag=True, help="A rule whose metric is missing passes.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of text.")
def check(
    session: str, sessions: Path | None, sla: Path, allow_unknown: bool, as_json: bool
) -> int:
    """Check a session against SLA rules (p99_ms <= 12, throughput >= 200 ...); exit 1 on
    a violation."""
    from aaco.regress.sla import check as run_check
    from aaco.regress.sla import load_rules
    from aaco.report.regress import render_check_terminal
    from aaco.session.bundle import Session

    rules = load_rules(sla)
    s = Session.load(_session_path(session, sessions))
    if s.status != "completed":
        raise BundleError(f"{s.path}: the run {s.status}; there is nothing to check")
    result = run_check(s, rules, allow_unknown=allow_unknown)
    if as_json:
        _out(json.dumps(result, indent=2))
    else:
        _out(render_check_terminal(result))
    return 0 if result["passed"] else 1


_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def _serve(host: str, port: int, sessions: Path | None, token: str | None, what: str) -> None:
    try:
        import uvicorn

        from aaco.web.app import create_app
    except ImportError:
        raise UsageError(
            f"aaco {what} needs FastAPI and uvicorn: pip install 'aaco[web]'"
        ) from None
    token = token or os.environ.get("AACO_TOKEN") or None
    if host not in _LOCAL_HOSTS and not token:
        raise UsageError(
            f"binding to {host} exposes the sessions beyond this machine: "
            "give --token (or $AACO_TOKEN)"
        )
    root = _sessions_root(sessions)
    if not root.is_dir():
        raise InputError(f"{root}: no such sessions root")
    sys.stderr.write(f"aaco {what}: http://{host}:{port}/ over {root.resolve()}\n")
    uvicorn.run(create_app(root, token=token), host=host, port=port, log_level="warning")


@app.command()
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--token", help="Bearer token every route requires (needed beyond localhost).")
def serve(sessions: Path | None, host: str, port: int, token: str | None) -> None:
    """REST API over a sessions root (FastAPI; schema at /openapi.json)."""
    _serve(host, port, sessions, token, "serve")


@app.command()
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8501, show_default=True)
@click.option("--token", help="Token required beyond localhost (open /?token=... once).")
def dashboard(sessions: Path | None, host: str, port: int, token: str | None) -> None:
    """Web dashboard: sessions with filters, reports, comparisons, history (same app as serve)."""
    _serve(host, port, sessions, token, "dashboard")


@app.command()
@click.option("--json", "as_json", is_flag=True, help="JSON instead of text.")
def info(as_json: bool) -> None:
    """Show this machine: CPU, memory, GPUs, onnxruntime providers, profilers on PATH."""
    from aaco.collectors.environment import describe_machine
    from aaco.report.listing import render_machine

    desc = describe_machine()
    if as_json:
        _out(json.dumps(desc, indent=2, default=str))
    else:
        _out(render_machine(desc, width=_width(), color=_color()))


@models_app.command("list")
@click.option("--config", type=click.Path(path_type=Path), help="Directory with a models.yaml.")
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def models_list(config: Path | None, as_json: bool) -> None:
    """List registry models with their parameter counts."""
    from aaco.config import load_registry
    from aaco.models.catalog import describe_models
    from aaco.report.listing import render_models_table

    rows = describe_models(load_registry(config))
    if as_json:
        _out(json.dumps(rows, indent=2))
    else:
        _out(render_models_table(rows, width=_width(), color=_color()))


@models_app.command("build")
@click.argument("name")
@click.option("--config", type=click.Path(path_type=Path), help="Directory with a models.yaml.")
def models_build(name: str, config: Path | None) -> None:
    """Build a built-in model into the cache and print its path."""
    from aaco.config import load_registry
    from aaco.run import resolve_model

    resolved = resolve_model(name, load_registry(config))
    _out(str(resolved.path))


@app.command("import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--session",
    "-s",
    "session_dir",
    type=click.Path(path_type=Path),
    help="Add the traces to this existing bundle instead of creating a new one.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Sessions root for the new bundle (default ./sessions or $AACO_SESSIONS).",
)
@click.option("--replace", is_flag=True, help="With --session: replace a trace already there.")
@click.option("--tag", help="Free-form label stored with a new bundle.")
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["terminal", "json", "none"]),
    default="terminal",
    show_default=True,
    help="Report printed after the import.",
)
def import_command(
    paths: tuple[Path, ...],
    session_dir: Path | None,
    output: Path | None,
    replace: bool,
    tag: str | None,
    fmt: str,
) -> None:
    """Import kernel traces captured elsewhere (rocprofv3, rocprof, Kineto, ONNX Runtime).

    PATHS are trace files or directories (a rocprofv3 output folder, a folder of per-rank
    Kineto traces); formats are recognised by content. Without --session a new bundle is
    created from the traces alone.
    """
    from aaco.ingest import import_into, import_new

    if session_dir is not None and output is not None:
        raise click.UsageError("give either --session (existing bundle) or --output, not both")
    if replace and session_dir is None:
        raise click.UsageError("--replace only applies with --session")
    if session_dir is not None:
        s = import_into(session_dir, list(paths), replace=replace)
    else:
        s = import_new(list(paths), _sessions_root(output), tag=tag, argv=sys.argv)
    sys.stderr.write(f"imported into {s.path}\n")
    _import_note(s.path)
    _print_report(s, fmt)


def _import_note(bundle: Path) -> None:
    """One line when the importers met odd values (nulled or left out), never one per event."""
    from aaco.ingest import IMPORT_META_FILE
    from aaco.session.bundle import read_json

    try:
        line = read_json(bundle / IMPORT_META_FILE).get("warning")
    except (OSError, ValueError, AacoError):
        return
    if line:
        sys.stderr.write(f"note: {line}; details in {bundle / IMPORT_META_FILE}\n")


@app.group("export")
def export_app() -> None:
    """Export a session to other tools' formats."""


@export_app.command("perfetto")
@click.option(
    "--session",
    "-s",
    default="latest",
    show_default=True,
    help="Bundle path, or 'latest' under the sessions root.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    required=True,
    help="Trace file to write; gzip-compressed when it ends in .gz. Open in ui.perfetto.dev.",
)
@click.option("--sessions", type=click.Path(path_type=Path), help="Sessions root for 'latest'.")
def export_perfetto(session: str, output: Path, sessions: Path | None) -> None:
    """Write one timeline (iterations, ops, kernels, copies, telemetry, op->kernel arrows)."""
    import gzip

    from aaco.report.perfetto import export_perfetto as build_trace
    from aaco.session.bundle import Session, atomic_write_bytes

    path = _sessions_root(sessions) / "latest" if session == "latest" else Path(session)
    data = build_trace(Session.load(path))
    if output.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    try:
        atomic_write_bytes(output, data)
    except OSError as exc:
        raise InputError(f"cannot write {output}: {exc.strerror or exc}") from exc
    sys.stderr.write(f"wrote {output} ({len(data) / 1e6:.1f} MB); open it in ui.perfetto.dev\n")


def _fail(message: str, code: int) -> NoReturn:
    _err(f"error: {message}")
    sys.exit(code)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _command_name(args: list[str]) -> str:
    """The command of a command line (``report``), for the rerun hint of an internal error:
    the command's own arguments stay out of the message (one may be a --token)."""
    return next((a for a in args if not a.startswith("-")), "")


def _classify(exc: BaseException, args: list[str]) -> tuple[str, int]:
    """The one-line message and exit code of an exception that ended a command."""
    if isinstance(exc, AacoError):
        return str(exc), exc.exit_code
    if isinstance(exc, click.exceptions.UsageError):
        hint = (
            f" (see 'aaco {exc.ctx.info_name} --help')"
            if exc.ctx and exc.ctx.info_name != "aaco"
            else ""
        )
        return exc.format_message() + hint, 2
    if isinstance(exc, (click.exceptions.Abort, KeyboardInterrupt)):
        return "interrupted", 130
    # Anything else is AACO's own bug, whatever the input: a malformed input is refused,
    # as an AacoError, where it is read. 4, not 1: a CI gate must not read a crash as
    # "regression" (diff) or "failed run".
    what = " ".join(f"{type(exc).__name__}: {exc}".split()).removesuffix(":")
    command = " ".join(filter(None, ("aaco --debug", _command_name(args), "...")))
    return (
        f"internal error, a bug in AACO: {what}; rerun as '{command}' to see the "
        "traceback, and please report it",
        4,
    )


def main(argv: list[str] | None = None) -> None:
    """Console entry point: runs the app and turns errors into one line and an exit code.

    Every failure ends in one ``aaco: error: ...`` line on stderr (after the one-line
    warnings attached to the exception, :func:`aaco.errors.attached_warnings`) and its exit
    code; ``--debug`` prints the traceback first and keeps the exit code.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    # --debug is a global option: it counts only before the command name.
    leading = args[: next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))]
    debug = "--debug" in leading
    # A polite kill (SIGTERM) unwinds like Ctrl-C: the worker is killed and the bundle is
    # published as failed instead of being left half-built with a worker still running.
    signal.signal(signal.SIGTERM, _terminate)
    try:
        rc = app.main(args=args, prog_name="aaco", standalone_mode=False)
    except click.exceptions.NoArgsIsHelpError as exc:
        sys.stdout.write(exc.ctx.get_help() + "\n" if exc.ctx else "")
        sys.exit(0)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        # `aaco ls --json | head -1`: the reader has what it wanted.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
    except (Exception, KeyboardInterrupt) as exc:
        message, code = _classify(exc, args)
        if debug and code != 130:
            traceback.print_exception(type(exc), exc, exc.__traceback__)
        for warning in attached_warnings(exc):
            _err(f"warning: {warning}")
        _fail(message, code)
    sys.exit(rc if isinstance(rc, int) else 0)
