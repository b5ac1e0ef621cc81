"""Which GPU a session or a trace ran on, whatever framework reported it.

One :class:`DeviceIdentity` (vendor, name, architecture, compute units, memory) names a
GPU for its ceilings: the calibration stored for it (``aaco calibrate --backend cuda|rocm``
with any torch build, CUDA or HIP) and its published peaks (``configs/devices.yaml``) are
found by the same identity whether the session came from ONNX Runtime's CUDA / ROCm /
MIGraphX execution providers, PyTorch on CUDA or ROCm, or a trace imported from elsewhere
(rocprofv3 agent info, Kineto ``deviceProperties``). It lies in the session layer because
the calibrations that :mod:`aaco.collectors.calibrate` measures and the ceilings that
:mod:`aaco.analysis.ceilings` looks up are both keyed by it.

Resolution (:func:`identify`): the device table entry whose name pattern matches the
reported name; else, when the name says nothing (ROCm's generic "AMD Radeon Graphics"),
the one entry of the same vendor with the same architecture (when known) and compute
units. Either way a reported compute-unit count other than the entry's per device, or a
memory size more than 15 % off, rules it out (an A100 40GB, an H100 96GB, an MI300X CPX
partition or a MIG slice is another device with other peaks; GiB-vs-GB and reserved memory
stay well inside 15 %). A named part the table lacks (A100 PCIe, H800, H200 NVL) is never
recognised by its architecture: it keeps its own name, so its calibration key is the same
whether torch (with CUs) or the vendor tool (without) named it. An identity that resolves
to no entry keeps its reported name: it can still hold a calibration, never a made-up peak.

Example::

    ident = identify("AMD Radeon Graphics", vendor="amd", compute_units=104,
                     memory_bytes=68_702_699_520)
    ident.entry, ident.key        # "MI210", "gpu-amd-mi210"
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DeviceIdentity",
    "env_gpu",
    "identify",
    "load_device_table",
    "normalize_vendor",
    "trace_gpus",
]

_MEMORY_TOLERANCE = 0.15  # reported capacities are GiB vs GB, minus reserved memory


def load_device_table(path: Path | None = None) -> list[dict[str, Any]]:
    """The entries of ``configs/devices.yaml`` (or ``path``), each with its ``name``:
    ``vendor``, ``match``, ``compute_units``, ``memory_bytes``, ``peaks`` (``flops_per_s``
    per dtype key, ``bytes_per_s``) and ``source``."""
    if path is None:
        text = resources.files("aaco").joinpath("configs/devices.yaml").read_text()
    else:
        text = Path(path).read_text()
    # parsed once per text (an import consults the table several times); a copy each call,
    # so a caller that edits its entries never changes another's
    return copy.deepcopy(_parse_device_table(text))


@functools.lru_cache(maxsize=8)
def _parse_device_table(text: str) -> list[dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    raw = yaml.load(text, Loader=loader) or {}  # a safe loader, the C one where built
    return [{"name": name, **entry} for name, entry in (raw.get("devices") or {}).items()]


def normalize_vendor(text: Any) -> str | None:
    """``"AMD"``, ``"Advanced Micro Devices, Inc."``, ``"amd"`` -> ``"amd"``; NVIDIA alike."""
    t = str(text or "").lower()
    if "nvidia" in t:
        return "nvidia"
    if "amd" in t or "advanced micro" in t or "radeon" in t or "instinct" in t:
        return "amd"
    return None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


@dataclass(frozen=True)
class DeviceIdentity:
    """One GPU as ceilings see it. ``entry``: the device table entry it resolves to (None
    when none does); ``matched_by``: ``name``, ``architecture`` or None."""

    vendor: str | None
    name: str
    arch: str | None = None
    compute_units: int | None = None
    memory_bytes: int | None = None
    entry: str | None = None
    matched_by: str | None = None

    @property
    def key(self) -> str:
        """The calibration key: vendor and the table entry's name, so that every
        framework's name for one device files under one key; a device the table lacks is
        keyed by its reported name, and a generic name ("AMD Radeon Graphics") also by its
        architecture and CUs when known (two unnamed devices must not share one)."""
        if self.entry:
            return f"gpu-{self.vendor or 'unknown'}-{_slug(self.entry)}"
        extra: list[str] = []
        if _GENERIC.fullmatch(self.name):  # a named part keeps its name alone (same key
            # from torch, which reports CUs, and from the vendor tools, which do not)
            cus = f"{self.compute_units}cu" if self.compute_units else None
            extra = [x for x in (self.arch, cus) if x]
        return "-".join(["gpu", self.vendor or "unknown", _slug(self.name), *map(_slug, extra)])

    def to_json(self) -> dict[str, Any]:
        return {
            "vendor": self.vendor,
            "name": self.name,
            "arch": self.arch,
            "compute_units": self.compute_units,
            "memory_bytes": self.memory_bytes,
            "entry": self.entry,
            "matched_by": self.matched_by,
            "key": self.key,
        }


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and value > 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip()) or None
    return None


def _arch(value: Any) -> str | None:
    """``gfx942`` (``gfx942:sramecc+:xnack-``) / ``sm_90`` / ``sm90`` -> the table's spelling."""
    t = str(value or "").strip().lower()
    if not t:
        return None
    m = re.fullmatch(r"(gfx[0-9a-f]+)(?::.*)?", t)
    if m:
        return m.group(1)
    m = re.fullmatch(r"sm_?(\d+)", t)
    return f"sm_{m.group(1)}" if m else None


