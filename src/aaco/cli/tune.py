"""``aaco tune``: a guarded search for a faster ONNX Runtime configuration of a model."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from aaco.cli._common import err, out, sessions_root
from aaco.cli.ab import DEFAULT_MIN_PAIRS, parse_duration, side_options
from aaco.cli.diff import parse_threshold
from aaco.errors import UsageError


@click.command()
@click.option("--model", "-m", required=True, help="Registry name or .onnx path.")
@click.option("--backend", default=None, help="Backend to tune (default cpu).")
@click.option(
    "--config",
    type=click.Path(path_type=Path),
    help="Directory with models.yaml/backends.yaml (default ./configs); --apply writes here.",
)
@click.option("--shape", multiple=True, help="Input shape NAME=1x3x224x224 (repeatable).")
@click.option("--batch", type=int, help="Batch size of the reference configuration.")
@click.option(
    "--objective",
    type=click.Choice(["latency", "throughput"]),
    default="latency",
    show_default=True,
    help="latency: time per inference; throughput: time per item, batch sizes searched too.",
)
@click.option("--slo", help="Latency the result must keep, QUANTILE=MS (p99=20ms).")
@click.option("--budget", default="10m", show_default=True, help="Wall time for the search.")
@click.option(
    "--max-error",
    type=float,
    default=0.01,
    show_default=True,
    help="Numerics-changing variants: largest output error over the largest reference value.",
)
@click.option(
    "--allow-numerics",
    default="",
    help="Variants that change the numerics, comma-separated: int8 (dynamic quantisation), "
    "fp16 (GPU backends).",
)
@click.option(
    "--threshold", "-t", default="1%", show_default=True, help="The A/B's margin, in percent."
)
@click.option("--max-pairs", type=int, default=80, show_default=True, help="Each A/B's budget.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of inputs and search.")
@click.option(
    "--apply",
    "apply_",
    is_flag=True,
    help="Write the winning entry into CONFIG/backends.yaml (the previous file kept as .bak).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Sessions root; the result goes to tune/<id>/ under it.",
)
@click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice(["terminal", "json"]),
    default="terminal",
    show_default=True,
)
def tune(
    model: str,
    backend: str | None,
    config: Path | None,
    shape: tuple[str, ...],
    batch: int | None,
    objective: str,
    slo: str | None,
    budget: str,
    max_error: float,
    allow_numerics: str,
    threshold: str,
    max_pairs: int,
    seed: int,
    apply_: bool,
    output: Path | None,
    fmt: str,
) -> None:
    """Search ONNX Runtime's options for a faster configuration, verified and A/B-judged.

    Every candidate's outputs are compared with the reference configuration's on the same
    seeded inputs; candidates are screened by successive halving, and a finalist is accepted
    only by an interleaved A/B IMPROVEMENT against the current best. Writes tune/<id>/
    tune.json and backends.yaml; --apply writes the entry into the config directory.
    """
    from aaco.experiment.ab import ABSettings
    from aaco.experiment.tune import TuneSettings, apply_entry, parse_slo
    from aaco.experiment.tune import tune as run_tune

    root = sessions_root(output)
    args = ["--model", model, "--seed", str(seed)]
    if backend:
        args += ["--backend", backend]
    if config is not None:
        args += ["--config", str(config)]
    if batch is not None:
        args += ["--batch", str(batch)]
    for s in shape:
        args += ["--shape", s]
    opts = side_options("tune", shlex.join(args), root)
    numerics = tuple(n.strip() for n in allow_numerics.split(",") if n.strip())
    settings = TuneSettings(
        objective=objective,
        slo=parse_slo(slo) if slo else None,
        budget_s=parse_duration(budget),
        max_error=max_error,
        numerics=numerics,
        seed=seed,
        ab=ABSettings(
            threshold=parse_threshold(threshold),
            min_pairs=min(DEFAULT_MIN_PAIRS, max_pairs),
            max_pairs=max_pairs,
            seed=seed,
        ),
    )
    if objective == "latency" and slo:
        raise UsageError("--slo applies to --objective throughput")
    result = run_tune(opts, settings, output=root, on_event=lambda m: err(m))
    apply_note = None
    if apply_ and result["found"]:
        target = config if config is not None else Path("configs")
        path, backup = apply_entry(result, target)
        apply_note = f"applied: {result['entry_name']} in {path}" + (
            f" (previous: {backup})" if backup else ""
        )
        if result.get("model_variant"):
            apply_note += (
                f"; the gain needs the model variant {result['model_variant']}: run it with --model"
            )
    elif apply_:
        apply_note = "nothing applied: no candidate beat the default"
    if fmt == "json":
        out(json.dumps(result, indent=2))
    else:
        out(result["summary"])
        for t in result["trials"]:
            ab = t["ab"] or {}
            eff = ab.get("effect") or {}
            gain = f" {eff['delta_pct']:+.1f} %" if eff else ""
            out(f"  {t['name']:<10} {t['stage']}{gain}")
        if result["backend_entry"] is not None:
            import yaml

            out("backends.yaml entry:")
            out(yaml.safe_dump({"backends": {result["entry_name"]: result["backend_entry"]}},
                               sort_keys=False).rstrip())  # fmt: skip
            if result.get("model_variant"):
                out(f"with the model variant {result['model_variant']}")
    if apply_note is not None:
        err(apply_note)
    sys.stderr.write(f"tune: {result['path']}\n")
