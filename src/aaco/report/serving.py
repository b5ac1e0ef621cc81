"""The serving part of the report model (``kind: "serving"`` bundles of ``aaco llm bench`` and
``aaco llm run``), and the per-request data the serving charts and trace tracks draw.

:func:`serving_section` is the report's ``serving`` object: ``metrics/serving_summary.json``
(its ``points``, ``sweep`` and ``warnings``, each point given its ``label``), the session's
``serving`` configuration (``config``) and the peaks of the server's ``/metrics``
(``server_metrics``). :func:`serving_telemetry` is the report's ``telemetry`` of such a
bundle: the system sampler's summary of the process it watched. The other functions read the
``serving_*`` and ``server_metrics`` tables for the HTML charts and the Perfetto tracks.
Metric definitions: :mod:`aaco.analysis.serving`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# the one definition of the inter-token gaps, the samples of the summary's itl_ms
from aaco.analysis.serving import chunk_gaps
from aaco.analysis.telemetry import summarize_system
from aaco.session.bundle import Session
from aaco.session.paths import SERVING_SUMMARY_FILE

__all__ = [
    "GENERATE_MODE",
    "KNEE_MARK",
    "SERVING_KIND",
    "PointTable",
    "RequestSpan",
    "fmt_count",
    "fmt_short",
    "generation_load_description",
    "generation_load_label",
    "health_note",
    "in_flight",
    "is_generate_load",
    "is_in_process",
    "is_serving",
    "itl_samples",
    "load_description",
    "load_label",
    "measured_values",
    "point_label",
    "point_labels",
    "point_tables",
    "point_windows",
    "request_spans",
    "server_line",
    "server_series",
    "serving_section",
    "serving_telemetry",
    "sweep_line",
    "telemetry_line",
]

SERVING_KIND = "serving"
#: the server metrics drawn and summed per scrape (several engines or models each expose one
#: series: the server's total is their sum); KV-cache usage is the fullest engine's
_SUMMED = ("running", "waiting")
_MAXED = ("kv_cache_usage",)
_COUNTERS = ("prompt_tokens", "generation_tokens", "prefix_cache_queries", "prefix_cache_hits")


def is_serving(session: Session) -> bool:
    """Whether the bundle is a serving benchmark (``aaco llm bench`` / ``aaco llm run``)."""
    return session.meta.get("kind") == SERVING_KIND


#: ``serving.load.mode`` of an in-process generation (``aaco llm run``)
GENERATE_MODE = "generate"


def is_generate_load(load: Any) -> bool:
    """Whether a load (``session.json`` ``serving.load``, a point's ``load``) is an in-process
    generation's: ``mode: "generate"``, no concurrency or rate."""
    return isinstance(load, dict) and load.get("mode") == GENERATE_MODE


def _n(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else "?"


def generation_load_label(load: dict[str, Any]) -> str:
    """A generate load's short name: ``batch=1, 32+16 tokens`` (prompt + output tokens)."""
    tokens = f"{_n(load.get('prompt_tokens'))}+{_n(load.get('output_tokens'))}"
    return f"batch={_n(load.get('batch'))}, {tokens} tokens"


def generation_load_description(load: dict[str, Any]) -> str:
    """A generate load in words: batch, prompt and output tokens, generations, warmup."""
    text = (
        f"batch {_n(load.get('batch'))}, {_n(load.get('prompt_tokens'))} prompt + "
        f"{_n(load.get('output_tokens'))} output tokens, {_n(load.get('iterations'))} "
        "generations"
    )
    warmup = load.get("warmup")
    return text + (f" (+ {_n(warmup)} warmup)" if warmup else "")


def is_in_process(config: dict[str, Any]) -> bool:
    """Whether a ``serving`` configuration is an in-process run (no server, no HTTP client)."""
    return config.get("endpoint") == "in-process" or is_generate_load(config.get("load"))


def load_label(load: Any) -> str:
    """A load point's short name, as ``aaco llm bench`` prints it: ``concurrency=4``,
    ``rate=40/s (poisson)``; an ``aaco llm run`` generation's: ``batch=1, 32+16 tokens``."""
    if not isinstance(load, dict):
        return "unknown load"
    if is_generate_load(load):
        return generation_load_label(load)
    if load.get("concurrency") is not None:
        return f"concurrency={load['concurrency']}"
    if load.get("rate") is not None:
        return f"rate={load['rate']:g}/s ({load.get('arrival') or 'unknown arrival'})"
    return "unknown load"


def load_description(load: Any) -> str:
    """A load in words: loop kind, level, request count or duration, warmup; or an in-process
    generation's batch, tokens and generations."""
    if not isinstance(load, dict):
        return "unknown"
    if is_generate_load(load):
        return "in-process generation, " + generation_load_description(load)
    if load.get("concurrency") is not None:
        text = f"closed loop, concurrency {load['concurrency']}"
    elif load.get("rate") is not None:
        text = f"open loop, {load['rate']:g} requests/s, {load.get('arrival') or '?'} arrivals"
        if load.get("arrival") == "gamma" and load.get("burstiness") is not None:
            text += f" (burstiness {load['burstiness']:g})"
    else:
        return "unknown"
    if load.get("requests") is not None:
        text += f", {load['requests']} requests"
    if load.get("duration_s") is not None:
        text += f", {load['duration_s']:g} s"
    warm = [
        f"{load['warmup_requests']} requests" if load.get("warmup_requests") else "",
        f"{load['warmup_s']:g} s" if load.get("warmup_s") else "",
    ]
    if any(warm):
        text += f" (+ warmup {' / '.join(w for w in warm if w)})"
    return text


def point_label(point: dict[str, Any]) -> str:
    """The point's label as its summary names it; a generation's from its load, which says
    more than the summary's (``batch=1``)."""
    load = point.get("load")
    if is_generate_load(load):
        return load_label(load)
    return str(point.get("label") or load_label(load))


def _summary_points(session: Session) -> list[dict[str, Any]]:
    summary = session.json_file(SERVING_SUMMARY_FILE)
    points = summary.get("points") if isinstance(summary, dict) else None
    return [p for p in points if isinstance(p, dict)] if isinstance(points, list) else []


def point_labels(session: Session) -> dict[int, str]:
    """Each load point's label by its index (``serving_summary.json``)."""
    return {
        int(p["point"]): point_label(p)
        for p in _summary_points(session)
        if isinstance(p.get("point"), int)
    }


def _phase_windows(meta: dict[str, Any]) -> dict[str, tuple[int, int]]:
    phases = meta.get("phases")
    out: dict[str, tuple[int, int]] = {}
    if isinstance(phases, dict):
        for name, span in phases.items():
            if (
                isinstance(span, list)
                and len(span) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in span)
            ):
                out[str(name)] = (span[0], span[1])
    return out


def point_windows(meta: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """Each load point's window (ns) by its index: ``session.json`` ``phases.point<N>``."""
    return {
        int(name[5:]): span
        for name, span in _phase_windows(meta).items()
        if name.startswith("point") and name[5:].isdigit()
    }


# -- server metrics ---------------------------------------------------------------------------


def server_series(table: pa.Table | None) -> dict[str, list[tuple[int, float]]]:
    """Per AACO metric name, its (scrape time ns, value) samples for the server as a whole:
    running and waiting summed over the label sets of one scrape, KV-cache usage their
    maximum, counters summed."""
    if table is None or table.num_rows == 0:
        return {}
    acc: dict[str, dict[int, float]] = {}
    cols = [table.column(c).to_pylist() for c in ("t_ns", "metric", "value")]
    for t, metric, value in zip(*cols, strict=True):
        if metric is None or value is None or value != value:  # NaN: a gap, not a value
            continue
        per_t = acc.setdefault(str(metric), {})
        if metric in _MAXED:
            per_t[t] = max(per_t.get(t, value), value)
        else:
            per_t[t] = per_t.get(t, 0.0) + value
    return {m: sorted(v.items()) for m, v in acc.items()}


def _peak(samples: Sequence[tuple[int, float]], window: tuple[int, int] | None) -> float | None:
    vals = [v for t, v in samples if window is None or window[0] <= t <= window[1]]
    return max(vals) if vals else None


def _delta(samples: Sequence[tuple[int, float]]) -> float | None:
    return samples[-1][1] - samples[0][1] if len(samples) >= 2 else None


def _server_metrics(session: Session, points: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    table = session.table("server_metrics")
    if table is None or table.num_rows == 0:
        return None
    series = server_series(table)
    scrapes = sorted(set(table.column("t_ns").to_pylist()))
    out: dict[str, Any] = {"scrapes": len(scrapes)}
    for name in (*_SUMMED, *_MAXED):
        out[f"{name}_max"] = _peak(series.get(name, []), None)
    for name in _COUNTERS:
        out[f"{name}_delta"] = _delta(series.get(name, []))
    queries, hits = out["prefix_cache_queries_delta"], out["prefix_cache_hits_delta"]
    rate = series.get("prefix_cache_hit_rate")
    if queries and hits is not None:
        out["prefix_cache_hit_rate"] = hits / queries
    elif rate:
        out["prefix_cache_hit_rate"] = sum(v for _, v in rate) / len(rate)
    else:
        out["prefix_cache_hit_rate"] = None
    windows = point_windows(session.meta)
    by_point = []
    for p in points:
        window = windows.get(p["point"]) if isinstance(p.get("point"), int) else None
        if window is None:
            continue
        row: dict[str, Any] = {
            "point": p.get("point"),
            "scrapes": sum(1 for t in scrapes if window[0] <= t <= window[1]),
        }
        for name in (*_SUMMED, *_MAXED):
            row[f"{name}_max"] = _peak(series.get(name, []), window)
        by_point.append(row)
    out["by_point"] = by_point
    return out


def serving_telemetry(session: Session) -> dict[str, Any] | None:
    """The system sampler's summary over the measured phase (the report's ``telemetry``),
    with the ``process`` it watched (``server`` or ``client``) and its ``pid``."""
    events = session.system_events()
    if events is None or events.num_rows == 0:
        return None
    window = _phase_windows(session.meta).get("measured")
    out = summarize_system(events, window)
    info = session.meta.get("telemetry")
    info = info if isinstance(info, dict) else {}
    # the sampler watched the server (when its pid was known) or the client itself
    out["process"] = info.get("process")
    out["pid"] = info.get("pid")
    return out


def serving_section(session: Session) -> dict[str, Any] | None:
    """The report's ``serving`` object (docs/report-json.md); None for other bundles."""
    if not is_serving(session):
        return None
    summary = session.json_file(SERVING_SUMMARY_FILE)
    summary = summary if isinstance(summary, dict) else {}
    points = [{**p, "label": point_label(p)} for p in _summary_points(session)]
    config = session.meta.get("serving")
    warnings = summary.get("warnings")
    sweep = summary.get("sweep")
    return {
        "config": config if isinstance(config, dict) else {},
        "summary_present": bool(summary),
        "points": points,
        "sweep": sweep if isinstance(sweep, dict) else None,
        "warnings": [str(w) for w in warnings] if isinstance(warnings, list) else [],
        "server_metrics": _server_metrics(session, points),
    }


# -- per-request data for the charts and the trace --------------------------------------------


@dataclass(frozen=True)
class RequestSpan:
    """One request's moments on the client's clock (ns): intended send, send, first
    generated token, first answer token, end; None when unknown."""

    point: int
    request: int
    phase: str
    status: str
    intended_ns: int | None
    sent_ns: int
    first_token_ns: int | None
    first_content_ns: int | None
    end_ns: int | None
    output_tokens: int | None
    error: str | None

    @property
    def queued_ns(self) -> int:
        """How late the client sent it (0 when on time or the intention is unknown)."""
        if self.intended_ns is None:
            return 0
        return max(0, self.sent_ns - self.intended_ns)

    @property
    def start_ns(self) -> int:
        """Its first moment: the intended send when that came first, else the send."""
        return self.sent_ns - self.queued_ns


_SPAN_COLUMNS = (
    "point",
    "request",
    "phase",
    "status",
    "intended_ns",
    "sent_ns",
    "first_token_ns",
    "first_content_ns",
    "end_ns",
    "output_tokens",
    "error",
)


def request_spans(session: Session) -> list[RequestSpan]:
    """Every request of the bundle (warmup included), in the order they were sent."""
    t = session.table("serving_requests")
    if t is None or t.num_rows == 0:
        return []
    cols = [t.column(c).to_pylist() for c in _SPAN_COLUMNS]
    spans = [RequestSpan(*row) for row in zip(*cols, strict=True)]
    spans.sort(key=lambda s: (s.sent_ns, s.point, s.request))
    return spans


def in_flight(spans: Sequence[RequestSpan]) -> list[tuple[int, int]]:
    """(time ns, requests in flight from then on): one step at each send and each end (an
    end before a send at the same instant); requests without an end are left out."""
    events = [(s.sent_ns, 1) for s in spans if s.end_ns is not None]
    events += [(s.end_ns, -1) for s in spans if s.end_ns is not None]
    events.sort(key=lambda e: (e[0], e[1]))
    out: list[tuple[int, int]] = []
    n = 0
    for t, d in events:
        n += d
        if out and out[-1][0] == t:
            out[-1] = (t, n)
        else:
            out.append((t, n))
    return out


def itl_samples(session: Session, point: int) -> list[float]:
    """The pooled inter-token latencies (ms, one per token) of the point's measured ok
    requests: the samples of its summary's ``itl_ms``."""
    requests = session.table("serving_requests")
    chunks = session.table("serving_chunks")
    if requests is None or chunks is None or chunks.num_rows == 0:
        return []
    chunks = chunks.filter(pc.equal(chunks.column("point"), point))
    keys = {
        (p, r)
        for p, r, ph, st in zip(
            *(requests.column(c).to_pylist() for c in ("point", "request", "phase", "status")),
            strict=True,
        )
        if p == point and ph == "measured" and st == "ok"
    }
    itl, _, _ = chunk_gaps(chunks, keys)
    return [float(v) / 1e6 for v in itl]


def measured_values(session: Session, column: str, point: int, ok_only: bool = True) -> list[float]:
    """A ``serving_requests`` column of the point's measured (ok) requests, ns -> ms."""
    t = session.table("serving_requests")
    if t is None or t.num_rows == 0:
        return []
    cols = [t.column(c).to_pylist() for c in ("point", "phase", "status", column)]
    return [
        float(v) / 1e6
        for p, ph, st, v in zip(*cols, strict=True)
        if p == point and ph == "measured" and (st == "ok" or not ok_only) and v is not None
    ]


# -- what every renderer shows: the per-point tables and lines, as text ------------------------


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _dist(obj: Any, name: str, key: str) -> float | None:
    d = obj.get(name) if isinstance(obj, dict) else None
    return _num(d.get(key)) if isinstance(d, dict) else None


def fmt_short(v: Any, scale: float = 1.0) -> str:
    """A figure in about 3 significant digits (``41.3``, ``2.51``, ``0.640``, ``1,134``) times
    ``scale``; 'unknown' when missing (never 0). Serving tables have many columns: each
    must stay narrow."""
    x = _num(v)
    if x is None:
        return "unknown"
    x *= scale
    a = abs(x)
    if a == 0:
        return "0"
    if a >= 100:
        return f"{x:,.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def fmt_count(v: Any) -> str:
    """A count (requests, tokens, scrapes): an integer, or as measured when fractional."""
    x = _num(v)
    if x is None:
        return "unknown"
    return f"{x:,.0f}" if x == int(x) else fmt_short(x)


@dataclass(frozen=True)
class PointTable:
    """One table of figures per load point: ``headers`` may hold line breaks; the first
    column names the point (the sweep's knee marked ``◀``), the others are numbers."""

    key: str
    title: str
    headers: list[str]
    rows: list[list[str]]


#: marks the sweep's knee in the tables' first column
KNEE_MARK = "◀"


def _names(sv: dict[str, Any]) -> list[str]:
    knee = (sv.get("sweep") or {}).get("knee")
    k = knee.get("index") if isinstance(knee, dict) else None
    return [
        f"{p['label']} {KNEE_MARK}" if i == k else p["label"] for i, p in enumerate(sv["points"])
    ]


def _latency_table(sv: dict[str, Any]) -> PointTable:
    points = sv["points"]
    metrics = [
        ("TTFT", "ttft_ms", ("p50", "p99")),
        *([("TTFR", "ttfr_ms", ("p50",))] if any(p.get("ttfr_ms") for p in points) else []),
        ("TPOT", "tpot_ms", ("p50", "p99")),
        ("ITL", "itl_ms", ("p50", "p99")),
        ("ICL", "icl_ms", ("p50",)),
        ("E2E", "e2e_ms", ("p50", "p99")),
    ]
    headers = ["load", "ok/\nfail", *(f"{n}\n{q}" for n, _, qs in metrics for q in qs)]
    rows = []
    for name, p in zip(_names(sv), points, strict=True):
        req = p.get("requests") or {}
        row = [name, f"{fmt_count(req.get('ok'))}/{fmt_count(req.get('failed'))}"]
        row += [fmt_short(_dist(p, key, q)) for _, key, qs in metrics for q in qs]
        rows.append(row)
    title = "Latency per load point, ms (measured requests that succeeded)"
    return PointTable("latency", title, headers, rows)


def _throughput_table(sv: dict[str, Any]) -> PointTable:
    points = sv["points"]
    slo = any("goodput_requests_per_s" in (p.get("throughput") or {}) for p in points)
    headers = ["load", "output\ntok/s", "total\ntok/s", "requests\n/s"]
    headers += ["goodput\nreq/s", "good\n%"] if slo else []
    headers += ["tokens\n/chunk", "output\ntokens", "span\ns"]
    # GPU energy per load point (the GPU collector's counters over the point's window)
    energy = any(isinstance(p.get("gpu"), dict) for p in points)
    headers += ["GPU\nW", "GPU J\n/token"] if energy else []
    rows = []
    for name, p in zip(_names(sv), points, strict=True):
        tp = p.get("throughput") or {}
        row = [
            name,
            fmt_short(tp.get("output_tokens_per_s")),
            fmt_short(tp.get("total_tokens_per_s")),
            fmt_short(tp.get("requests_per_s")),
        ]
        if slo:
            row += [
                fmt_short(tp.get("goodput_requests_per_s")),
                fmt_short(tp.get("good_fraction"), 100),
            ]
        row += [
            fmt_short(_dist(p, "tokens_per_chunk", "mean")),
            fmt_count(tp.get("output_tokens")),
            fmt_short(p.get("duration_s")),
        ]
        if energy:
            g = p.get("gpu") if isinstance(p.get("gpu"), dict) else {}
            row += [fmt_short(g.get("avg_power_w")), fmt_short(g.get("joules_per_output_token"))]
        rows.append(row)
    return PointTable("throughput", "Throughput per load point", headers, rows)


def _open_loop_table(sv: dict[str, Any]) -> PointTable | None:
    rows = []
    for name, p in zip(_names(sv), sv["points"], strict=True):
        if not (p.get("load") or {}).get("rate"):
            continue
        rate = p.get("rate") or {}
        rows.append(
            [
                name,
                fmt_short(rate.get("target")),
                fmt_short(rate.get("achieved")),
                fmt_short(_dist(p, "dispatch_delay_ms", "p50")),
                fmt_short(_dist(p, "dispatch_delay_ms", "p99")),
                fmt_short(_dist(p, "ttft_intended_ms", "p50")),
                fmt_short(_dist(p, "ttft_intended_ms", "p99")),
                fmt_short(_dist(p, "e2e_intended_ms", "p99")),
            ]
        )
    if not rows:
        return None
    headers = [
        "load",
        "target\nreq/s",
        "achieved\nreq/s",
        "dispatch\ndelay\np50 ms",
        "dispatch\ndelay\np99 ms",
        "TTFT from\nintended\np50 ms",
        "TTFT from\nintended\np99 ms",
        "E2E from\nintended\np99 ms",
    ]
    title = "Open loop: the schedule against the sends (latency from the intended send)"
    return PointTable("open_loop", title, headers, rows)


def _reconciled(tokens: dict[str, Any], name: str) -> str:
    v = tokens.get(name)
    if _num(v) is None:
        return "unknown"
    d = _num((tokens.get("relative_difference") or {}).get(name))
    # the chunk count differs from usage by design when chunks carry several tokens
    return fmt_count(v) + (f" ({d:.1%})" if d is not None and name != "chunk_count" else "")


def _tokens_table(sv: dict[str, Any]) -> PointTable:
    headers = [
        "load",
        "usage",
        "chunks",
        "re-tokenized",
        "requested",
        "token\nchunks",
        "counted from",
    ]
    rows = []
    for name, p in zip(_names(sv), sv["points"], strict=True):
        tokens = p.get("tokens") or {}
        source = tokens.get("token_source") or {}
        # requests per source; a zero count names no source (a summary whose requests had
        # none counts "None" 0)
        counted = (
            ", ".join(f"{k} {v}" for k, v in source.items() if v)
            if isinstance(source, dict)
            else ""
        )
        rows.append(
            [
                name,
                *(
                    _reconciled(tokens, k)
                    for k in ("usage", "chunks", "retokenized", "requested", "chunk_count")
                ),
                counted or "unknown",
            ]
        )
    title = "Output tokens by source, ok requests (difference from the server's usage)"
    return PointTable("tokens", title, headers, rows)


def _client_known(points: Sequence[dict[str, Any]]) -> bool:
    """Whether any point knows a client figure (CPU %, event-loop lag): an in-process run
    has no client, and a bundle may lack them."""
    return any(
        _num((p.get("client") or {}).get("cpu_pct")) is not None
        or any(_dist(p.get("client"), "loop_lag_ms", q) is not None for q in ("p50", "p99"))
        for p in points
    )


def _health_table(sv: dict[str, Any]) -> PointTable | None:
    """The client's own cost and lateness, and the server's queue, per point; the client's
    columns only when some figure of them is known, None when neither is."""
    by_point = {r.get("point"): r for r in (sv.get("server_metrics") or {}).get("by_point") or []}
    client = _client_known(sv["points"])
    if not client and not by_point:
        return None
    headers = ["load"]
    if client:
        headers += ["client\nCPU %", "loop lag\np50 ms", "loop lag\np99 ms"]
    if by_point:
        headers += ["server running\nmax", "server waiting\nmax", "KV cache\nmax %", "scrapes"]
    rows = []
    for name, p in zip(_names(sv), sv["points"], strict=True):
        row = [name]
        if client:
            health = p.get("client") or {}
            row += [
                fmt_short(health.get("cpu_pct")),
                fmt_short(_dist(health, "loop_lag_ms", "p50")),
                fmt_short(_dist(health, "loop_lag_ms", "p99")),
            ]
        if by_point:
            sm = by_point.get(p.get("point")) or {}
            row += [
                fmt_count(sm.get("running_max")),
                fmt_count(sm.get("waiting_max")),
                fmt_short(sm.get("kv_cache_usage_max"), 100),
                fmt_count(sm.get("scrapes")),
            ]
        rows.append(row)
    if client:
        title = "Client health" + (" and the server's queue (/metrics)" if by_point else "")
    else:
        title = "The server's queue (/metrics)"
    return PointTable("health", title + " per load point", headers, rows)


def health_note(sv: dict[str, Any]) -> str | None:
    """Why the client's health is not shown, for a benchmark that had a client; None when it
    is shown, or the run had no client (in-process)."""
    if not sv["points"] or _client_known(sv["points"]) or is_in_process(sv["config"]):
        return None
    return "health unknown (no CPU or event-loop lag figure in this bundle)"


def point_tables(sv: dict[str, Any]) -> list[PointTable]:
    """The tables of a ``serving`` section, in the order the reports show them: latency,
    throughput, open loop (when a point is one), tokens, client and server health (when
    some figure of it is known)."""
    if not sv["points"]:
        return []
    tables = [_latency_table(sv), _throughput_table(sv), _open_loop_table(sv)]
    # client and server health: left out when no figure of it is known (an in-process run)
    tables += [_tokens_table(sv), _health_table(sv)]
    return [t for t in tables if t is not None]


def sweep_line(sv: dict[str, Any]) -> str | None:
    """The sweep and its knee in words; None without a sweep."""
    sweep = sv.get("sweep")
    if not isinstance(sweep, dict):
        return None
    param = sweep.get("parameter")
    values = ", ".join(fmt_count(v) for v in sweep.get("values") or [])
    text = f"{param} = {values}: "
    knee = sweep.get("knee")
    if isinstance(knee, dict):
        text += (
            f"knee at {param}={fmt_count(knee.get('load'))} "
            f"({fmt_short(knee.get('throughput'))} output tok/s, {KNEE_MARK} in the tables); the "
            "next step raised throughput by "
            f"{fmt_short(knee.get('next_gain_per_doubling'), 100)} % per doubling of load"
        )
    else:
        text += "no knee (fewer than three points, or throughput rose at every step)"
    if sweep.get("stopped_at_saturation"):
        text += "; stopped at saturation"
    return text


def server_line(sv: dict[str, Any]) -> str:
    """The server's /metrics over the run in words, or why there are none."""
    sm = sv.get("server_metrics")
    scrape = sv["config"].get("server_metrics")
    scrape = scrape if isinstance(scrape, dict) else {}
    if not sm:
        if is_in_process(sv["config"]):
            return "none (an in-process run has no server)"
        if scrape.get("error"):
            return f"/metrics not scraped ({scrape.get('url')}): {scrape['error']}"
        return "no /metrics samples in this bundle"
    return (
        f"running max {fmt_count(sm.get('running_max'))}, waiting max "
        f"{fmt_count(sm.get('waiting_max'))}, KV-cache usage max "
        f"{fmt_short(sm.get('kv_cache_usage_max'), 100)} %, prefix-cache hit rate "
        f"{fmt_short(sm.get('prefix_cache_hit_rate'), 100)} %, "
        f"{fmt_count(sm.get('generation_tokens_delta'))} tokens generated while scraped "
        f"({fmt_count(sm.get('scrapes'))} scrapes of /metrics)"
    )


def telemetry_line(telemetry: dict[str, Any] | None, requested: bool | None) -> str:
    """The watched process's CPU and memory in words, or why there are none."""
    if not telemetry:
        return "not requested" if requested is False else "no samples were recorded"
    who = {
        "server": "server",
        "client": "client (the server's pid unknown)",
        "generate": "generation (aaco llm run)",
    }.get(str(telemetry.get("process")), "watched")
    scope = "measured phase" if telemetry.get("scope") == "window" else "whole run"
    rss = _num(telemetry.get("proc_rss_peak_bytes"))
    return (
        f"{who} process CPU {fmt_short(telemetry.get('proc_cpu_pct_mean'))} % mean, peak RSS "
        f"{'unknown' if rss is None else fmt_short(rss / (1 << 20)) + ' MiB'}, system CPU "
        f"{fmt_short(telemetry.get('sys_cpu_pct_mean'))} % "
        f"({fmt_count(telemetry.get('samples'))} samples, {scope})"
    )
