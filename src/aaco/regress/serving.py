"""Serving sessions (``kind: "serving"``, ``aaco llm bench`` / ``aaco llm run``) for the
regression stage: their load points and settings, the per-request samples ``aaco diff``
compares, the throughput windows, and the headline figures of ``aaco history`` and
``aaco check``.

Reads bundles; decides nothing. The definitions are docs/methodology.md, "Serving sessions".
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from aaco.analysis.serving import TOKEN_KINDS, summarize_point
from aaco.errors import BundleError, UsageError
from aaco.report.serving import load_label as _report_load_label
from aaco.session.bundle import Session
from aaco.session.paths import SERVING_SUMMARY_FILE
from aaco.session.schema import SERVING_REQUESTS

SERVING_KIND = "serving"


@dataclass(frozen=True)
class ServingMetric:
    """A per-sample figure ``aaco diff`` compares between two serving sessions."""

    name: str
    unit: str
    #: a rate: a regression is a drop
    higher_is_better: bool
    #: the per-request column (ns) it is read from; None for the throughput windows
    column: str | None
    #: the key of its distribution in a ``serving_summary.json`` point (None: throughput)
    summary_key: str | None
    description: str


#: what ``aaco diff`` compares, in the order it reports them
METRICS: dict[str, ServingMetric] = {
    m.name: m
    for m in (
        ServingMetric(
            "ttft", "ms", False, "ttft_ns", "ttft_ms", "time to first token, per request"
        ),
        ServingMetric(
            "tpot", "ms", False, "tpot_ns", "tpot_ms", "time per output token, per request"
        ),
        ServingMetric("e2e", "ms", False, "e2e_ns", "e2e_ms", "end-to-end latency, per request"),
        ServingMetric(
            "output_tokens_per_s",
            "tokens/s",
            True,
            None,
            None,
            "output tokens per second of the server, per time window",
        ),
    )
}
#: the gates of a serving diff unless ``--gate`` names others (``METRIC:QUANTILE``)
DEFAULT_GATES: tuple[str, ...] = ("ttft:p50", "ttft:p99", "tpot:p50", "output_tokens_per_s:p50")
#: full windows the shortest run is cut into for the throughput sample ...
WINDOWS = 30
#: ... and the fewest: a run with an empty window doubles the window length down to this many
MIN_WINDOWS = 10

#: the load fields that make two load points the same point
_LOAD_IDENTITY = (
    "mode",
    "concurrency",
    "rate",
    "arrival",
    "burstiness",
    "max_in_flight",
    # aaco llm run
    "batch",
    "prompt_tokens",
    "output_tokens",
)
#: load fields that size a run without changing what each request meets
_LOAD_SIZE = ("requests", "duration_s", "warmup_requests", "warmup_s", "seed")
_PROMPT_FIELDS = (
    "source",
    "input_tokens",
    "input_spread",
    "output_tokens",
    "output_spread",
    "sized_with",
)


def is_serving(session: Session) -> bool:
    return session.meta.get("kind") == SERVING_KIND


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


# -- load points -------------------------------------------------------------------------------
def load_label(load: Mapping[str, Any]) -> str:
    """A load point's short name, as the serving reports label it (``concurrency=4``,
    ``rate=2/s (poisson)``, ``batch=1, 32+16 tokens``)."""
    return _report_load_label(dict(load))


def load_identity(load: Mapping[str, Any]) -> str:
    """What two load points must share to be the same point, as one comparable string."""
    return json.dumps({k: load.get(k) for k in _LOAD_IDENTITY}, sort_keys=True, default=str)


def summary(session: Session) -> dict[str, Any]:
    """``metrics/serving_summary.json``; BundleError when absent or malformed."""
    data = session.json_file(SERVING_SUMMARY_FILE)
    if not isinstance(data, dict) or not isinstance(data.get("points"), list):
        raise BundleError(f"{session.path}: no readable {SERVING_SUMMARY_FILE}")
    if not all(isinstance(p, dict) for p in data["points"]):
        raise BundleError(f"{session.path}: {SERVING_SUMMARY_FILE} points are not objects")
    return data


def points(session: Session) -> list[dict[str, Any]]:
    """The summary of each load point, in sweep order (each with ``point`` and ``load``)."""
    return list(summary(session)["points"])


def point_summary(session: Session, point: int) -> dict[str, Any]:
    for p in points(session):
        if p.get("point") == point:
            return p
    raise BundleError(f"{session.path}: no load point {point} in {SERVING_SUMMARY_FILE}")


def _describe_points(session: Session) -> str:
    return ", ".join(
        f"#{p.get('point')} {load_label(_dict(p.get('load')))}" for p in points(session)
    )


def resolve_point(session: Session, spec: str | None) -> int:
    """The load point ``spec`` names in ``session``: None the first; ``N`` the Nth (from 0);
    ``concurrency=N`` or ``rate=R`` the point of that load."""
    pts = points(session)
    if not pts:
        raise BundleError(f"{session.path}: no load point in {SERVING_SUMMARY_FILE}")
    if spec is None:
        return int(pts[0]["point"])
    text = spec.strip()
    if text.isdigit():
        i = int(text)
        if i >= len(pts):
            raise UsageError(
                f"--point {spec}: {session.session_id} has {len(pts)} load point(s) "
                f"({_describe_points(session)})"
            )
        return int(pts[i]["point"])
    key, sep, value = text.partition("=")
    if not sep or key.strip() not in ("concurrency", "rate"):
        raise UsageError(f"--point {spec!r}: expected an index (0, 1 ...), concurrency=N or rate=R")
    try:
        wanted = float(value)
    except ValueError:
        raise UsageError(f"--point {spec!r}: {value!r} is not a number") from None
    for p in pts:
        v = _dict(p.get("load")).get(key.strip())
        if isinstance(v, (int, float)) and math.isclose(float(v), wanted):
            return int(p["point"])
    raise UsageError(
        f"--point {spec}: {session.session_id} has no such load point "
        f"(its points: {_describe_points(session)})"
    )


def matching_point(session: Session, load: Mapping[str, Any], single: bool) -> int:
    """The point of ``session`` at ``load``. ``single``: the other side has one point, so a
    session of one point is compared whatever its load (the difference is reported); with a
    sweep on either side the loads must match, else a UsageError lists the points."""
    pts = points(session)
    if single and len(pts) == 1:
        return int(pts[0]["point"])
    want = load_identity(load)
    for p in pts:
        if load_identity(_dict(p.get("load"))) == want:
            return int(p["point"])
    raise UsageError(
        f"{session.session_id} has no load point {load_label(load)} (its points: "
        f"{_describe_points(session)}): a sweep is compared point by point at matching "
        "loads; choose one both have with --point"
    )


def point_load(session: Session, point: int) -> dict[str, Any]:
    return _dict(point_summary(session, point).get("load"))


# -- settings ----------------------------------------------------------------------------------
def settings(session: Session, point: int | None = None) -> dict[str, Any]:
    """The serving settings of ``session`` at ``point`` (default: its first load, as run),
    flattened to ``serving.*``, ``load.*`` and ``prompts.*`` keys: what ``aaco diff`` lists
    when they differ."""
    meta = session.meta
    serving = _dict(meta.get("serving"))
    load = point_load(session, point) if point is not None else _dict(serving.get("load"))
    prompts = _dict(serving.get("prompts"))
    out: dict[str, Any] = {
        "serving.url": serving.get("url"),
        "serving.endpoint": serving.get("endpoint"),
        "serving.model": serving.get("model"),
        "serving.params_sent": serving.get("params_sent"),
    }
    out.update({f"load.{k}": load.get(k) for k in (*_LOAD_IDENTITY, *_LOAD_SIZE)})
    out.update({f"prompts.{k}": prompts.get(k) for k in _PROMPT_FIELDS})
    return out


def identity_settings(session: Session, point: int | None = None) -> dict[str, Any]:
    """:func:`settings` without the fields that only size a run (request counts, durations,
    warmup, seeds): what runs pooled on one side, and the sessions of one history, share."""
    return {
        k: v
        for k, v in settings(session, point).items()
        if not any(k == f"load.{f}" for f in _LOAD_SIZE)
    }


def serving_key(session: Session) -> str:
    """The configuration of a serving session as one string (its first load and its sweep):
    what a baseline's runs share."""
    sweep = _dict(session.meta.get("serving")).get("sweep")
    return json.dumps({**identity_settings(session), "sweep": sweep}, sort_keys=True, default=str)


