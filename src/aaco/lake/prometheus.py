"""AACO's session results as Prometheus metrics, labelled like the GPU exporters' metrics so
that one PromQL query can put a model's latency next to its GPU's utilisation.

The input is fleet rows (:func:`aaco.lake.rows.fleet_row`: one dict per session, from a
sessions root or a lake); the output is the Prometheus text exposition format (0.0.4),
rendered by ``prometheus_client``, for node_exporter's textfile collector
(:func:`write_textfile`), a Pushgateway (:func:`push`) or stdout (:func:`render`).

What a scrape sees is a snapshot, not a history: Prometheus stamps the samples with the
scrape time, and node_exporter's textfile collector refuses samples that carry their own
timestamp (it skips the whole file: prometheus/node_exporter#769). So each configuration
series (model, backend, provider, batch, threads, run settings, tag, host and GPU: the
labels of :data:`SERIES_LABELS`) exports one session only, its newest *completed* one
(``created_utc``); the session's time is a value of its own,
``aaco_session_created_timestamp_seconds``. Two sessions with one label set would be a
duplicate sample, which the textfile collector and the Pushgateway reject. Failed and
running sessions are no results: they are only counted (``aaco_sessions{status=...}``).
A value the session does not record (None) is omitted, never written as 0: a 0 ms latency
would chart as a real, impossibly good measurement.

Labels (docs/prometheus.md gives the reasoning and sources):

* AACO's own (:data:`AACO_LABELS`): ``kind``, ``model``, ``backend``, ``provider``,
  ``batch``, ``threads``, ``settings`` (12 hex digits of the sha256 of the run settings),
  ``tag``, ``vendor``, ``arch``.
* ``hostname`` on every row: AMD's device-metrics-exporter (the lower-cased ``HOSTNAME``
  label of ROCm/device-metrics-exporter ``pkg/exporter/proto/exporterconfig.proto``) and
  dcgm-exporter since 4.8.3 (NVIDIA/dcgm-exporter#655) name the host so.
* NVIDIA rows, dcgm-exporter's names (NVIDIA/dcgm-exporter
  ``internal/pkg/rendermetrics/render_metrics.go``, ``collector/gpu_collector.go``):
  ``gpu`` (index), ``UUID`` (``GPU-...``), ``device`` (``nvidia<index>``), ``modelName``
  (the NVML name), and ``Hostname``, the host label before 4.8.3.
* AMD rows, device-metrics-exporter's names (``gpuagent_gpu_metrics.go``: enum names
  lower-cased): ``gpu_id`` (index) and ``gpu_uuid``.

Every sample of a family carries every label of the family; a label that does not apply or
is unknown is the empty string, which Prometheus treats as absent. Older node_exporters
refuse a family whose samples have different label names (prometheus/node_exporter#791).

Example::

    rows = [fleet_row(Session.load(p)) for p in iter_sessions(root)]
    text = render(rows)                              # the exposition text
    write_textfile(Path("/var/lib/node_exporter/aaco.prom"), rows)
    push(rows, "http://pushgateway:9091", grouping_key={"instance": "gpu-node-1"})
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.error import HTTPError, URLError

from prometheus_client import CollectorRegistry, generate_latest, push_to_gateway
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from aaco.errors import InputError, UsageError
from aaco.session.bundle import STATUS_COMPLETED

__all__ = [
    "AACO_LABELS",
    "AMD_LABELS",
    "HOST_LABELS",
    "INFO_LABELS",
    "NVIDIA_LABELS",
    "SERIES_LABELS",
    "latest_per_series",
    "metric_families",
    "push",
    "registry",
    "render",
    "series_labels",
    "write_textfile",
]

#: AACO's labels of a series: what was measured and how
AACO_LABELS = (
    "kind", "model", "backend", "provider", "batch", "threads", "settings", "tag", "vendor",
    "arch",
)  # fmt: skip
#: the host: ``hostname`` (AMD device-metrics-exporter; dcgm-exporter >= 4.8.3) on every
#: row, ``Hostname`` (dcgm-exporter < 4.8.3) on NVIDIA rows
HOST_LABELS = ("hostname", "Hostname")
#: dcgm-exporter's GPU labels, set on NVIDIA rows
NVIDIA_LABELS = ("gpu", "UUID", "device", "modelName")
#: AMD device-metrics-exporter's GPU labels, set on AMD rows
AMD_LABELS = ("gpu_id", "gpu_uuid")
#: the labels of every result metric: one label set per configuration series
SERIES_LABELS = (*AACO_LABELS, *HOST_LABELS, *NVIDIA_LABELS, *AMD_LABELS)
#: ``aaco_session_info``'s labels beyond the series': which session, what software, which
#: driver (dcgm-exporter's label counter ``DCGM_FI_DRIVER_VERSION``, renamed
#: ``DCGM_FI_SYSTEM_DRIVER_VERSION`` in 4.9.0; AMD's ``driver_version``). On the info metric
#: only: a driver or package upgrade must not start a new result series.
INFO_LABELS = (
    *SERIES_LABELS, "session_id", "framework", "device_name", "fingerprint", "hardware_fingerprint",
    "model_sha256", "aaco_version", "onnxruntime_version", "torch_version", "driver_version",
    "DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION",
)  # fmt: skip

_SETTINGS_DIGITS = 12


@dataclass(frozen=True)
class _Gauge:
    """One exported figure: a fleet-row column, the factor to its base unit, and the
    ``quantile`` label value when the family holds several quantiles."""

    name: str
    help: str
    column: str
    scale: float = 1.0
    quantile: str | None = None


_LATENCY_HELP = (
    "Latency of one measured inference iteration (one batch), in seconds: the quantile over "
    "the measured iterations of the newest completed AACO session of this configuration "
    "(AACO's p50/p90/p99)."
)
_TTFT_HELP = (
    "Time to first token of a serving benchmark, in seconds: the quantile over its requests "
    "at the first load point (the knee's for a sweep), newest completed AACO session of "
    "this configuration."
)

#: the result gauges, grouped into families by name (in this order)
_GAUGES = (
    _Gauge("aaco_inference_latency_seconds", _LATENCY_HELP, "p50_ms", 1e-3, "0.5"),
    _Gauge("aaco_inference_latency_seconds", _LATENCY_HELP, "p90_ms", 1e-3, "0.9"),
    _Gauge("aaco_inference_latency_seconds", _LATENCY_HELP, "p99_ms", 1e-3, "0.99"),
    _Gauge(
        "aaco_inference_throughput_items_per_second",
        "Inference throughput in items (batch elements) per second over the measured "
        "iterations of the newest completed AACO session of this configuration.",
        "throughput",
    ),
    _Gauge(
        "aaco_inference_iterations_per_second",
        "Measured inference iterations (batches) per second of the newest completed AACO "
        "session of this configuration.",
        "iterations_per_s",
    ),
    _Gauge(
        "aaco_inference_measured_iterations",
        "Number of measured iterations the latency quantiles and throughput are over "
        "(newest completed AACO session of this configuration).",
        "iterations",
    ),
    _Gauge("aaco_serving_ttft_seconds", _TTFT_HELP, "ttft_p50_ms", 1e-3, "0.5"),
    _Gauge("aaco_serving_ttft_seconds", _TTFT_HELP, "ttft_p99_ms", 1e-3, "0.99"),
    _Gauge(
        "aaco_serving_output_tokens_per_second",
        "Output tokens per second of a serving benchmark at its first load point (the "
        "knee's for a sweep), newest completed AACO session of this configuration.",
        "output_tokens_per_s",
    ),
)

_CREATED = (
    "aaco_session_created_timestamp_seconds",
    "Unix time (seconds) the exported AACO session was created: how old the figures of "
    "this series are.",
)
_INFO = (
    "aaco_session_info",
    "The AACO session each series exports (value always 1): its id, environment "
    "fingerprints, device name, driver and software versions.",
)
_SESSIONS = (
    "aaco_sessions",
    "AACO sessions read, by status; only the newest completed session of each "
    "configuration is exported as results.",
)


def _text(value: Any) -> str:
    """A label value: the empty string for unknown (Prometheus reads it as absent)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _number(value: Any) -> float | None:
    """A finite number, else None (omitted): NaN or infinity is no measurement."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _settings_hash(settings: Any) -> str:
    """12 hex digits of the sha256 of the run-settings string: a stable, short label for
    settings (inputs, preprocessing, device, compile) that would be unwieldy as labels."""
    if not isinstance(settings, str) or not settings:
        return ""
    return hashlib.sha256(settings.encode()).hexdigest()[:_SETTINGS_DIGITS]


def _created_seconds(row: Mapping[str, Any]) -> float | None:
    """The row's creation time as Unix seconds (``created``, else ``created_utc``); a naive
    time is UTC, as AACO writes them."""
    when = row.get("created")
    if not isinstance(when, datetime):
        text = row.get("created_utc")
        if not isinstance(text, str):
            return None
        try:
            when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def series_labels(row: Mapping[str, Any]) -> dict[str, str]:
    """The labels of ``row``'s series (:data:`SERIES_LABELS`, in order): AACO's, the host,
    and the GPU under its exporter's names (NVIDIA: dcgm-exporter's; AMD:
    device-metrics-exporter's); labels of the other vendor, or unknown, are empty."""
    vendor = _text(row.get("vendor"))
    host = _text(row.get("hostname"))
    index = _text(row.get("gpu_index"))
    labels = dict.fromkeys(SERIES_LABELS, "")
    labels.update(
        kind=_text(row.get("kind")),
        model=_text(row.get("model")),
        backend=_text(row.get("backend")),
        provider=_text(row.get("provider")),
        batch=_text(row.get("batch")),
        threads=_text(row.get("threads")),
        settings=_settings_hash(row.get("settings")),
        tag=_text(row.get("tag")),
        vendor=vendor,
        arch=_text(row.get("arch")),
        hostname=host,
    )
    if vendor == "nvidia":
        labels.update(
            Hostname=host,
            gpu=index,
            UUID=_text(row.get("gpu_uuid")),
            # dcgm-exporter names the device nvidia<gpu index> (GPUDevice in gpu_collector.go)
            device=f"nvidia{index}" if index else "",
            modelName=_text(row.get("device")),
        )
    elif vendor == "amd":
        labels.update(gpu_id=index, gpu_uuid=_text(row.get("gpu_uuid")))
    return labels


