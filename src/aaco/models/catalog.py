"""Rows describing every registry model, for ``aaco models list``: counts without building."""

from __future__ import annotations

from typing import Any

from aaco.config import Registry
from aaco.errors import AacoError
from aaco.models.registry import cache_dir, cache_key, count_parameters, describe


def describe_models(registry: Registry) -> list[dict[str, Any]]:
    """One row per model: parameter count and bytes (None when the file cannot be read)."""
    rows: list[dict[str, Any]] = []
    for name, entry in sorted(registry.models.items()):
        count: int | None = None
        size: int | None = None
        cached: str | None = None
        error: str | None = None
        params = dict(entry.params)
        if entry.dtype is not None and "dtype" not in params:
            params["dtype"] = entry.dtype
        try:
            if entry.builder is not None:
                count, size = describe(entry.builder, params)
                path = cache_dir() / f"{entry.builder}-{cache_key(entry.builder, params)}.onnx"
                cached = str(path) if path.is_file() else None
            elif entry.path is not None and entry.path.is_file():
                count, size = count_parameters(entry.path)
                cached = str(entry.path)
        except (AacoError, OSError, ValueError) as exc:
            error = str(exc)
        rows.append(
            {
                "name": name,
                "source": "builtin" if entry.origin == "builtin" else entry.origin,
                "builder": entry.builder,
                "path": str(entry.path) if entry.path else None,
                "parameter_count": count,
                "parameter_bytes": size,
                "dtype": entry.dtype,
                "input_shapes": entry.input_shapes,
                "warmup": entry.warmup,
                "iterations": entry.iterations,
                "description": entry.description,
                "expected_bottleneck": entry.expected_bottleneck,
                "preprocess": entry.preprocess,
                "cached_file": cached,
                "error": error,
            }
        )
    return rows
