"""``aaco run``: profile a model into a session bundle."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from aaco.cli._common import finish, format_option, framework_choice, sessions_root

if TYPE_CHECKING:
    from aaco.pipeline import RunOptions


def parse_collectors(value: str | None) -> tuple[str, ...] | None:
    """``--collectors a,b``: the names, each checked against the registry (None: default)."""
    if value is None:
        return None
    from aaco.collectors.base import COLLECTORS

    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    for name in names:
        COLLECTORS.get(name)  # an unknown name is a UsageError listing the valid ones
    return names


def parse_shapes(values: list[str] | None) -> dict[str, list[int]]:
    """``--shape NAME=1x3x224x224`` values as ``{name: dims}``."""
    # lazy: aaco.config imports yaml
    from aaco.config import parse_shape_arg

    shapes: dict[str, list[int]] = {}
    for v in values or []:
        name, dims = parse_shape_arg(v)
        shapes[name] = dims
    return shapes


@click.command()
@click.option(
    "--model",
    "-m",
    required=True,
    help="Registry name or .onnx path; with --framework torch: module:function, "
    "file.py:function or a saved torch.export .pt2.",
)
@click.option(
    "--framework",
    type=framework_choice(),
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
@click.option(
    "--threads",
    type=int,
    help="Intra-op threads (0 = onnxruntime default; with --isolate: one per pinned CPU).",
)
@click.option(
    "--isolate",
    is_flag=True,
    help="Pin the worker to CPUs (--cpus, else the least busy, CPU 0 left to the system on "
    "machines with more than 2), threads to match; record the machine's state (aaco doctor).",
)
@click.option("--cpus", help="CPUs to pin the worker to, e.g. 1 or 0-1,3 (implies --isolate).")
@click.option(
    "--sentinel/--no-sentinel",
    default=None,
    help="Time a calibrated CPU loop before, between and after the phases to detect a change "
    "of CPU speed (default: on with --isolate).",
)
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
    "--collectors",
    "collectors",
    metavar="NAMES",
    help="Telemetry collectors, comma-separated (default: system,sched,gpu; also nvml, "
    "amdsmi). gpu picks NVML, amdsmi, amd-smi or rocm-smi, whichever is present.",
)
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
@format_option("--report", "report_format", help="Report printed after the run.")
def run(repeat: int, report_format: str, **params: Any) -> None:
    """Profile a model: warmup, measured iterations, operator profile, telemetry -> a bundle."""
    from aaco.pipeline import run_model

    opts = build_options(params)
    for i in range(repeat):
        session = run_model(opts)
        finish(session, "run", report_format if i == repeat - 1 else None)


def build_options(params: dict[str, Any], argv: list[str] | None = None) -> RunOptions:
    """The RunOptions of ``aaco run``'s parsed parameters (``aaco ab`` parses each side's
    option string with this command's own parser and builds its options here)."""
    # lazy: the pipeline imports the analyses and onnx (~0.3 s), aaco.config yaml
    from aaco.config import parse_input_arg, parse_int_range
    from aaco.pipeline import RunOptions
    from aaco.runners.capsule import parse_cpus

    p = params
    return RunOptions(
        model=p["model"],
        backend=p["backend"],
        batch=p["batch"],
        shapes=parse_shapes(list(p["shape"])),
        values=dict(parse_input_arg(v) for v in p["input_values"]),
        warmup=p["warmup"],
        iterations=p["iterations"],
        duration_s=p["duration"],
        threads=p["threads"],
        tag=p["tag"],
        output=sessions_root(p["output"]),
        profile=not p["no_profile"],
        profile_iterations=p["profile_iterations"],
        telemetry=not p["no_telemetry"],
        collectors=parse_collectors(p["collectors"]),
        sample_hz=p["sample_hz"],
        timeout_s=p["timeout"],
        seed=p["seed"],
        int_range=parse_int_range(p["int_range"]) if p["int_range"] else None,
        config_dir=p["config"],
        argv=argv if argv is not None else ["aaco", *sys.argv[1:]],
        framework=p["framework"],
        device=p["device"],
        compile=p["compile_"],
        profile_mode=p["profile_mode"],
        preprocess=p["preprocess"],
        auto_calibrate=False if p["no_calibrate"] else None,
        isolate=p["isolate"],
        cpus=parse_cpus(p["cpus"]) if p["cpus"] is not None else None,
        sentinel=p["sentinel"],
    )
