"""``aaco info``, ``aaco calibrate`` and ``aaco doctor``: this machine, its measured peak
FLOP/s and memory bandwidth, and its readiness for stable measurement."""

from __future__ import annotations

import json
from pathlib import Path

import click

from aaco.cli._common import color, json_option, out, width


@click.command()
@json_option("JSON instead of text.")
def info(as_json: bool) -> None:
    """Show this machine: CPU, memory, GPUs, onnxruntime providers, profilers on PATH."""
    # lazy: psutil, rich
    from aaco.collectors.environment import describe_machine
    from aaco.report.listing import render_machine

    desc = describe_machine()
    if as_json:
        out(json.dumps(desc, indent=2, default=str))
    else:
        out(render_machine(desc, width=width(), color=color()))


@click.command()
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
@json_option()
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
    # lazy: yaml, psutil and the measuring kernels
    from aaco.analysis.ceilings import published_ceilings
    from aaco.collectors.calibrate import calibrate as measure
    from aaco.collectors.environment import capture_environment
    from aaco.report.calibration import render_calibration, render_calibrations
    from aaco.session.calibration import (
        GPU_BACKEND,
        calibration_dir,
        calibration_file,
        list_calibrations,
        load_calibration,
        quality_label,
        replaces,
        reusable,
        save_calibration,
    )
    from aaco.session.fingerprint import hardware_fingerprint

    env = capture_environment([], [])
    if show:
        items = list_calibrations()
        names = [str(d.get("name")) for d in (env.get("gpus") or {}).get("devices") or []]
        published = [c for c in (published_ceilings(n) for n in names) if c is not None]
        if as_json:
            out(json.dumps({"calibrations": [{"path": str(p), "quality": quality_label(c),
                                               **c.to_json()} for p, c in items],
                             "published": [c.to_json() for c in published]}, indent=2))  # fmt: skip
        else:
            out(render_calibrations(items, published, width=width()))
        return
    fp: str | None = hardware_fingerprint(env)
    kind = backend
    if backend != "cpu":
        from aaco.session.devices import env_gpu  # lazy: its patterns cost ~4 ms at start-up

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
        out(json.dumps({"path": str(where), "reused": result is stored, "stored": saved,
                         "quality": quality_label(result), "note": note, **result.to_json()},
                        indent=2))  # fmt: skip
    else:
        out(render_calibration(result, where, note, width=width()))


@click.command()
@click.option(
    "--cpus",
    help="The CPUs to measure on, as aaco run --cpus (default: those aaco run --isolate "
    "would pick).",
)
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["terminal", "json"]),
    default="terminal",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--root",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("/"),
    hidden=True,
    help="Read /proc and /sys under this folder (a copy of another machine's; tests).",
)
def doctor(cpus: str | None, fmt: str, root: Path) -> int:
    """Check this machine's readiness for stable measurement, with the fix for each problem.

    What pyperf system show checks (governor, turbo, frequency, SMT, CPU isolation, IRQ
    affinity, ASLR, perf sample rate, power supply) and load, virtualization, swap and
    transparent hugepages, for the CPUs a run would be pinned to. Reads /proc and /sys
    only: nothing is changed. Exit 0 when ready (warnings are advice), 1 when a check is an
    error (other work holds the CPUs to measure on, or the machine runs on battery).
    """
    # lazy: the capsule imports the pipeline's runner options (and onnx through them)
    from aaco.collectors.machine_state import Machine, check_machine, is_ready
    from aaco.report.doctor import doctor_document, format_doctor
    from aaco.runners.capsule import parse_cpus, pick_cpus

    asked = parse_cpus(cpus) if cpus is not None else None
    # another machine's tree: its CPUs, not this process's affinity, are the ones to pick from
    allowed = Machine(root).online_cpus() if root != Path("/") else None
    chosen, source, sample = pick_cpus(asked, root, allowed=allowed)
    checks = check_machine(root, chosen, sample)
    if fmt == "json":
        out(json.dumps(doctor_document(checks, chosen, source), indent=2))
    else:
        out("\n".join(format_doctor(checks, chosen, source)))
    return 0 if is_ready(checks) else 1