def history_key(session: Session, point: int) -> str:
    """The series a load point of a session belongs to (settings and that point's load)."""
    return json.dumps(identity_settings(session, point), sort_keys=True, default=str)


# -- samples -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PointSamples:
    """The measured requests of one load point of one session, read from its tables."""

    session_id: str
    point: int
    label: str
    measured: int
    ok: int
    #: per-request series in ms (ok requests, in request order; requests without the
    #: figure dropped): ttft, tpot, e2e
    series: dict[str, np.ndarray[Any, Any]]
    #: inter-token latencies in ms, one per token, pooled over the ok requests
    itl: np.ndarray[Any, Any]
    #: the measured span (first intended or actual send, last end), ns
    span: tuple[int, int] | None
    #: when each token chunk of an ok request arrived (ns) and the tokens it carried
    token_t: np.ndarray[Any, Any] = field(repr=False)
    token_n: np.ndarray[Any, Any] = field(repr=False)
    #: why the throughput windows cannot be formed (None: they can)
    tokens_unknown: str | None = None

    @property
    def failed(self) -> int:
        return self.measured - self.ok

    @property
    def failed_fraction(self) -> float | None:
        return self.failed / self.measured if self.measured else None


def _np(table: pa.Table, name: str, dtype: Any = np.float64) -> np.ndarray[Any, Any]:
    """A column as floats, null -> NaN."""
    col = table.column(name)
    out: np.ndarray[Any, Any] = np.asarray(
        [np.nan if v is None else v for v in col.to_pylist()], dtype=dtype
    )
    return out


