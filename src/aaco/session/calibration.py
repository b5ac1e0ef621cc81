"""Roofline ceilings as stored: the :class:`Ceilings` record, its quality, the calibration store.

A :class:`Ceilings` is a device's peak FLOP/s per dtype and peak memory bandwidth, published
(``configs/devices.yaml``, :mod:`aaco.analysis.ceilings`) or measured on this machine
(``aaco calibrate``, :mod:`aaco.collectors.calibrate`). Calibrations are JSON files under
``$AACO_CALIBRATION_DIR``, else the user data folder
(``platformdirs.user_data_dir("aaco")/calibration``): ``<fingerprint>-cpu.json`` per CPU
host (:func:`aaco.session.fingerprint.hardware_fingerprint`), ``gpu-<vendor>-<device>.json``
per GPU identity (:attr:`aaco.session.devices.DeviceIdentity.key`). Each records its quality:
``mode`` (``full`` or ``quick``) and ``contention`` (``quiet`` or ``disturbed``);
:func:`quality_rank` orders them so that a rough or disturbed calibration never replaces a
full quiet one. A calibrated CPU has bandwidth roofs per memory level (``memory_levels``: L1,
L2, L3, DRAM; the cache-aware roofline), and :meth:`Ceilings.memory_roof` picks the level an
operator's working set fits in.

The record and its store lie in the session layer: the collectors write calibrations and the
analysis reads them, and neither imports the other.

Example::

    c = load_calibration(hardware_fingerprint(env), "cpu")
    c.peak_flops("float32"), c.bytes_per_s, quality_label(c)   # ..., "full, quiet"
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from aaco.session.bundle import atomic_write_json

__all__ = [
    "BACKEND_OF_PROVIDER",
    "CALIBRATION_ENV",
    "GPU_BACKEND",
    "LEGACY_GPU_BACKENDS",
    "Ceilings",
    "MemoryLevel",
    "calibration_dir",
    "calibration_file",
    "list_calibrations",
    "load_calibration",
    "normalize_dtype",
    "quality_label",
    "quality_rank",
    "replaces",
    "reusable",
    "save_calibration",
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
    """ONNX / torch element type names to the ceiling keys (``float`` -> ``float32``); a
    ``_matrix`` or ``_vector`` suffix (the instruction type, when known) is kept."""
    if not dtype:
        return None
    d = dtype.lower().removeprefix("torch.")
    suffix = next((x for x in ("_matrix", "_vector") if d.endswith(x)), "")
    base = _DTYPES.get(d.removesuffix(suffix))
    if base is None:
        return None
    if base == "tfloat32":
        return "tfloat32_matrix"  # TF32 exists only on matrix / tensor cores
    return base + suffix


@dataclass(frozen=True)
class MemoryLevel:
    """One level of the memory hierarchy and its bandwidth roof.

    ``capacity_bytes``: what the level holds across the cores the workloads use (per-core
    caches add up over the cores, a shared cache counts once per instance); None for DRAM.
    ``bytes_per_s``: the roof (never below a farther level's: data in a nearer level is
    never slower to reach); ``measured`` is False when the level could not be measured on
    its own and carries the nearer level's roof (docs/metrics.md, "Ceilings and calibration").
    """

    name: str  # "L1", "L2", "L3", ..., "DRAM"
    capacity_bytes: int | None
    bytes_per_s: float | None
    measured: bool = True

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> MemoryLevel:
        cap = d.get("capacity_bytes")
        bw = d.get("bytes_per_s")
        return cls(
            name=str(d["name"]),
            capacity_bytes=int(cap) if cap else None,
            bytes_per_s=float(bw) if bw else None,
            measured=bool(d.get("measured", True)),
        )


#: calibration quality, best first (the first index of each is its rank's weight)
_CONTENTION_ORDER = ("disturbed", None, "quiet")
_MODE_ORDER = ("quick", None, "full")


def quality_rank(c: Ceilings) -> tuple[int, int]:
    """How much a stored calibration is to be trusted, larger is better: first by
    contention (quiet, then unknown, then disturbed), then by mode (full, unknown, quick).

    Files written before quality was recorded have neither field: their mode is read from
    ``details.quick`` (recorded since the first format) and a whole-run
    ``details.other_cpu_share`` of 10 % or more marks them disturbed; otherwise unknown.
    """
    mode, contention = _quality(c)
    return (_CONTENTION_ORDER.index(contention), _MODE_ORDER.index(mode))


def _quality(c: Ceilings) -> tuple[str | None, str | None]:
    mode = c.mode
    if mode is None and isinstance(c.details.get("quick"), bool):
        mode = "quick" if c.details["quick"] else "full"
    contention = c.contention
    if contention is None:
        share = c.details.get("other_cpu_share")
        if isinstance(share, int | float) and share >= 0.10:
            contention = "disturbed"
    return mode, contention


def reusable(stored: Ceilings, quick: bool) -> bool:
    """Whether ``aaco calibrate`` may keep ``stored`` instead of measuring: a full quiet
    calibration always; any quiet one when only ``--quick`` is asked for. A quick, disturbed
    or unknown-quality one is measured again when a full one is asked for, and so is a CPU
    one from before the int8 roof (its quantized operators would have no ceiling)."""
    if stored.backend == "cpu" and "int8" not in stored.flops_per_s:
        return False
    contention, mode = quality_rank(stored)
    quiet = contention == _CONTENTION_ORDER.index("quiet")
    return quiet and (quick or mode == _MODE_ORDER.index("full"))


def replaces(new: Ceilings, stored: Ceilings | None) -> bool:
    """Whether a new calibration may overwrite ``stored``: when it ranks at least as high
    (:func:`quality_rank`), so that a quick or disturbed one never replaces a full quiet
    one."""
    return stored is None or quality_rank(new) >= quality_rank(stored)


def quality_label(c: Ceilings) -> str:
    """``full, quiet``, ``quick, quiet``, ``full, disturbed``, ``unknown quality`` ..."""
    if c.source != "calibrated":
        return c.source
    mode, contention = _quality(c)
    if mode is None and contention is None:
        return "unknown quality"
    return f"{mode or 'unknown mode'}, {contention or 'contention unknown'}"


@dataclass(frozen=True)
class Ceilings:
    """Peak FLOP/s per dtype and peak memory bandwidth of one device.

    ``bytes_per_s`` is the DRAM (or HBM) roof; ``memory_levels`` (nearest first, DRAM last)
    adds the cache roofs when they were measured. ``mode`` / ``contention``: the quality of
    a calibration (None: unknown, e.g. files written before it was recorded).
    """

    device: str
    source: str  # "calibrated" | "published"
    flops_per_s: dict[str, float]
    bytes_per_s: float | None
    fingerprint: str | None = None
    backend: str | None = None
    measured_utc: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    memory_levels: tuple[MemoryLevel, ...] = ()
    mode: str | None = None  # "full" | "quick"
    contention: str | None = None  # "quiet" | "disturbed"

    def memory_roof(self, working_set: float | None) -> tuple[str | None, float | None]:
        """(level, bandwidth roof) for an operator moving ``working_set`` bytes per call:
        the nearest level whose capacity holds it, DRAM when none does. Without level
        figures (published peaks, older calibrations) or a known working set: (None, the
        DRAM roof), the level being unknown."""
        if not self.memory_levels or working_set is None or working_set < 0:
            return None, self.bytes_per_s
        for lv in self.memory_levels:
            if lv.capacity_bytes is not None and working_set <= lv.capacity_bytes:
                return lv.name, lv.bytes_per_s
        last = self.memory_levels[-1]
        if last.capacity_bytes is None:
            return last.name, last.bytes_per_s
        return "DRAM", self.bytes_per_s

    def peak_flops(self, dtype: str | None) -> float | None:
        """The ceiling for ``dtype``, by what is known of the instruction type.

        ``<dtype>_matrix`` (matrix / tensor cores, from counters or the kernel's name): the
        matrix peak; ``float32_matrix`` on a device whose FP32-input matrix path is TF32
        (NVIDIA: no ``float32_matrix`` figure) the TF32 peak; else the vector one;
        ``<dtype>_vector``: the vector peak alone;
        ``tfloat32``: the TF32 tensor-core peak. A bare dtype (instruction unknown) gets
        the highest peak it could reach: matrix or vector, and for float32 also the TF32
        tensor-core peak (libraries run FP32 GEMMs on TF32 tensor cores when allowed), so
        that no operator is judged against a roof below what it may have used. None when
        the dtype is unknown or has no figure here."""
        d = normalize_dtype(dtype)
        if d is None:
            return None
        f = self.flops_per_s
        if d.endswith("_vector"):
            return f.get(d.removesuffix("_vector"))
        if d.endswith("_matrix"):
            tf32 = f.get("tfloat32_matrix") if d == "float32_matrix" else None
            return f.get(d) or tf32 or f.get(d.removesuffix("_matrix"))
        keys = [d + "_matrix", d] + (["tfloat32_matrix"] if d == "float32" else [])
        values = [v for v in (f.get(k) for k in keys) if v]
        return max(values) if values else None

    def ridge(self, dtype: str | None) -> float | None:
        """FLOP/B where the compute roof meets the bandwidth roof."""
        f = self.peak_flops(dtype)
        return f / self.bytes_per_s if f and self.bytes_per_s else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Ceilings:
        mode, contention = d.get("mode"), d.get("contention")
        return cls(
            device=str(d["device"]),
            source=str(d["source"]),
            flops_per_s={str(k): float(v) for k, v in (d.get("flops_per_s") or {}).items()},
            bytes_per_s=float(d["bytes_per_s"]) if d.get("bytes_per_s") else None,
            fingerprint=d.get("fingerprint"),
            backend=d.get("backend"),
            measured_utc=d.get("measured_utc"),
            details=dict(d.get("details") or {}),
            memory_levels=tuple(MemoryLevel.from_json(x) for x in d.get("memory_levels") or ()),
            mode=mode if mode in ("full", "quick") else None,
            contention=contention if contention in ("quiet", "disturbed") else None,
        )


# --- the store ----------------------------------------------------------------------------

#: calibration backend of an execution provider (calibrations are stored per backend)
BACKEND_OF_PROVIDER = {
    "CPUExecutionProvider": "cpu",
    "DnnlExecutionProvider": "cpu",
    "OpenVINOExecutionProvider": "cpu",
    "CUDAExecutionProvider": "cuda",
    "TensorrtExecutionProvider": "cuda",
    "ROCMExecutionProvider": "rocm",
    "MIGraphXExecutionProvider": "rocm",
}


def calibration_dir() -> Path:
    env = os.environ.get(CALIBRATION_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("aaco")) / "calibration"


#: the backend GPU calibrations are stored under, whatever framework measured them; their
#: ``fingerprint`` is the device identity's key (:attr:`aaco.session.devices.DeviceIdentity.key`)
GPU_BACKEND = "gpu"
#: backends of GPU calibrations written before the device identity keyed them
LEGACY_GPU_BACKENDS = ("cuda", "rocm")


def _file(fingerprint: str, backend: str) -> Path:
    if backend == GPU_BACKEND:
        return calibration_dir() / f"{fingerprint}.json"
    return calibration_dir() / f"{fingerprint}-{backend}.json"


def calibration_file(fingerprint: str, backend: str) -> Path:
    """Where the calibration for (fingerprint, backend) is stored: ``<fingerprint>-cpu.json``
    for a CPU, ``gpu-<vendor>-<device>.json`` for a GPU (fingerprint = its identity key)."""
    return _file(fingerprint, backend)


def save_calibration(c: Ceilings, backend: str | None = None) -> Path:
    """Store ``c`` as :func:`calibration_file` names it (``<fingerprint>-cpu.json``, or
    ``<identity key>.json`` for a GPU) in :func:`calibration_dir` (atomic
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
    """The calibration stored for this fingerprint (a GPU: its identity key) and backend,
    else None."""
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
