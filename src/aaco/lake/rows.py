"""One summary row per session for the fleet: what ran (model, hashes, settings), where
(vendor, architecture, device, driver, host, software versions) and how fast (headline
figures), flat and typed for a Parquet table.

The row extends :func:`aaco.session.catalog.session_row` (``aaco ls``'s row) with the
metadata registry's keys (:mod:`aaco.session.metadata`) and the device the session ran on.
``vendor`` is the accelerator the run used (``amd``, ``nvidia``, ``intel``) or ``cpu``;
``arch`` is that GPU's architecture (``gfx942``, ``sm_90``; its name's slug when unknown) or
the CPU's (``x86_64``); both are never empty, so they can key Hive partitions (``unknown``
when not known). An imported trace (``aaco import``) is placed by the GPU the trace names
(rocprofv3 agent info, Kineto ``deviceProperties``), else by its tool or flavour
(rocprofv3: ``amd``; a CUDA Kineto trace: ``nvidia``); an import has no env.json, so its
host, CPU and software columns are unknown.

Example::

    row = fleet_row(Session.load("sessions/latest"))
    row["vendor"], row["arch"], row["p99_ms"]       # "cpu", "x86_64", 12.3
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from aaco.errors import BundleError, UsageError
from aaco.runners.harness import one_line
from aaco.session import metadata
from aaco.session.bundle import Session, iter_sessions
from aaco.session.catalog import session_row
from aaco.session.devices import env_gpu, normalize_vendor, trace_gpus
from aaco.session.fingerprint import hardware_fingerprint
from aaco.session.paths import IMPORT_META_FILE, MODEL_META_FILE, SESSION_FILE
from aaco.session.schema import KERNELS

__all__ = [
    "BUNDLE_ERRORS",
    "FLEET_SCHEMA",
    "fleet_row",
    "folder_fleet_rows",
    "partition_value",
    "rows_table",
    "session_date",
    "used_gpu",
]

#: providers (ONNX Runtime) and devices (torch) that put the run on a GPU
_GPU_PROVIDER = re.compile(r"cuda|rocm|migraphx|tensorrt|hip|dml|openvino_gpu", re.IGNORECASE)
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")

#: the lake's ``sessions`` table: every column, its Arrow type, in order
FLEET_SCHEMA = pa.schema(
    [
        ("session_id", pa.string()),
        ("created_utc", pa.string()),
        ("created", pa.timestamp("us", tz="UTC")),
        ("status", pa.string()),
        ("kind", pa.string()),
        ("tag", pa.string()),
        ("model", pa.string()),
        ("model_sha256", pa.string()),
        ("model_source", pa.string()),
        ("backend", pa.string()),
        ("provider", pa.string()),
        ("framework", pa.string()),
        ("batch", pa.int64()),
        ("threads", pa.int64()),
        ("inputs", pa.string()),
        ("preprocess", pa.string()),
        ("torch_device", pa.string()),
        ("compile", pa.bool_()),
        ("profile_mode", pa.string()),
        ("iterations_requested", pa.int64()),
        ("warmup", pa.int64()),
        ("settings", pa.string()),
        ("vendor", pa.string()),
        ("arch", pa.string()),
        ("device", pa.string()),
        ("device_key", pa.string()),
        ("gpu_count", pa.int64()),
        ("gpu_uuid", pa.string()),
        ("gpu_index", pa.int64()),
        ("driver", pa.string()),
        ("hostname", pa.string()),
        ("cpu_model", pa.string()),
        ("cpu_arch", pa.string()),
        ("logical_cores", pa.int64()),
        ("memory_bytes", pa.int64()),
        ("os_release", pa.string()),
        ("python_version", pa.string()),
        ("aaco_version", pa.string()),
        ("onnxruntime_version", pa.string()),
        ("torch_version", pa.string()),
        ("packages", pa.string()),
        ("fingerprint", pa.string()),
        ("hardware_fingerprint", pa.string()),
        ("p50_ms", pa.float64()),
        ("p90_ms", pa.float64()),
        ("p99_ms", pa.float64()),
        ("iterations", pa.int64()),
        ("throughput", pa.float64()),
        ("iterations_per_s", pa.float64()),
        ("ttft_p50_ms", pa.float64()),
        ("ttft_p99_ms", pa.float64()),
        ("output_tokens_per_s", pa.float64()),
        ("source_path", pa.string()),
    ]
)


def partition_value(value: Any) -> str:
    """``value`` as a Hive partition value: path-safe (``/``, ``=`` and spaces replaced),
    never empty (``unknown``)."""
    text = _UNSAFE.sub("_", str(value)).strip("_.") if value is not None else ""
    return text[:64] or "unknown"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def _created(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def on_gpu(meta: Mapping[str, Any]) -> bool:
    """The run used a GPU: its provider (ONNX Runtime) or device (torch) is one."""
    provider = metadata.get(meta, "backend.provider")
    device = metadata.get(meta, "run.device")
    return any(isinstance(v, str) and bool(_GPU_PROVIDER.search(v)) for v in (provider, device))


def _rows_in(path: Path) -> int:
    """Rows of a Parquet file, from its footer (0 when unreadable: no rows known)."""
    import pyarrow.parquet as pq

    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except (OSError, ValueError):
        return 0


#: the vendor a trace tool or Kineto flavour implies when the trace names no GPU
_TOOL_VENDOR = {"rocprofv3": "amd", "rocprof": "amd", "rocpd": "amd", "nsys": "nvidia"}
_FLAVOUR_VENDOR = {"rocm": "amd", "cuda": "nvidia"}


def _traced_gpu(session: Session) -> tuple[str, str | None, str | None, str | None] | None:
    """``(vendor, arch, device, calibration key)`` of the GPU an imported trace ran on, from
    the trace itself (an import has no env.json: the importing machine is not the traced
    one); None when the trace shows no GPU."""
    imported = session.json_file(IMPORT_META_FILE)
    sources = imported.get("sources") if isinstance(imported, dict) else None
    sources = [m for m in sources or [] if isinstance(m, Mapping)]
    gpus = trace_gpus(sources)
    if gpus:
        ident = gpus[min(gpus, key=lambda i: -1 if i is None else i)]
        arch = ident.arch or ident.entry or ident.name
        return normalize_vendor(ident.vendor) or "unknown", arch, ident.name, ident.key
    for meta in sources:
        vendor = _TOOL_VENDOR.get(str(meta.get("tool"))) or _FLAVOUR_VENDOR.get(
            str(meta.get("flavour"))
        )
        if vendor:
            return vendor, None, None, None
    if session.has_table("kernels") and _rows_in(session.path / KERNELS.path) > 0:
        return "unknown", None, None, None
    return None


#: the variables that narrow a run to some of the host's GPUs (CUDA, HIP, ROCr)
_VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def used_gpu(env: Mapping[str, Any], gpus: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The env.json GPU entry the run used, when the environment says which: the host's
    only GPU, or the one device a ``*_VISIBLE_DEVICES`` variable narrowed the run to (an
    index, as NVML numbers them on a host of one kind of GPU, or a ``GPU-`` uuid; Ray sets
    it for a task of one GPU). None otherwise: on a host of several GPUs a run's device is
    not recorded, and index 0 would be a guess."""
    if len(gpus) == 1:
        return gpus[0]
    raw = env.get("env_vars")
    env_vars: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    for name in _VISIBLE:
        value = str(env_vars.get(name) or "").strip()
        tokens = [t.strip() for t in value.split(",") if t.strip()]
        if len(tokens) != 1:
            continue
        token = tokens[0]
        for d in gpus:
            if token.isdigit() and d.get("index") == int(token):
                return d
            if str(d.get("uuid") or "").lower() == token.lower():
                return d
    return None