#: names that say nothing of the model (ROCm's generic marketing name, a gfx target, a PCI
#: id): only these are recognised by architecture and compute units
_GENERIC = re.compile(
    r"(?:(?:amd|advanced micro devices,? inc\.?)\s*)?(?:radeon\s*(?:graphics)?|gfx[0-9a-f]+"
    r"|device\s+[0-9a-fx]+)?|unknown gpu",
    re.IGNORECASE,
)


def _units_fit(entry: Mapping[str, Any], units: int | None) -> bool:
    """Whether a reported CU / SM count (unknown: yes) is this entry's per device."""
    if units is None or not entry.get("compute_units"):
        return True
    return int(entry["compute_units"]) // int(entry.get("gcds") or 1) == units


def _memory_fits(entry: Mapping[str, Any], memory: int | None) -> bool:
    """Whether a reported memory size (unknown: yes) is this entry's per device, within
    what GiB-vs-GB and reserved memory explain."""
    if memory is None or not entry.get("memory_bytes"):
        return True
    per_device = float(entry["memory_bytes"]) / int(entry.get("gcds") or 1)
    return abs(memory - per_device) <= _MEMORY_TOLERANCE * per_device


def identify(
    name: str | None,
    *,
    vendor: Any = None,
    arch: Any = None,
    compute_units: Any = None,
    memory_bytes: Any = None,
    table: Sequence[Mapping[str, Any]] | None = None,
) -> DeviceIdentity | None:
    """The identity of a GPU from what a tool reported (None without a name or a vendor)."""
    entries = list(table) if table is not None else load_device_table()
    text = str(name or "").strip()
    v = normalize_vendor(vendor) or normalize_vendor(text)
    a, cus, mem = _arch(arch), _int(compute_units), _int(memory_bytes)
    if not text and v is None:
        return None
    for e in entries:
        if not _memory_fits(e, mem) or not _units_fit(e, cus):
            # a variant with other memory (A100 40GB, H100 96GB) has other peaks, and so has
            # a partition with fewer CUs (MI300X CPX, a MIG slice) or an MI250 GCD (104 CUs)
            continue
        if text and any(re.search(p, text, re.IGNORECASE) for p in e.get("match") or []):
            return DeviceIdentity(
                normalize_vendor(e.get("vendor")) or v, text, a or e.get("arch"), cus, mem,
                str(e["name"]), "name",
            )  # fmt: skip
    if cus is not None and v is not None and _GENERIC.fullmatch(text):
        # only a name that says nothing of the model: a named part the table lacks (A100
        # PCIe, H800, H200 NVL) must not borrow the figures of one with its CUs
        cands = []
        for e in entries:
            gcds = int(e.get("gcds") or 1)
            if normalize_vendor(e.get("vendor")) != v or e.get("compute_units") is None:
                continue
            if int(e["compute_units"]) // gcds != cus:
                continue
            if a is not None and e.get("arch") not in (None, a):
                continue
            if _memory_fits(e, mem):
                cands.append(e)
        if len(cands) == 1:
            e = cands[0]
            return DeviceIdentity(v, text or str(e["name"]), a or e.get("arch"), cus, mem,
                                  str(e["name"]), "architecture")  # fmt: skip
    return DeviceIdentity(v, text or "unknown GPU", a, cus, mem)


def env_gpu(env: Mapping[str, Any] | None, index: int = 0) -> DeviceIdentity | None:
    """The GPU of an env.json (``gpus.devices``; the first one unless ``index`` names
    another present), None when it lists none."""
    devices = [d for d in ((env or {}).get("gpus") or {}).get("devices") or [] if d]
    devices = [d for d in devices if isinstance(d, Mapping) and (d.get("name") or d.get("vendor"))]
    if not devices:
        return None
    pick = next((d for d in devices if d.get("index") == index), devices[0])
    return identify(
        pick.get("name"),
        vendor=pick.get("vendor"),
        arch=pick.get("arch"),
        compute_units=pick.get("compute_units"),
        memory_bytes=pick.get("memory_bytes"),
    )


def trace_gpus(sources: Sequence[Mapping[str, Any]]) -> dict[int | None, DeviceIdentity]:
    """GPU index -> identity, from the ``meta`` of imported traces: rocprofv3 agent info
    (``devices``: product name, gfx target, CU count) and Kineto ``deviceProperties``
    (name, ``numSms``, ``totalGlobalMem``; AMD builds report CUs as ``numSms``)."""
    out: dict[int | None, DeviceIdentity] = {}
    for meta in sources:
        for d in meta.get("devices") or []:
            if not isinstance(d, Mapping):
                continue
            if "gfx_target" in d or "cu_count" in d:  # rocprofv3 agent_info
                ident = identify(
                    d.get("product") or d.get("name"),
                    vendor="amd",
                    arch=d.get("gfx_target"),
                    compute_units=d.get("cu_count"),
                )
            else:  # Kineto deviceProperties
                name = d.get("name")
                ident = identify(
                    name,
                    vendor=normalize_vendor(name)
                    or ("amd" if d.get("warpSize") == 64 else "nvidia" if name else None),
                    arch=(
                        f"sm_{d['computeMajor']}{d['computeMinor']}"
                        if normalize_vendor(name) == "nvidia"
                        and isinstance(d.get("computeMajor"), int)
                        and isinstance(d.get("computeMinor"), int)
                        else None
                    ),
                    compute_units=d.get("numSms"),
                    memory_bytes=d.get("totalGlobalMem"),
                )
            raw = d.get("index", d.get("id"))
            idx = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
            if ident is not None:
                out.setdefault(idx, ident)
    return out