def point_samples(session: Session, point: int) -> PointSamples:
    """Samples of ``point``: measured phase, ok requests, in request (dispatch) order."""
    requests = session.table("serving_requests")
    chunks = session.table("serving_chunks")
    if requests is None:
        raise BundleError(f"{session.path}: no {SERVING_REQUESTS.path}")
    pts = np.asarray(requests.column("point").to_pylist())
    phases = np.asarray(requests.column("phase").to_pylist(), dtype=object)
    measured = requests.filter(pa.array((pts == point) & (phases == "measured")))
    measured = measured.sort_by("request")
    status = np.asarray(measured.column("status").to_pylist(), dtype=object)
    ok = measured.filter(pa.array(status == "ok"))
    series: dict[str, np.ndarray[Any, Any]] = {}
    for m in METRICS.values():
        if m.column is None:
            continue
        x = _np(ok, m.column) / 1e6
        series[m.name] = x[np.isfinite(x)]
    starts = _np(measured, "intended_ns")
    sent = _np(measured, "sent_ns")
    starts = np.where(np.isfinite(starts), starts, sent)
    ends = _np(measured, "end_ns")
    ends = ends[np.isfinite(ends)]
    span = (int(starts.min()), int(ends.max())) if starts.size and ends.size else None
    token_t, token_n, itl, unknown = _tokens(ok, chunks, point)
    return PointSamples(
        session_id=session.session_id,
        point=point,
        label=load_label(point_load(session, point)),
        measured=measured.num_rows,
        ok=ok.num_rows,
        series=series,
        itl=itl,
        span=span,
        token_t=token_t,
        token_n=token_n,
        tokens_unknown=unknown,
    )


def _tokens(
    ok: pa.Table, chunks: pa.Table | None, point: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], str | None]:
    """(arrival ns, tokens) of every token chunk of the ok requests, the inter-token
    latencies (ms, one per token: a chunk's gap to the previous token chunk of its request
    split evenly over its tokens, as docs/metrics.md), and why tokens are unknown."""
    empty = np.zeros(0)
    if chunks is None or chunks.num_rows == 0 or ok.num_rows == 0:
        return empty, empty, empty, "no token chunks recorded"
    req_ids = np.asarray(ok.column("request").to_pylist(), dtype=np.int64)
    outputs = _np(ok, "output_tokens")
    c_point = np.asarray(chunks.column("point").to_pylist(), dtype=np.int64)
    c_req = np.asarray(chunks.column("request").to_pylist(), dtype=np.int64)
    c_kind = np.asarray(chunks.column("kind").to_pylist(), dtype=object)
    keep = (c_point == point) & np.isin(c_req, req_ids) & np.isin(c_kind, list(TOKEN_KINDS))
    idx = np.flatnonzero(keep)
    c_idx = np.asarray(chunks.column("chunk").to_pylist(), dtype=np.int64)[idx]
    req = c_req[idx]
    order = np.lexsort((c_idx, req))
    idx, req = idx[order], req[order]
    t = np.asarray(chunks.column("t_ns").to_pylist(), dtype=np.float64)[idx]
    raw = chunks.column("tokens").to_pylist()
    n = np.asarray([np.nan if raw[i] is None else raw[i] for i in idx], dtype=np.float64)
    unknown: str | None = None
    if np.isnan(n).any():
        # chunks whose count is unknown share their request's output tokens evenly
        pos = np.searchsorted(np.sort(req_ids), req)
        out_sorted = outputs[np.argsort(req_ids)]
        per_req_chunks = np.bincount(pos, minlength=req_ids.size).astype(np.float64)
        share = out_sorted[pos] / per_req_chunks[pos]
        n = np.where(np.isnan(n), share, n)
        if np.isnan(n).any():
            unknown = "output tokens of some requests are unknown"
    # inter-token latencies: gaps between consecutive token chunks of one request
    same = req[1:] == req[:-1]
    gaps = (t[1:] - t[:-1])[same]
    per = n[1:][same]
    valid = np.isfinite(per) & (per >= 1)
    counts = np.rint(per[valid]).astype(np.int64)
    itl = np.repeat(gaps[valid] / per[valid], counts) / 1e6
    return t, n, itl, unknown