def _info_labels(row: Mapping[str, Any], series: Mapping[str, str]) -> dict[str, str]:
    """``aaco_session_info``'s labels of ``row`` (:data:`INFO_LABELS`, in order)."""
    vendor = series["vendor"]
    driver = _text(row.get("driver"))
    labels = {**series, **dict.fromkeys(INFO_LABELS[len(SERIES_LABELS) :], "")}
    labels.update(
        session_id=_text(row.get("session_id")),
        framework=_text(row.get("framework")),
        device_name=_text(row.get("device")),
        fingerprint=_text(row.get("fingerprint")),
        hardware_fingerprint=_text(row.get("hardware_fingerprint")),
        model_sha256=_text(row.get("model_sha256")),
        aaco_version=_text(row.get("aaco_version")),
        onnxruntime_version=_text(row.get("onnxruntime_version")),
        torch_version=_text(row.get("torch_version")),
        driver_version=driver,
    )
    if vendor == "nvidia":
        labels.update(DCGM_FI_DRIVER_VERSION=driver, DCGM_FI_SYSTEM_DRIVER_VERSION=driver)
    return labels


def latest_per_series(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The newest completed row of each series (by creation time, then session id), in
    label order: what a snapshot exports, one sample per label set."""
    newest: dict[tuple[str, ...], tuple[tuple[float, str], Mapping[str, Any]]] = {}
    for row in rows:
        if row.get("status") != STATUS_COMPLETED:
            continue
        key = tuple(series_labels(row).values())
        created = _created_seconds(row)
        order = (-math.inf if created is None else created, _text(row.get("session_id")))
        if key not in newest or order > newest[key][0]:
            newest[key] = (order, row)
    return [newest[key][1] for key in sorted(newest)]


def metric_families(rows: Iterable[Mapping[str, Any]]) -> list[Metric]:
    """The metric families of ``rows`` (fleet rows), families without samples left out."""
    rows = list(rows)
    latest = [(series_labels(row), row) for row in latest_per_series(rows)]
    families: dict[str, GaugeMetricFamily] = {}
    for gauge in _GAUGES:
        family = families.get(gauge.name)
        if family is None:
            extra = ["quantile"] if gauge.quantile is not None else []
            family = GaugeMetricFamily(gauge.name, gauge.help, labels=[*SERIES_LABELS, *extra])
            families[gauge.name] = family
        for labels, row in latest:
            value = _number(row.get(gauge.column))
            if value is None:
                continue
            values = list(labels.values())
            if gauge.quantile is not None:
                values.append(gauge.quantile)
            family.add_metric(values, value * gauge.scale)
    created = GaugeMetricFamily(*_CREATED, labels=list(SERIES_LABELS))
    info = GaugeMetricFamily(*_INFO, labels=list(INFO_LABELS))
    for labels, row in latest:
        seconds = _created_seconds(row)
        if seconds is not None:
            created.add_metric(list(labels.values()), seconds)
        info.add_metric(list(_info_labels(row, labels).values()), 1.0)
    sessions = GaugeMetricFamily(*_SESSIONS, labels=["status"])
    counts = Counter(_text(row.get("status")) or "unknown" for row in rows)
    for status in sorted(counts):
        sessions.add_metric([status], float(counts[status]))
    out: Sequence[Metric] = [*families.values(), created, info, sessions]
    return [family for family in out if family.samples]


class _RowsCollector(Collector):
    """A ``prometheus_client`` collector of fixed fleet rows (a snapshot, read once)."""

    def __init__(self, rows: Iterable[Mapping[str, Any]]) -> None:
        self._families = metric_families(rows)

    def collect(self) -> Iterator[Metric]:
        yield from self._families


def registry(rows: Iterable[Mapping[str, Any]]) -> CollectorRegistry:
    """A registry holding only ``rows``' metrics (none of the process's own)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_RowsCollector(rows))
    return reg