def fleet_row(session: Session) -> dict[str, Any]:
    """The session's row of the lake's ``sessions`` table (:data:`FLEET_SCHEMA`'s columns);
    a value the bundle does not record is None."""
    meta, env = session.meta, session.env or {}
    base = session_row(session)
    get = metadata.get
    model_meta = session.json_file(MODEL_META_FILE)
    model_meta = model_meta if isinstance(model_meta, dict) else {}
    cpu_env = env.get("cpu")
    cpu: dict[str, Any] = cpu_env if isinstance(cpu_env, dict) else {}
    gpus = [
        d
        for d in ((env.get("gpus") or {}).get("devices") or [] if isinstance(env, dict) else [])
        if isinstance(d, Mapping)
    ]
    packages = get(meta, "env.packages", env)
    packages = packages if isinstance(packages, dict) else {}
    gpu = env_gpu(env) if on_gpu(meta) else None
    traced = _traced_gpu(session) if get(meta, "kind") == "import" else None
    pick: Mapping[str, Any] = {}
    vendor: str
    arch: str | None
    device: str | None
    key: str | None
    if traced is not None:
        vendor, arch, device, key = traced
    elif get(meta, "kind") == "import":  # a CPU trace: which CPU, the trace does not say
        vendor, arch, device, key = "cpu", None, None, None
    elif gpu is not None:
        pick = used_gpu(env, gpus) or {}
        if isinstance(pick.get("index"), int):
            gpu = env_gpu(env, pick["index"]) or gpu
        vendor = normalize_vendor(gpu.vendor) or "unknown"
        arch = gpu.arch or gpu.entry or gpu.name
        device, key = gpu.name, gpu.key
    elif on_gpu(meta):  # a GPU run whose GPU the environment did not name
        vendor, arch, device, key = "unknown", None, None, None
    else:
        vendor, arch, key = "cpu", _str(cpu.get("architecture")), None
        device = _str(cpu.get("model"))
    created = get(meta, "created_utc")
    return {
        "session_id": session.session_id,
        "created_utc": _str(created),
        "created": _created(created),
        "status": session.status,
        "kind": _str(get(meta, "kind")) or "run",
        "tag": _str(get(meta, "tag")),
        "model": _str(get(meta, "model.name")),
        "model_sha256": _str(model_meta.get("sha256")),
        "model_source": _str((meta.get("model") or {}).get("source")),
        "backend": _str(get(meta, "backend.name")),
        "provider": _str(get(meta, "backend.provider")),
        "framework": _str(get(meta, "run.framework")),
        "batch": _int(get(meta, "run.batch")),
        "threads": _int(get(meta, "run.threads")),
        "inputs": _json(get(meta, "run.inputs")),
        "preprocess": _str(get(meta, "run.preprocess")),
        "torch_device": _str(get(meta, "run.device")),
        "compile": v if isinstance(v := get(meta, "run.compile"), bool) else None,
        "profile_mode": _str(get(meta, "run.profile_mode")),
        "iterations_requested": _int((meta.get("run") or {}).get("iterations")),
        "warmup": _int((meta.get("run") or {}).get("warmup")),
        "settings": _str(base.get("settings")),
        "vendor": partition_value(vendor),
        "arch": partition_value(arch),
        "device": device,
        "device_key": key,
        "gpu_count": _gpu_count(env, gpus),
        "gpu_uuid": _str(pick.get("uuid")),
        "gpu_index": _int(pick.get("index")),
        # every GPU of a host runs one driver: known even when which GPU is not
        "driver": _str(pick.get("driver")) or _one({d.get("driver") for d in gpus}),
        "hostname": _str(get(meta, "env.hostname", env)),
        "cpu_model": _str(cpu.get("model")),
        "cpu_arch": _str(cpu.get("architecture")),
        "logical_cores": _int(cpu.get("logical_cores")),
        "memory_bytes": _int(get(meta, "env.memory.total_bytes", env)),
        "os_release": _str(get(meta, "env.os.release", env)),
        "python_version": _str(get(meta, "env.python.version", env)),
        "aaco_version": _str(meta.get("aaco_version")) or _str(packages.get("aaco")),
        "onnxruntime_version": _str(get(meta, "env.onnxruntime.version", env))
        or _str(packages.get("onnxruntime")),
        "torch_version": _str(packages.get("torch")),
        "packages": _json(packages) if packages else None,
        "fingerprint": _str(base.get("fingerprint")),
        "hardware_fingerprint": hardware_fingerprint(env) if env else None,
        "p50_ms": _float(base.get("p50_ms")),
        "p90_ms": _float(base.get("p90_ms")),
        "p99_ms": _float(base.get("p99_ms")),
        "iterations": _int(base.get("iterations")),
        "throughput": _float(base.get("throughput")),
        "iterations_per_s": _float(base.get("iterations_per_s")),
        "ttft_p50_ms": _float(base.get("ttft_p50_ms")),
        "ttft_p99_ms": _float(base.get("ttft_p99_ms")),
        "output_tokens_per_s": _float(base.get("output_tokens_per_s")),
        "source_path": str(session.path),
    }


