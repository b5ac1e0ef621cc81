"""Moved to :mod:`aaco.session.devices`: the calibrations that the collectors measure and
the ceilings that the analysis looks up are both keyed by a device identity, so it lies
below both. These names stay importable here for callers not yet moved (``aaco calibrate``
in :mod:`aaco.cli`).
"""

from __future__ import annotations

from aaco.session.devices import DeviceIdentity, env_gpu, identify, normalize_vendor, trace_gpus

__all__ = ["DeviceIdentity", "env_gpu", "identify", "normalize_vendor", "trace_gpus"]
