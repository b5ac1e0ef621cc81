"""``aaco models``: the built-in and registered models."""

from __future__ import annotations

import json
from pathlib import Path

import click

from aaco.cli._common import color, json_option, out, width


@click.group("models")
def models_app() -> None:
    """Built-in and registered models."""


@models_app.command("list")
@click.option("--config", type=click.Path(path_type=Path), help="Directory with a models.yaml.")
@json_option()
def models_list(config: Path | None, as_json: bool) -> None:
    """List registry models with their parameter counts."""
    # lazy: onnx, yaml, rich
    from aaco.config import load_registry
    from aaco.models.catalog import describe_models
    from aaco.report.listing import render_models_table

    rows = describe_models(load_registry(config))
    if as_json:
        out(json.dumps(rows, indent=2))
    else:
        out(render_models_table(rows, width=width(), color=color()))


@models_app.command("build")
@click.argument("name")
@click.option("--config", type=click.Path(path_type=Path), help="Directory with a models.yaml.")
def models_build(name: str, config: Path | None) -> None:
    """Build a built-in model into the cache and print its path."""
    # lazy: the ONNX Runtime runner imports onnx and onnxruntime (~0.3 s)
    from aaco.config import load_registry
    from aaco.runners.ort import resolve_model

    resolved = resolve_model(name, load_registry(config))
    out(str(resolved.path))