def session_date(row: Mapping[str, Any], session: Session) -> str:
    """The UTC date partition: of ``created_utc``; else of the session id
    (``YYYYMMDD_...``); else of ``session.json``'s modification time."""
    created = row.get("created")
    if isinstance(created, datetime):
        return created.astimezone(timezone.utc).date().isoformat()
    m = re.match(r"^(\d{4})(\d{2})(\d{2})_", session.session_id)
    if m:
        with contextlib.suppress(ValueError):
            return datetime(int(m[1]), int(m[2]), int(m[3])).date().isoformat()
    mtime = (session.path / SESSION_FILE).stat().st_mtime
    return datetime.fromtimestamp(mtime, timezone.utc).date().isoformat()


def _gpu_count(env: Mapping[str, Any], gpus: list[Mapping[str, Any]]) -> int | None:
    """GPUs in env.json; None (unknown) without env.json, or when the query found none
    and failed (an error is not "no GPU")."""
    if not env:
        return None
    raw = env.get("gpus")
    info: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    if not gpus and info.get("errors"):
        return None
    return len(gpus)


def _one(values: set[Any]) -> str | None:
    """The one string value of a set, None when there are several or none."""
    values.discard(None)
    return next(iter(values)) if len(values) == 1 and isinstance(next(iter(values)), str) else None


#: what a bundle's own files may raise when read (damaged or hand-edited): that bundle is
#: left out, with a note, never the rest
BUNDLE_ERRORS = (BundleError, UsageError, ValueError, TypeError, KeyError, OSError)


def folder_fleet_rows(root: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The fleet rows (:func:`fleet_row`, with ``date``) of the bundles under a sessions
    root, and a note for each bundle left out because it cannot be read."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for bundle in iter_sessions(root):
        try:
            session = Session.load(bundle)
            row = fleet_row(session)
            row["date"] = date.fromisoformat(session_date(row, session))
        except BUNDLE_ERRORS as exc:
            notes.append(f"{bundle}: left out ({one_line(exc)})")
            continue
        rows.append(row)
    return rows, notes


def rows_table(rows: list[dict[str, Any]], schema: pa.Schema = FLEET_SCHEMA) -> pa.Table:
    """``rows`` (dicts with ``schema``'s columns) as an Arrow table of ``schema``."""
    return pa.Table.from_pylist(rows, schema=schema)
