"""Fingerprints of an ``env.json``: which machine and software stack a session ran on.

:func:`fingerprint_fields` keeps the performance-relevant, non-volatile part of a captured
environment (:func:`aaco.collectors.environment.capture_environment`), :func:`fingerprint`
hashes it (``env.json``'s ``fingerprint``), and :func:`hardware_fingerprint` hashes its
hardware part alone: the key a CPU calibration is stored under
(:mod:`aaco.session.calibration`). Pure functions over the JSON, so that readers of a bundle
(the roofline's ceilings) and the collectors that write one share them.

Example::

    fingerprint(fingerprint_fields(env)) == env["fingerprint"]
    hardware_fingerprint(env)                # "3f2a..." (16 hex digits)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aaco.errors import InputError

__all__ = ["file_sha256", "fingerprint", "fingerprint_fields", "hardware_fingerprint"]

_GIB = 1 << 30


def fingerprint(fields: Mapping[str, Any]) -> str:
    """16 hex digits of the sha256 of ``fields`` as canonical JSON (sorted keys)."""
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def fingerprint_fields(env: Mapping[str, Any]) -> dict[str, Any]:
    """The performance-relevant, non-volatile part of a captured environment
    (:func:`aaco.collectors.environment.capture_environment`).

    Hardware: CPU model, architecture, physical and logical core counts, the CPU flags of
    :data:`aaco.collectors.environment.CPU_FLAGS` that are present, memory total rounded to
    GiB, GPU (vendor, name, driver) triples. Software: OS system, kernel release, distro,
    Python version, onnxruntime version, distribution and available providers.

    Left out on purpose, because they change between two runs of the same setup: free
    memory, current frequency, governors, hostname, command line, environment variables,
    cgroup quota, package versions other than onnxruntime, GPU uuids and indices.
    """
    cpu = env.get("cpu") or {}
    flags = cpu.get("flags") or {}
    memory = env.get("memory") or {}
    total = memory.get("total_bytes")
    osd = env.get("os") or {}
    ort = env.get("onnxruntime") or {}
    gpus = (env.get("gpus") or {}).get("devices") or []
    return {
        "cpu_model": cpu.get("model"),
        "cpu_architecture": cpu.get("architecture"),
        "physical_cores": cpu.get("physical_cores"),
        "logical_cores": cpu.get("logical_cores"),
        "cpu_flags": sorted(f for f, present in flags.items() if present),
        "memory_gib": round(total / _GIB) if isinstance(total, int) else None,
        "os_system": osd.get("system"),
        "os_release": osd.get("release"),
        "distro": osd.get("distro"),
        "python_version": (env.get("python") or {}).get("version"),
        "onnxruntime_version": ort.get("version"),
        "onnxruntime_distribution": ort.get("distribution"),
        "available_providers": ort.get("available_providers"),
        "gpus": sorted(
            [str(g.get("vendor")), str(g.get("name")), str(g.get("driver"))] for g in gpus
        ),
    }


def hardware_fingerprint(env: Mapping[str, Any]) -> str:
    """16 hex digits over the hardware part of an env.json: CPU model, architecture, core
    counts, CPU flags, memory in GiB, GPU vendor/name (not driver or software versions)."""
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


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of the file at ``path``, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    try:
        with Path(path).open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return digest.hexdigest()