def window_rates(s: PointSamples, window_ns: float) -> np.ndarray[Any, Any]:
    """Output tokens per second in consecutive full windows of ``window_ns`` from the start
    of the measured span (the last, partial window is dropped)."""
    if s.span is None or window_ns <= 0:
        return np.zeros(0)
    start, end = s.span
    # the shortest run is cut into whole windows: no float rounding may lose the last one
    k = int((end - start) / window_ns + 1e-9)
    if k <= 0:
        return np.zeros(0)
    which = np.floor((s.token_t - start) / window_ns).astype(np.int64)
    inside = (which >= 0) & (which < k)
    sums = np.bincount(which[inside], weights=s.token_n[inside], minlength=k)[:k]
    out: np.ndarray[Any, Any] = sums / (window_ns / 1e9)
    return out


def choose_window(runs: Sequence[PointSamples]) -> tuple[float | None, str | None]:
    """The window length (ns) shared by every run of both sides, or None and why not.

    The shortest run's measured span cut into ``WINDOWS`` windows; when a run has a window
    without any token (a window shorter than a gap in the stream), twice as long, then
    ``MIN_WINDOWS`` windows on the shortest run.
    """
    for s in runs:
        if s.tokens_unknown is not None:
            return None, f"{s.session_id}: {s.tokens_unknown}"
        if s.span is None or s.token_t.size == 0:
            return None, f"{s.session_id}: no generated tokens in the measured phase"
    shortest = min(s.span[1] - s.span[0] for s in runs if s.span is not None)
    windows = WINDOWS
    while True:
        w = shortest / windows
        if w > 0 and all(np.all(window_rates(s, w) > 0) for s in runs):
            return w, None
        if windows <= MIN_WINDOWS:
            break
        windows = max(MIN_WINDOWS, windows // 2)
    return None, (
        f"a run holds a window of {shortest / MIN_WINDOWS / 1e9:.3g} s without any token "
        f"even at {MIN_WINDOWS} windows: the stream has gaps longer than that"
    )


# -- headline figures (history, check) ---------------------------------------------------------
def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def figures(p: Mapping[str, Any]) -> dict[str, float | None]:
    """The figures of one load point's summary that ``aaco history`` charts and ``aaco
    check`` rules bound: ``{ttft,tpot,itl,e2e}_{mean,p50,p90,p95,p99,max}_ms``, the
    throughputs, goodput, and the failed share."""
    out: dict[str, float | None] = {}
    for name in ("ttft", "tpot", "itl", "e2e"):
        d = _dict(p.get(f"{name}_ms"))
        for stat in ("mean", "p50", "p90", "p95", "p99", "max"):
            out[f"{name}_{stat}_ms"] = _num(d.get(stat))
    tput = _dict(p.get("throughput"))
    for key in (
        "output_tokens_per_s",
        "total_tokens_per_s",
        "requests_per_s",
        "goodput_requests_per_s",
        "good_fraction",
    ):
        out[key] = _num(tput.get(key))
    req = _dict(p.get("requests"))
    measured, failed = _num(req.get("measured")), _num(req.get("failed"))
    out["failed_requests"] = failed
    out["failed_fraction"] = failed / measured if measured and failed is not None else None
    return out


def point_figures(session: Session, point: int) -> dict[str, float | None]:
    """:func:`figures` of ``point``, from the summary (recomputed from the tables when the
    bundle holds none)."""
    try:
        return figures(point_summary(session, point))
    except BundleError:
        requests, chunks = session.table("serving_requests"), session.table("serving_chunks")
        if requests is None or chunks is None:
            raise
        return figures(summarize_point(requests, chunks, point=point))


def quantile_value(session: Session, point: int, metric: str, q: float) -> float | None:
    """One session's level of ``metric`` for a noise floor: the quantile ``q`` of its
    per-request figure at ``point`` (from the summary when it holds that quantile), or the
    run's output tokens/s for the throughput."""
    m = METRICS[metric]
    p = point_summary(session, point)
    if m.summary_key is None:
        return _num(_dict(p.get("throughput")).get("output_tokens_per_s"))
    key = f"p{round(q * 100)}"
    v = _num(_dict(p.get(m.summary_key)).get(key))
    if v is not None:
        return v
    x = point_samples(session, point).series.get(metric)
    return float(np.quantile(x, q)) if x is not None and x.size else None
