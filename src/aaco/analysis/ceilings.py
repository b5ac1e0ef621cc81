"""Roofline ceilings of a session's device: its calibration, else its published peaks.

Precedence for a session (:func:`session_ceilings`): the calibration stored for its device
(``aaco calibrate``: a CPU by its hardware fingerprint, a GPU by its device identity,
:mod:`aaco.session.devices`, whatever framework measured or ran it), else the published
peaks of its GPU (``configs/devices.yaml``), else None: no ceiling is ever made up.

The :class:`~aaco.session.calibration.Ceilings` record, its quality ranking and the store of
calibrations (``$AACO_CALIBRATION_DIR``) are :mod:`aaco.session.calibration`'s: the
collectors that measure calibrations write them there, and this module only reads them.

Example::

    c = published_ceilings("NVIDIA H100 80GB HBM3")
    c.peak_flops("float16"), c.bytes_per_s      # 989.4e12, 3.35e12
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from aaco.session.calibration import (
    GPU_BACKEND,
    LEGACY_GPU_BACKENDS,
    Ceilings,
    load_calibration,
)
from aaco.session.devices import env_gpu, identify, load_device_table
from aaco.session.fingerprint import hardware_fingerprint

__all__ = ["published_ceilings", "published_for", "session_ceilings"]

# --- published peaks -----------------------------------------------------------------------


def published_ceilings(
    device_name: str, table: list[dict[str, Any]] | None = None
) -> Ceilings | None:
    """Published peaks of the first table entry whose pattern matches ``device_name``."""
    for entry in table if table is not None else load_device_table():
        if any(re.search(p, device_name, re.IGNORECASE) for p in entry.get("match") or []):
            return _published(entry, device_name, "name")
    return None


def published_for(identity: Any, table: list[dict[str, Any]] | None = None) -> Ceilings | None:
    """Published peaks of the table entry a :class:`aaco.session.devices.DeviceIdentity`
    resolved to (by name or by architecture and compute units); None when it resolved to
    none."""
    entry_name = getattr(identity, "entry", None)
    if not entry_name:
        return None
    for entry in table if table is not None else load_device_table():
        if entry["name"] == entry_name:
            return _published(entry, identity.name, identity.matched_by)
    return None


def _published(entry: Mapping[str, Any], reported: str, matched_by: str | None) -> Ceilings:
    """Ceilings of one table entry, per device a process sees (a package of ``gcds`` dies
    exposed as separate devices gets each die's share of the package figures)."""
    peaks = entry.get("peaks") or {}
    gcds = int(entry.get("gcds") or 1)
    bw = peaks.get("bytes_per_s")
    units, memory = entry.get("compute_units"), entry.get("memory_bytes")
    device = str(entry["name"]) + (f" (one of {gcds} GCDs)" if gcds > 1 else "")
    if matched_by == "architecture" and entry.get("same_as"):
        # recognised by CUs and memory, which this entry shares with another part
        device += f" or {entry['same_as']} (same figures)"
    return Ceilings(
        device=device,
        source="published",
        flops_per_s={k: float(v) / gcds for k, v in (peaks.get("flops_per_s") or {}).items()},
        bytes_per_s=float(bw) / gcds if bw else None,
        details={
            "matched": reported,
            "matched_by": matched_by,
            "citation": entry.get("source"),
            "compute_units": int(units) // gcds if units else None,
            "memory_bytes": float(memory) / gcds if memory else None,
            "vendor": entry.get("vendor"),
            "arch": entry.get("arch"),
            "gcds": gcds,
        },
    )


def session_ceilings(
    env: Mapping[str, Any] | None,
    backend: str,
    gpu_name: str | None = None,
    identity: Any = None,
) -> Ceilings | None:
    """The ceilings of a session's device, best first, else None.

    CPU: the calibration stored for this hardware fingerprint. GPU (any other backend:
    cuda, rocm, gpu): the calibration stored for the device's identity (``identity``, else
    the env's first GPU, else ``gpu_name``; :mod:`aaco.session.devices`) whatever
    framework measured it, then one stored by an older AACO under (host fingerprint,
    cuda|rocm), then the published peaks of the device.
    """
    if backend == "cpu":
        return load_calibration(hardware_fingerprint(env), "cpu") if env else None
    ident = identity or env_gpu(env) or (identify(gpu_name) if gpu_name else None)
    if ident is not None:
        cal = load_calibration(ident.key, GPU_BACKEND)
        if cal is not None:
            return cal
    if env:
        for legacy in LEGACY_GPU_BACKENDS:
            cal = load_calibration(hardware_fingerprint(env), legacy)
            if cal is not None:
                return cal
    if ident is not None:
        return published_for(ident)
    return None
