"""Roofline ceilings: published GPU peaks and this machine's calibrated peaks.

Precedence for a session (:func:`session_ceilings`): the calibration stored for the
session's hardware fingerprint and backend (``aaco calibrate``), else the published peaks
of its GPU (``configs/devices.yaml``), else None: no ceiling is ever made up.

Calibrations are JSON files under ``$AACO_CALIBRATION_DIR``, else the user data folder
(``platformdirs.user_data_dir("aaco")/calibration``), one per (hardware fingerprint,
backend).

Example::

    c = published_ceilings("NVIDIA H100 80GB HBM3")
    c.peak_flops("float16"), c.bytes_per_s      # 989.4e12, 3.35e12
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from aaco.session.bundle import atomic_write_json

__all__ = [
    "CALIBRATION_ENV",
    "Ceilings",
    "calibration_dir",
    "hardware_fingerprint",
    "list_calibrations",
    "load_calibration",
    "load_device_table",
    "normalize_dtype",
    "published_ceilings",
    "save_calibration",
    "session_ceilings",
]

CALIBRATION_ENV = "AACO_CALIBRATION_DIR"

_DTYPES = {
    "float": "float32",
    "float32": "float32",
    "double": "float64",
    "float64": "float64",
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "uint8": "int8",
    "tfloat32": "tfloat32",
    "float8e4m3fn": "float8",
    "float8e4m3fnuz": "float8",
    "float8e5m2": "float8",
    "float8e5m2fnuz": "float8",
}


def normalize_dtype(dtype: str | None) -> str | None:
    """ONNX / torch element type names to the ceiling keys (``float`` -> ``float32``)."""
    if not dtype:
        return None
    d = dtype.lower().removeprefix("torch.")
    matrix = d.endswith("_matrix")
    base = _DTYPES.get(d.removesuffix("_matrix"))
    if base is None:
        return None
    return base + "_matrix" if matrix else base


@dataclass(frozen=True)
class Ceilings:
    """Peak FLOP/s per dtype and peak memory bandwidth of one device."""

    device: str
    source: str  # "calibrated" | "published"
    flops_per_s: dict[str, float]
    bytes_per_s: float | None
    fingerprint: str | None = None
    backend: str | None = None
    measured_utc: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def peak_flops(self, dtype: str | None) -> float | None:
        """The highest ceiling for ``dtype``: its matrix-core peak when the device has one,
        else its vector peak; ``*_matrix`` asks for the matrix peak alone. None when the
        dtype is unknown or has no figure here."""
        d = normalize_dtype(dtype)
        if d is None:
            return None
        if d.endswith("_matrix"):
            return self.flops_per_s.get(d) or self.flops_per_s.get(d.removesuffix("_matrix"))
        values = [v for v in (self.flops_per_s.get(d + "_matrix"), self.flops_per_s.get(d)) if v]
        return max(values) if values else None

    def ridge(self, dtype: str | None) -> float | None:
        """FLOP/B where the compute roof meets the bandwidth roof."""
        f = self.peak_flops(dtype)
        return f / self.bytes_per_s if f and self.bytes_per_s else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Ceilings:
        return cls(
            device=str(d["device"]),
            source=str(d["source"]),
            flops_per_s={str(k): float(v) for k, v in (d.get("flops_per_s") or {}).items()},
            bytes_per_s=float(d["bytes_per_s"]) if d.get("bytes_per_s") else None,
            fingerprint=d.get("fingerprint"),
            backend=d.get("backend"),
            measured_utc=d.get("measured_utc"),
            details=dict(d.get("details") or {}),
        )


# --- published peaks -----------------------------------------------------------------------


def load_device_table(path: Path | None = None) -> list[dict[str, Any]]:
    """The entries of ``configs/devices.yaml`` (or ``path``), each with its ``name``:
    ``vendor``, ``match``, ``compute_units``, ``memory_bytes``, ``peaks`` (``flops_per_s``
    per dtype key, ``bytes_per_s``) and ``source``."""
    if path is None:
        text = resources.files("aaco").joinpath("configs/devices.yaml").read_text()
    else:
        text = Path(path).read_text()
    raw = yaml.safe_load(text) or {}
    return [{"name": name, **entry} for name, entry in (raw.get("devices") or {}).items()]


def published_ceilings(
    device_name: str, table: list[dict[str, Any]] | None = None
) -> Ceilings | None:
    """Published peaks of the first table entry whose pattern matches ``device_name``."""
    for entry in table if table is not None else load_device_table():
        if any(re.search(p, device_name, re.IGNORECASE) for p in entry.get("match") or []):
            peaks = entry.get("peaks") or {}
            bw = peaks.get("bytes_per_s")
            return Ceilings(
                device=entry["name"],
                source="published",
                flops_per_s={k: float(v) for k, v in (peaks.get("flops_per_s") or {}).items()},
                bytes_per_s=float(bw) if bw else None,
                details={
                    "matched": device_name,
                    "citation": entry.get("source"),
                    "compute_units": entry.get("compute_units"),
                    "memory_bytes": entry.get("memory_bytes"),
                    "vendor": entry.get("vendor"),
                },
            )
    return None


# --- calibrations --------------------------------------------------------------------------


def hardware_fingerprint(env: Mapping[str, Any]) -> str:
    """16 hex digits over the hardware part of an env.json: CPU model, architecture, core
    counts, CPU flags, memory in GiB, GPU vendor/name (not driver or software versions)."""
    from aaco.collectors.environment import fingerprint, fingerprint_fields

    f = fingerprint_fields(env)
    gpus = (env.get("gpus") or {}).get("devices") or []
    hw = {
        k: f.get(k)
        for k in (
            "cpu_model",
            "cpu_architecture",
            "physical_cores",
            "logical_cores",
            "cpu_flags",
            "memory_gib",
        )
    }
    hw["gpus"] = sorted(
        f"{g.get('vendor')}:{g.get('name')}" for g in gpus if isinstance(g, Mapping)
    )
    return fingerprint(hw)


def calibration_dir() -> Path:
    env = os.environ.get(CALIBRATION_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("aaco")) / "calibration"


def _file(fingerprint: str, backend: str) -> Path:
    return calibration_dir() / f"{fingerprint}-{backend}.json"


def save_calibration(c: Ceilings, backend: str | None = None) -> Path:
    """Store ``c`` as ``<fingerprint>-<backend>.json`` in :func:`calibration_dir` (atomic
    write); ``backend`` defaults to ``c.backend`` and, when given, is recorded in the file."""
    if backend is not None and backend != c.backend:
        c = replace(c, backend=backend)
    if not c.fingerprint or not c.backend:
        raise ValueError("a calibration needs its fingerprint and backend to be stored")
    path = _file(c.fingerprint, c.backend)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, c.to_json())
    return path


def load_calibration(fingerprint: str, backend: str) -> Ceilings | None:
    """The calibration stored for this hardware fingerprint and backend, else None."""
    path = _file(fingerprint, backend)
    if not path.is_file():
        return None
    try:
        return Ceilings.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # a damaged file is no calibration; `aaco calibrate --force` rewrites it


def list_calibrations() -> list[tuple[Path, Ceilings]]:
    """Every readable stored calibration with its file, sorted by file name."""
    d = calibration_dir()
    out = []
    for p in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            out.append((p, Ceilings.from_json(json.loads(p.read_text()))))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def session_ceilings(
    env: Mapping[str, Any] | None, backend: str, gpu_name: str | None
) -> Ceilings | None:
    """Calibrated for this hardware and backend, else published for the GPU, else None."""
    if env:
        cal = load_calibration(hardware_fingerprint(env), backend)
        if cal is not None:
            return cal
    if backend != "cpu" and gpu_name:
        return published_ceilings(gpu_name)
    return None