def render(rows: Iterable[Mapping[str, Any]]) -> str:
    """``rows``' metrics in the Prometheus text exposition format (0.0.4), no timestamps."""
    return generate_latest(registry(rows)).decode("utf-8")


def write_textfile(path: Path, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write ``rows``' metrics to ``path`` for node_exporter's textfile collector; returns
    the number of series exported.

    node_exporter reads only ``*.prom`` files, so ``path`` must end in ``.prom``
    (:class:`~aaco.errors.UsageError` otherwise). The text is written to a hidden temporary
    file in the same folder (which the collector ignores), flushed to disk and renamed over
    ``path``: a scrape sees the old file or the new one, never half of one. The file is
    world-readable (0644): node_exporter often runs as another user. The folder must exist:
    a mistyped textfile directory would otherwise be created and never scraped.
    """
    if not path.name.endswith(".prom") or path.name == ".prom":
        raise UsageError(
            f"{path}: a textfile collector file must end in .prom "
            "(node_exporter reads only *.prom files)"
        )
    folder = path.parent
    if not folder.is_dir():
        raise InputError(f"{folder}: no such directory (the textfile collector's directory)")
    rows = list(rows)
    data = render(rows).encode("utf-8")
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror or exc}") from exc
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return len(latest_per_series(rows))


def _one_line(text: str, limit: int = 200) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def push(
    rows: Iterable[Mapping[str, Any]],
    gateway: str,
    *,
    job: str = "aaco",
    grouping_key: Mapping[str, str] | None = None,
    timeout: float = 10.0,
) -> int:
    """Push ``rows``' metrics to the Pushgateway at ``gateway`` (a URL, ``http://`` when it
    has no scheme) under ``job`` and ``grouping_key``; returns the number of series.

    A PUT (``push_to_gateway``): the group's metrics are replaced, so a series that is no
    longer exported disappears rather than lingering with its last value. Any failure (the
    gateway unreachable, slow, or refusing the metrics) is an :class:`~aaco.errors.InputError`
    with a one-line message.
    """
    if not job:
        raise UsageError("the Pushgateway job name is empty")
    rows = list(rows)
    try:
        push_to_gateway(
            gateway,
            job=job,
            registry=registry(rows),
            grouping_key=dict(grouping_key or {}),
            timeout=timeout,
        )
    except HTTPError as exc:
        try:
            body = exc.read().decode("utf-8", "replace")
        except OSError:
            body = ""
        detail = f": {_one_line(body)}" if body.strip() else ""
        raise InputError(
            f"Pushgateway {gateway} refused the metrics: HTTP {exc.code} {exc.reason}{detail}"
        ) from None
    except URLError as exc:
        raise InputError(
            f"cannot reach Pushgateway {gateway}: {_one_line(str(exc.reason))}"
        ) from None
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot push to Pushgateway {gateway}: {_one_line(str(exc))}") from None
    return len(latest_per_series(rows))
