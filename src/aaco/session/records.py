"""Typed records of what a bundle holds on disk: ``session.json`` (:class:`SessionMeta`)
and ``metrics/inference_summary.json`` (:class:`InferenceSummary`), frozen msgspec Structs.

A record round-trips its file without loss: a key this version does not know is kept in
the record's ``extra`` (in its place), a key that is absent stays absent (``UNSET``, never
written), a null stays null, a number stays as it was written (an integer is not turned
into a float), and the keys keep the order the file gave them (a key set since follows
the others, as in a dict; a record built in code writes the declared order, which is the
order ``aaco run`` writes). :func:`read_session_meta`
and :func:`write_session_meta` are the one reader and writer of ``session.json``; the
writer goes through :func:`aaco.session.bundle.atomic_write_json`, so a record read from a
file and written back gives the file's bytes again.

``msgspec.json.decode(data, type=SessionMeta)`` and ``msgspec.json.encode`` work on their
own too, for files whose keys are all known; they leave out ``extra`` and the key order,
which only :meth:`Record.from_data` / :meth:`Record.to_data` (and :func:`decode` /
:func:`encode`) carry.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias, TypeVar

import msgspec
from msgspec import UNSET, UnsetType, field

from aaco.errors import BundleError
from aaco.session.bundle import SUPPORTED_FORMAT_VERSIONS, atomic_write_json, to_json
from aaco.session.paths import SESSION_FILE

#: a number kept as written: an integer stays an integer, a float a float
Real: TypeAlias = int | float
R = TypeVar("R", bound="Record")

_OWN_FIELDS = ("extra", "key_order")
_OWN_KEYS = ("__extra__", "__key_order__")


class Record(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of every record: the declared fields, plus what keeps a file's data whole.

    ``extra``: the keys of the file this version does not declare, with their values.
    ``key_order``: the order of the keys in the file the record was read from (empty for
    a record built in code: the declared order). A key that is not in it, set since,
    follows the others, as a key added to a JSON object would.

    Records are equal when their data are (the same keys and values, in any order).
    """

    extra: dict[str, Any] = field(default_factory=dict, name="__extra__")
    key_order: tuple[str, ...] = field(default=(), name="__key_order__")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(
            getattr(self, n) == getattr(other, n)
            for n in self.__struct_fields__
            if n != "key_order"
        )

    def __hash__(self) -> int:
        # consistent with __eq__; a record holding a JSON object (a dict) is unhashable
        return hash(tuple(getattr(self, n) for n in self.__struct_fields__ if n not in _OWN_FIELDS))

    def __repr__(self) -> str:
        parts = [
            f"{n}={getattr(self, n)!r}"
            for n in self.__struct_fields__
            if n not in _OWN_FIELDS and getattr(self, n) is not UNSET
        ]
        if self.extra:
            parts.append(f"extra={self.extra!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def to_data(self) -> dict[str, Any]:
        """The JSON object this record is on disk (what ``atomic_write_json`` is given)."""
        known: dict[str, Any] = {}
        for name, key in _fields(type(self)):
            value = getattr(self, name)
            if value is not UNSET:
                known[key] = to_data(value)
        data = {**known, **{k: to_data(v) for k, v in self.extra.items() if k not in known}}
        if not self.key_order:
            return data
        ordered = {k: data[k] for k in self.key_order if k in data}
        ordered.update((k, v) for k, v in data.items() if k not in ordered)
        return ordered

    @classmethod
    def from_data(cls: type[R], data: Mapping[str, Any]) -> R:
        """The record of a JSON object (``msgspec.ValidationError`` when a declared key
        holds a value of another type)."""
        # the encode names of ``extra``/``key_order`` are no keys of a file: a file that
        # has them keeps them as extras
        declared = {k: v for k, v in data.items() if k not in _OWN_KEYS}
        return _attach(msgspec.convert(declared, cls), data)


def to_data(value: Any) -> Any:
    """``value`` as JSON data: records as their objects, tuples as lists."""
    if isinstance(value, Record):
        return value.to_data()
    if isinstance(value, list | tuple):
        return [to_data(v) for v in value]
    if isinstance(value, dict):
        return {k: to_data(v) for k, v in value.items()}
    return value


@functools.cache
def _fields(cls: type[Record]) -> tuple[tuple[str, str], ...]:
    """``(attribute, JSON key)`` of each declared field, in declaration order."""
    return tuple(
        (f.name, f.encode_name) for f in msgspec.structs.fields(cls) if f.name not in _OWN_FIELDS
    )


def _attach(record: R, data: Mapping[str, Any]) -> R:
    """``record`` (converted from ``data``) with the extras and the key order of ``data``,
    at every level."""
    declared = _fields(type(record))
    keys = {key for _, key in declared}
    updates: dict[str, Any] = {}
    for name, key in declared:
        if key in data:
            value = getattr(record, name)
            whole = _attach_value(value, data[key])
            if whole is not value:
                updates[name] = whole
    extra = {k: v for k, v in data.items() if k not in keys}
    if extra:
        updates["extra"] = extra
    return msgspec.structs.replace(record, key_order=tuple(data), **updates)


def _attach_value(value: Any, data: Any) -> Any:
    if isinstance(value, Record) and isinstance(data, Mapping):
        return _attach(value, data)
    if (
        isinstance(value, list | tuple)
        and isinstance(data, list)
        and len(value) == len(data)
        and any(isinstance(v, Record) for v in value)
    ):
        return type(value)(_attach_value(v, d) for v, d in zip(value, data, strict=True))
    return value


def decode(data: bytes | str, cls: type[R]) -> R:
    """The record ``cls`` of a JSON document (``ValueError`` when it is not JSON,
    ``msgspec.ValidationError`` when it does not fit ``cls``)."""
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise msgspec.ValidationError(f"Expected `object`, got `{type(obj).__name__}`")
    return cls.from_data(obj)


def encode(record: Record) -> bytes:
    """``record`` as the bundle writes JSON (:func:`aaco.session.bundle.to_json`)."""
    return to_json(record.to_data()).encode()


# -- session.json -----------------------------------------------------------------------------
class Failure(Record, frozen=True, kw_only=True):
    """A side product that failed without failing the run (``failures[]``)."""

    stage: str
    error: str


class SessionError(Record, frozen=True, kw_only=True):
    """Why a run did not complete (``error``)."""

    message: str
    #: how far the worker got (start, load, inputs, warmup, measure, profile), or ``aaco``
    stage: str | UnsetType | None = UNSET
    returncode: int | UnsetType | None = UNSET


class ModelInfo(Record, frozen=True, kw_only=True):
    """``model``: what was profiled."""

    name: str | UnsetType | None = UNSET
    path: str | UnsetType | None = UNSET
    #: builtin, registry, file, torch-function, torch-export or import
    source: str | UnsetType | None = UNSET


class BackendInfo(Record, frozen=True, kw_only=True):
    """``backend``: the backend chosen and the providers it ran on."""

    name: str | UnsetType | None = UNSET
    provider: str | UnsetType | None = UNSET
    providers_active: tuple[str, ...] | UnsetType | None = UNSET


class RunInput(Record, frozen=True, kw_only=True):
    """One input tensor of ``run.inputs`` (ONNX Runtime: how it was filled; torch: what the
    model function returned)."""

    name: str | UnsetType | None = UNSET
    dtype: str | UnsetType | None = UNSET
    shape: tuple[int, ...] | UnsetType | None = UNSET
    fill: str | UnsetType = UNSET
    low: Real | UnsetType = UNSET
    high: Real | UnsetType = UNSET
    value: Real | UnsetType | None = UNSET
    path: str | UnsetType | None = UNSET


class RunConfig(Record, frozen=True, kw_only=True):
    """``run``: how the session ran (docs/bundle.md)."""

    framework: str | UnsetType | None = UNSET
    batch: int | UnsetType | None = UNSET
    batch_source: str | UnsetType | None = UNSET
    inputs: tuple[RunInput, ...] | UnsetType = UNSET
    warmup: int | UnsetType | None = UNSET
    iterations: int | UnsetType | None = UNSET
    duration_s: Real | UnsetType | None = UNSET
    threads: int | UnsetType | None = UNSET
    seed: int | UnsetType | None = UNSET
    preprocess: str | UnsetType | None = UNSET
    #: true/false, or ``"imported"`` in a bundle of ``aaco import``
    profile: bool | str | UnsetType | None = UNSET
    profile_mode: str | UnsetType | None = UNSET
    profile_warmup: int | UnsetType = UNSET
    profile_iterations: int | UnsetType = UNSET
    telemetry: bool | UnsetType = UNSET
    sample_hz: Real | UnsetType | None = UNSET
    timeout_s: Real | UnsetType | None = UNSET
    # --framework torch
    device: str | UnsetType | None = UNSET
    compile: bool | UnsetType = UNSET
    model_spec: str | UnsetType = UNSET
    #: the torch worker's framework information (versions, device name, threads)
    torch: dict[str, Any] | UnsetType | None = UNSET
    compile_ms: Real | UnsetType | None = UNSET


class ClockInfo(Record, frozen=True, kw_only=True):
    """``clock``: timestamps are monotonic ns; add ``epoch_offset_ns`` for epoch ns."""

    name: str | UnsetType = UNSET
    epoch_offset_ns: int | UnsetType = UNSET


class WorkerUsage(Record, frozen=True, kw_only=True):
    """``worker``: the worker process's wall time, exit code and resource usage."""

    wall_s: Real | UnsetType = UNSET
    returncode: int | UnsetType | None = UNSET
    wait4_max_rss_bytes: Real | UnsetType | None = UNSET
    cpu_user_s: Real | UnsetType = UNSET
    cpu_system_s: Real | UnsetType = UNSET
    #: a float in bundles written before ``max_rss_source`` (wait4's ``ru_maxrss``)
    max_rss_bytes: Real | UnsetType | None = UNSET
    max_rss_source: str | UnsetType | None = UNSET


class TelemetryInfo(Record, frozen=True, kw_only=True):
    """``telemetry``: how the system sampler ran."""

    hz: Real | UnsetType | None = UNSET
    samples: int | UnsetType = UNSET
    sampler_cpu_s: Real | UnsetType | None = UNSET
    stopped_reason: str | UnsetType | None = UNSET


class KernelCaptureInfo(Record, frozen=True, kw_only=True):
    """``kernel_capture``: the rocprofv3 re-run of ``--profile kernels``."""

    status: str | UnsetType = UNSET
    error: str | UnsetType | None = UNSET
    command: tuple[str, ...] | UnsetType = UNSET
    output_dir: str | UnsetType = UNSET
    returncode: int | UnsetType | None = UNSET
    wall_s: Real | UnsetType = UNSET
    files: tuple[str, ...] | UnsetType = UNSET
    runs: int | UnsetType = UNSET
    #: rows imported per table, once the capture was ingested
    rows: dict[str, int] | UnsetType | None = UNSET


class ProcessUsage(Record, frozen=True, kw_only=True):
    """``aaco_process``: the aaco process's own peak RSS."""

    max_rss_bytes: int | UnsetType | None = UNSET


class ImportInfo(Record, frozen=True, kw_only=True):
    """One trace import of ``imports[]``."""

    imported_utc: str | UnsetType = UNSET
    importers: tuple[str, ...] | UnsetType = UNSET
    events: int | UnsetType = UNSET
    rows: dict[str, int] | UnsetType = UNSET


class SessionMeta(Record, frozen=True, kw_only=True):
    """``session.json``, in the order ``aaco run`` writes it (docs/bundle.md).

    Only ``format_version`` is required: a bundle salvaged before its first write holds
    little more. Object sections may be null where :class:`~aaco.session.bundle.Session`
    accepts null.
    """

    format_version: int
    aaco_version: str | UnsetType = UNSET
    session_id: str | UnsetType = UNSET
    #: ``"import"`` for a bundle created by ``aaco import``
    kind: str | UnsetType = UNSET
    created_utc: str | UnsetType | None = UNSET
    finished_utc: str | UnsetType | None = UNSET
    status: str | UnsetType | None = UNSET
    error: SessionError | UnsetType | None = UNSET
    tag: str | UnsetType | None = UNSET
    command_line: tuple[str, ...] | UnsetType = UNSET
    model: ModelInfo | UnsetType | None = UNSET
    backend: BackendInfo | UnsetType | None = UNSET
    run: RunConfig | UnsetType | None = UNSET
    clock: ClockInfo | UnsetType | None = UNSET
    #: ``{phase: [start_ns, end_ns]}`` (warmup, measured, profile)
    phases: dict[str, tuple[int, ...]] | UnsetType | None = UNSET
    failures: tuple[Failure, ...] | UnsetType = UNSET
    fingerprint: str | UnsetType | None = UNSET
    worker: WorkerUsage | UnsetType | None = UNSET
    telemetry: TelemetryInfo | UnsetType | None = UNSET
    kernel_capture: KernelCaptureInfo | UnsetType = UNSET
    aaco_process: ProcessUsage | UnsetType = UNSET
    imports: tuple[ImportInfo, ...] | UnsetType = UNSET
    #: rows of profiler/ops.parquet before the first import
    native_ops_rows: int | UnsetType = UNSET
    #: ``kind: "serving"`` bundles: the server, load, prompts and SLOs (docs/bundle.md)
    serving: dict[str, Any] | UnsetType | None = UNSET


def read_session_meta(bundle_dir: str | os.PathLike[str]) -> SessionMeta:
    """The ``session.json`` of ``bundle_dir``. FileNotFoundError when it has none (as
    :func:`aaco.session.bundle.read_json`); BundleError when it is not JSON, has no
    supported ``format_version`` or holds a value of another type than its record."""
    path = Path(bundle_dir) / SESSION_FILE
    text = path.read_bytes()
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise BundleError(f"{path}: unreadable JSON ({exc})") from exc
    if not isinstance(obj, dict) or "format_version" not in obj:
        raise BundleError(f"{path}: {SESSION_FILE} has no format_version")
    if obj["format_version"] not in SUPPORTED_FORMAT_VERSIONS:
        raise BundleError(
            f"{path}: bundle format_version {obj['format_version']} is not supported "
            f"(this AACO reads {list(SUPPORTED_FORMAT_VERSIONS)})"
        )
    try:
        return SessionMeta.from_data(obj)
    except msgspec.ValidationError as exc:
        raise BundleError(f"{path}: {SESSION_FILE} is malformed ({exc})") from exc


def write_session_meta(bundle_dir: str | os.PathLike[str], meta: SessionMeta) -> None:
    """Write ``meta`` as ``bundle_dir/session.json``, atomically, in the bundle's JSON
    style: the bytes :func:`~aaco.session.bundle.atomic_write_json` writes for the same
    data."""
    atomic_write_json(Path(bundle_dir) / SESSION_FILE, meta.to_data())


def save_session(bundle_dir: str | os.PathLike[str], meta: SessionMeta | Mapping[str, Any]) -> None:
    """The one writer of ``session.json``: ``meta`` (a record, or the JSON object a stage
    built) is checked against :class:`SessionMeta` and written atomically. A value of the
    wrong type (a hand-edited bundle, or AACO's own bug) is a BundleError, raised before
    anything reaches the file."""
    if isinstance(meta, SessionMeta):
        record = meta
    else:
        try:
            record = SessionMeta.from_data(meta)
        except msgspec.ValidationError as exc:
            # an existing bundle edited by hand (aaco import --into, aaco analyze): say so
            path = Path(bundle_dir) / SESSION_FILE
            raise BundleError(f"{path}: {SESSION_FILE} is malformed ({exc})") from exc
    write_session_meta(bundle_dir, record)


def add_failure(bundle_dir: str | os.PathLike[str], stage: str, error: str) -> None:
    """Append ``{stage, error}`` (at most 400 characters) to ``session.json``'s failures: a
    side product failed, the bundle is kept."""
    path = Path(bundle_dir) / SESSION_FILE
    data = json.loads(path.read_text())
    data.setdefault("failures", []).append({"stage": stage, "error": error[:400]})
    save_session(bundle_dir, data)


# -- metrics/inference_summary.json -----------------------------------------------------------
class SummaryWorker(Record, frozen=True, kw_only=True):
    """``worker``: the worker's peak RSS, CPU and wall time."""

    max_rss_bytes: Real | UnsetType | None = UNSET
    max_rss_source: str | UnsetType | None = UNSET
    cpu_user_s: Real | UnsetType = UNSET
    cpu_system_s: Real | UnsetType = UNSET
    wall_s: Real | UnsetType = UNSET


class LatencySummary(Record, frozen=True, kw_only=True):
    """``latency_ms``: statistics of the measured iterations, in ms
    (:class:`aaco.analysis.stats.LatencyStats`)."""

    count: int | UnsetType = UNSET
    mean: Real | UnsetType = UNSET
    std: Real | UnsetType = UNSET
    min: Real | UnsetType = UNSET
    max: Real | UnsetType = UNSET
    p50: Real | UnsetType = UNSET
    p90: Real | UnsetType = UNSET
    p95: Real | UnsetType = UNSET
    p99: Real | UnsetType = UNSET
    cov: Real | UnsetType | None = UNSET
    iqr: Real | UnsetType = UNSET
    outliers: int | UnsetType = UNSET


class WarmupSummary(LatencySummary, frozen=True, kw_only=True):
    """``warmup``: the warmup iterations' statistics and how they compare."""

    first_iteration_ms: Real | UnsetType = UNSET
    effect_pct: Real | UnsetType | None = UNSET
    first_iteration_vs_p50: Real | UnsetType | None = UNSET


class Throughput(Record, frozen=True, kw_only=True):
    """``throughput``: iterations and items per second (items: null when the batch is
    unknown)."""

    batch: int | UnsetType | None = UNSET
    iterations_per_s: Real | UnsetType | None = UNSET
    items_per_s: Real | UnsetType | None = UNSET


class Trend(Record, frozen=True, kw_only=True):
    """``noise.trend``: a monotonic drift across the measured iterations."""

    kendall_tau: Real | UnsetType = UNSET
    p_value: Real | UnsetType = UNSET
    first_to_last_quarter_shift: Real | UnsetType = UNSET
    detected: bool | UnsetType = UNSET


class Noise(Record, frozen=True, kw_only=True):
    """``noise``: the measurement's spread and trend."""

    cov: Real | UnsetType | None = UNSET
    cov_threshold: Real | UnsetType = UNSET
    noisy: bool | UnsetType = UNSET
    trend: Trend | UnsetType | None = UNSET


class TelemetrySummary(Record, frozen=True, kw_only=True):
    """``telemetry``: the system sampler's readings over the measured phase
    (:func:`aaco.analysis.telemetry.summarize_system`)."""

    samples: int | UnsetType = UNSET
    scope: str | UnsetType = UNSET
    window_ns: tuple[int, ...] | UnsetType | None = UNSET
    proc_cpu_pct_mean: Real | UnsetType | None = UNSET
    proc_cpu_pct_max: Real | UnsetType | None = UNSET
    proc_rss_peak_bytes: int | UnsetType | None = UNSET
    proc_threads_max: int | UnsetType | None = UNSET
    ctx_switches_voluntary_per_s: Real | UnsetType | None = UNSET
    ctx_switches_involuntary_per_s: Real | UnsetType | None = UNSET
    ctx_switches_per_s: Real | UnsetType | None = UNSET
    minor_faults_per_s: Real | UnsetType | None = UNSET
    major_faults_per_s: Real | UnsetType | None = UNSET
    sys_cpu_pct_mean: Real | UnsetType | None = UNSET
    load_1m_max: Real | UnsetType | None = UNSET
    cpu_freq_mhz_mean: Real | UnsetType | None = UNSET
    cpu_freq_mhz_min: Real | UnsetType | None = UNSET
    cpu_freq_mhz_max: Real | UnsetType | None = UNSET


class InferenceSummary(Record, frozen=True, kw_only=True):
    """``metrics/inference_summary.json`` (docs/metrics.md). ``profile`` differs by
    runner (ONNX Runtime's coverage figures, torch.profiler's trace) and stays an object."""

    status: str | UnsetType = UNSET
    worker: SummaryWorker | UnsetType | None = UNSET
    latency_ms: LatencySummary | UnsetType | None = UNSET
    throughput: Throughput | UnsetType | None = UNSET
    warmup: WarmupSummary | UnsetType | None = UNSET
    noise: Noise | UnsetType | None = UNSET
    measured_wall_s: Real | UnsetType = UNSET
    warnings: tuple[str, ...] | UnsetType = UNSET
    profile: dict[str, Any] | UnsetType | None = UNSET
    telemetry: TelemetrySummary | UnsetType | None = UNSET
