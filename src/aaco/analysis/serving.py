"""LLM serving metrics: per-request figures, their distributions, throughput, goodput, token
reconciliation and the knee of a load sweep (docs/metrics.md, "Serving").

Pure functions over what the load generator (``aaco.serving``) or the in-process decoder loop
(``aaco.generate``) recorded: a :class:`RequestResult` per request with its :class:`Chunk` s.
:func:`serving_tables` turns them into the bundle's ``serving_requests`` and
``serving_chunks`` tables; :func:`summarize_point` reads those tables back into the summary
the reports and ``aaco diff`` use. Every figure that cannot be known is ``None``.

One name per metric (the other tools' names are in docs/metrics.md):

- ``ttft``: first chunk carrying answer content (or a tool call) minus the send; role-only,
  usage-only and reasoning chunks excluded. ``ttfr``: the same for reasoning content.
- ``e2e``: end of the response minus the send.
- ``tpot``: (end - first generated token) / (output tokens - tokens of the first chunk).
- ``itl``: each chunk's gap to the previous token chunk split evenly over the tokens it
  carries, one sample per token, pooled over requests. ``icl``: the raw gap per chunk.
- ``*_intended``: the same latencies from the intended send (the arrival schedule), so a
  client that falls behind cannot hide the queueing it caused (coordinated omission).
"""

from __future__ import annotations

import array
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.session.schema import SERVING_CHUNKS, SERVING_REQUESTS

__all__ = [
    "SLO_METRICS",
    "TOKEN_KINDS",
    "Chunk",
    "PackedChunks",
    "RequestResult",
    "chunk_gaps",
    "distribution",
    "finalize",
    "find_knee",
    "serving_tables",
    "summarize_point",
]

#: chunk kinds that carry generated tokens
TOKEN_KINDS = frozenset({"content", "reasoning", "tool"})
_ANSWER_KINDS = frozenset({"content", "tool"})
#: per-request latencies an SLO may bound (``--slo ttft=200ms``), the request column of each
SLO_METRICS: dict[str, str] = {"ttft": "ttft_ns", "tpot": "tpot_ns", "e2e": "e2e_ns"}
#: token counts that disagree by more than this fraction are warned about
RECONCILE_TOLERANCE = 0.02
_PCTS = (50, 90, 95, 99)


@dataclass(slots=True)
class Chunk:
    """One streamed piece of a response, as the client read it."""

    t_ns: int
    kind: str
    #: tokens it carries; None when unknown
    tokens: int | None = None
    chars: int = 0
    #: its generated text (kept in memory for re-tokenizing, never written to the bundle)
    text: str = ""


@dataclass(slots=True)
class RequestResult:
    """One request: when it was meant to go, went, and what came back."""

    point: int
    request: int
    phase: str
    intended_ns: int | None
    sent_ns: int
    end_ns: int | None
    status: str = "ok"
    #: when the client began the request (before taking a connection); None: = sent_ns
    submit_ns: int | None = None
    http_status: int | None = None
    error: str | None = None
    max_tokens: int | None = None
    prompt_tokens: int | None = None
    usage_tokens: int | None = None
    retokenized_tokens: int | None = None
    chunks: list[Chunk] = field(default_factory=list)
    #: the chunks once :meth:`pack` ed (``chunks`` is then empty)
    packed: PackedChunks | None = None

    def pack(self) -> None:
        """Keep the chunks in compact arrays (about 17 bytes a chunk instead of about 120):
        a long run holds millions. Chunks with text (kept for re-tokenizing) stay as they
        are."""
        if self.chunks and self.packed is None and not any(c.text for c in self.chunks):
            self.packed = PackedChunks.of(self.chunks)
            self.chunks = []

    def all_chunks(self) -> list[Chunk]:
        """The chunks, unpacked when packed (new objects: changing them changes nothing)."""
        return self.packed.unpack() if self.packed is not None else self.chunks


_KIND_CODES = ("content", "reasoning", "tool", "role", "usage", "empty")


@dataclass(slots=True)
class PackedChunks:
    """A request's chunks as columns: times, kind codes, tokens (-1: unknown), chars."""

    t_ns: array.array[int]
    kinds: bytes
    tokens: array.array[int]
    chars: array.array[int]

    @classmethod
    def of(cls, chunks: Sequence[Chunk]) -> PackedChunks:
        return cls(
            array.array("q", [c.t_ns for c in chunks]),
            bytes(_KIND_CODES.index(c.kind) for c in chunks),
            array.array("i", [-1 if c.tokens is None else c.tokens for c in chunks]),
            array.array("i", [c.chars for c in chunks]),
        )

    def unpack(self) -> list[Chunk]:
        return [
            Chunk(t, _KIND_CODES[k], None if n < 0 else n, ch)
            for t, k, n, ch in zip(self.t_ns, self.kinds, self.tokens, self.chars, strict=True)
        ]


def _fill_unit_tokens(r: RequestResult, chunks: list[Chunk]) -> None:
    """Token counts the server's total implies: one per chunk when it equals the number of
    token chunks and none is known; the remainder for the one chunk left unknown (a running
    usage count starts on the second chunk when the first carried none)."""
    tc = [c for c in chunks if c.kind in TOKEN_KINDS]
    if not tc or r.usage_tokens is None:
        return
    unknown = [c for c in tc if c.tokens is None]
    if len(unknown) == len(tc) and r.usage_tokens == len(tc):
        for c in tc:
            c.tokens = 1
    elif len(unknown) == 1:
        rest = r.usage_tokens - sum(c.tokens or 0 for c in tc)
        if rest >= 0:
            unknown[0].tokens = rest


def finalize(r: RequestResult, chunks: list[Chunk] | None = None) -> dict[str, Any]:
    """The ``serving_requests`` row of one request, with its derived latencies; ``chunks``:
    its chunks when already at hand (:meth:`RequestResult.all_chunks`), completed in place
    with the token counts the usage total implies."""
    if chunks is None:
        chunks = r.all_chunks()
    _fill_unit_tokens(r, chunks)
    tc = [c for c in chunks if c.kind in TOKEN_KINDS]
    first_token = tc[0].t_ns if tc else None
    first_content = next((c.t_ns for c in tc if c.kind in _ANSWER_KINDS), None)
    first_reasoning = next((c.t_ns for c in tc if c.kind == "reasoning"), None)
    known = [c.tokens for c in tc]
    chunk_tokens = sum(k for k in known if k is not None) if tc and None not in known else None
    if r.usage_tokens is not None:
        output, source = r.usage_tokens, "usage"
    elif chunk_tokens is not None:
        output, source = chunk_tokens, "chunks"
    elif r.retokenized_tokens is not None:
        output, source = r.retokenized_tokens, "retokenized"
    else:
        output, source = None, None
    ok = r.status == "ok" and r.end_ns is not None

    def since(t: int | None, t0: int | None) -> int | None:
        return t - t0 if ok and t is not None and t0 is not None else None

    tpot: float | None = None
    if ok and first_token is not None and output is not None and tc[0].tokens is not None:
        rest = output - tc[0].tokens
        if rest > 0 and r.end_ns is not None:
            tpot = (r.end_ns - first_token) / rest
    return {
        "point": r.point,
        "request": r.request,
        "phase": r.phase,
        "intended_ns": r.intended_ns,
        "submit_ns": r.submit_ns,
        "sent_ns": r.sent_ns,
        "first_token_ns": first_token,
        "first_content_ns": first_content,
        "first_reasoning_ns": first_reasoning,
        "end_ns": r.end_ns,
        "status": r.status,
        "http_status": r.http_status,
        "error": r.error,
        "max_tokens": r.max_tokens,
        "prompt_tokens": r.prompt_tokens,
        "output_tokens": output,
        "token_source": source,
        "usage_tokens": r.usage_tokens,
        "chunk_tokens": chunk_tokens,
        "retokenized_tokens": r.retokenized_tokens,
        "chunks": len(tc),
        "output_chars": sum(c.chars for c in tc),
        "ttft_ns": since(first_content, r.sent_ns),
        "ttfr_ns": since(first_reasoning, r.sent_ns),
        "e2e_ns": since(r.end_ns, r.sent_ns),
        "tpot_ns": tpot,
        "dispatch_delay_ns": (r.sent_ns - r.intended_ns if r.intended_ns is not None else None),
        "ttft_intended_ns": since(first_content, r.intended_ns),
        "e2e_intended_ns": since(r.end_ns, r.intended_ns),
    }


def serving_tables(results: Sequence[RequestResult]) -> tuple[pa.Table, pa.Table]:
    """The ``serving_requests`` and ``serving_chunks`` tables of ``results``.

    The chunk columns are built in compact arrays, one request at a time, so the peak is
    the table itself (about 25 bytes a chunk), not Python objects for every chunk."""
    rows = []
    point, request, index = array.array("i"), array.array("i"), array.array("i")
    t_ns, tokens, chars = array.array("q"), array.array("i"), array.array("i")
    valid = bytearray()
    kinds = bytearray()
    for r in results:
        cs = r.all_chunks()
        rows.append(finalize(r, cs))
        n = len(cs)
        point.extend([r.point] * n)
        request.extend([r.request] * n)
        index.extend(range(n))
        for c in cs:
            t_ns.append(c.t_ns)
            kinds.append(_KIND_CODES.index(c.kind))
            tokens.append(0 if c.tokens is None else c.tokens)
            valid.append(c.tokens is not None)
            chars.append(c.chars)
    kind_dict = pa.array(_KIND_CODES)
    kind_col = pa.DictionaryArray.from_arrays(
        pa.array(np.frombuffer(bytes(kinds), dtype=np.int8)), kind_dict
    ).cast(pa.string())
    mask = np.frombuffer(bytes(valid), dtype=np.bool_) if valid else np.zeros(0, np.bool_)
    columns = {
        "point": pa.array(np.frombuffer(point, dtype=np.int32)),
        "request": pa.array(np.frombuffer(request, dtype=np.int32)),
        "chunk": pa.array(np.frombuffer(index, dtype=np.int32)),
        "t_ns": pa.array(np.frombuffer(t_ns, dtype=np.int64)),
        "kind": kind_col,
        "tokens": pa.array(np.frombuffer(tokens, dtype=np.int32), mask=~mask),
        "chars": pa.array(np.frombuffer(chars, dtype=np.int32)),
    }
    return SERVING_REQUESTS.from_rows(rows), SERVING_CHUNKS.from_columns(columns)


# -- summaries --------------------------------------------------------------------------------


def distribution(
    values: Sequence[float] | np.ndarray[Any, Any], scale: float = 1e-6
) -> dict[str, Any] | None:
    """count, mean, std, min, p50/p90/p95/p99, max of ``values`` times ``scale`` (ns -> ms by
    default); None when there are none. Percentiles interpolate linearly (numpy's default,
    as vLLM, AIPerf and GuideLLM)."""
    a = np.asarray(values, dtype=np.float64)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return None
    a = a * scale
    out: dict[str, Any] = {
        "count": int(a.size),
        "mean": float(a.mean()),
        "std": float(a.std(ddof=1)) if a.size > 1 else 0.0,
        "min": float(a.min()),
    }
    for p, v in zip(_PCTS, np.percentile(a, _PCTS), strict=True):
        out[f"p{p}"] = float(v)
    out["max"] = float(a.max())
    return out


def _col(table: pa.Table, name: str) -> list[Any]:
    return table.column(name).to_pylist()  # type: ignore[no-any-return]


def chunk_gaps(
    chunks: pa.Table, requests: set[tuple[int, int]]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(itl per token, icl per chunk, tokens per chunk), in ns and tokens, over the token
    chunks of ``requests`` ((point, request) pairs). ITL walks the chunks that carry a
    positive count: each one's gap to the previous such chunk, split over its tokens. A
    request's chunks are consecutive rows in arrival order, as :func:`serving_tables` writes
    them. Vectorised: a run of millions of chunks costs a few arrays, not Python objects per
    chunk."""
    empty = np.zeros(0, dtype=np.float64)
    if chunks.num_rows == 0 or not requests:
        return empty, empty, empty
    is_token = pc.is_in(chunks.column("kind"), value_set=pa.array(sorted(TOKEN_KINDS)))
    point = chunks.column("point").to_numpy().astype(np.int64)
    request = chunks.column("request").to_numpy().astype(np.int64)
    key = (point << 32) | request
    wanted = np.fromiter((p << 32 | r for p, r in requests), dtype=np.int64, count=len(requests))
    sel = np.asarray(is_token.to_numpy(zero_copy_only=False), dtype=bool) & np.isin(key, wanted)
    key = key[sel]
    t = chunks.column("t_ns").to_numpy()[sel]
    tokens = pc.fill_null(chunks.column("tokens"), -1).to_numpy().astype(np.int64)[sel]
    per_chunk = tokens[tokens >= 0].astype(np.float64)
    same = key[1:] == key[:-1]
    gaps = (t[1:] - t[:-1])[same].astype(np.float64)
    # itl: over the chunks that carry counted tokens only, so a chunk of 0 (or unknown)
    # tokens passes its time on to the next one instead of losing it
    c = tokens > 0
    ck, ct, cn = key[c], t[c], tokens[c]
    csame = ck[1:] == ck[:-1]
    cgaps = (ct[1:] - ct[:-1])[csame].astype(np.float64)
    cn_next = cn[1:][csame]
    itl = np.repeat(cgaps / cn_next, cn_next)
    return itl, gaps, per_chunk


def _rel(a: float, b: float) -> float | None:
    return abs(a - b) / b if b else None


def _reconcile(ok: pa.Table) -> dict[str, Any]:
    """Token counts by source, summed over the requests that have each, and how far they
    disagree with the server's usage."""
    out: dict[str, Any] = {"requests": ok.num_rows}
    usage = _col(ok, "usage_tokens")
    sources = {
        "usage": usage,
        "chunks": _col(ok, "chunk_tokens"),
        "retokenized": _col(ok, "retokenized_tokens"),
        "chunk_count": _col(ok, "chunks"),
    }
    for name, vals in sources.items():
        have = [v for v in vals if v is not None]
        out[name] = sum(have) if len(have) == len(vals) and have else None
    requested = [v for v in _col(ok, "max_tokens") if v is not None]
    out["requested"] = sum(requested) if len(requested) == ok.num_rows and requested else None
    diffs: dict[str, float | None] = {}
    if out["usage"] is not None:
        for name in ("chunks", "retokenized", "chunk_count", "requested"):
            if out[name] is not None:
                diffs[name] = _rel(float(out[name]), float(out["usage"]))
    out["relative_difference"] = diffs
    sources_used = ["unknown" if v is None else str(v) for v in _col(ok, "token_source")]
    out["token_source"] = {s: sources_used.count(s) for s in sorted(set(sources_used))}
    return out


def _rate(times_ns: list[float]) -> float | None:
    """(n - 1) / (last - first): requests per second of n stamps; None below two."""
    if len(times_ns) < 2 or max(times_ns) <= min(times_ns):
        return None
    return (len(times_ns) - 1) / ((max(times_ns) - min(times_ns)) / 1e9)


def _ns_values(table: pa.Table, name: str) -> list[float]:
    return [float(v) for v in _col(table, name) if v is not None]


def summarize_point(
    requests: pa.Table,
    chunks: pa.Table,
    *,
    point: int = 0,
    slo: Mapping[str, float] | None = None,
    target_rate: float | None = None,
) -> dict[str, Any]:
    """The summary of one load point: its measured requests (warmup excluded).

    ``slo``: bounds in ns per :data:`SLO_METRICS` name (a request is good when it succeeded
    and meets every bound; a request without the bounded figure is not good).
    ``target_rate``: the open-loop schedule's requests/s, to compare with the achieved rate.
    """
    slo = dict(slo or {})
    mask = [
        p == point and ph == "measured"
        for p, ph in zip(_col(requests, "point"), _col(requests, "phase"), strict=True)
    ]
    measured = requests.filter(pa.array(mask, type=pa.bool_()))
    ok_mask = [s == "ok" for s in _col(measured, "status")]
    ok = measured.filter(pa.array(ok_mask, type=pa.bool_()))
    n, n_ok = measured.num_rows, ok.num_rows
    out: dict[str, Any] = {
        "point": point,
        "requests": {"measured": n, "ok": n_ok, "failed": n - n_ok},
        "warnings": [],
    }
    if n == 0:
        out["warnings"].append("no measured request in this point (the warmup took them all?)")
    errors = [e for e in _col(measured, "error") if e]
    if errors:
        out["requests"]["errors"] = {e: errors.count(e) for e in sorted(set(errors))[:10]}
    sent = _ns_values(measured, "sent_ns")
    starts = [
        v if v is not None else s
        for v, s in zip(_col(measured, "intended_ns"), _col(measured, "sent_ns"), strict=True)
    ]
    ends = _ns_values(measured, "end_ns")
    window = (max(ends) - min(starts)) / 1e9 if ends and starts else None
    out["duration_s"] = window
    keys = {(point, r) for r in _col(ok, "request")}
    itl, icl, per_chunk = chunk_gaps(chunks, keys)
    for name, col in (
        ("ttft", "ttft_ns"),
        ("ttfr", "ttfr_ns"),
        ("tpot", "tpot_ns"),
        ("e2e", "e2e_ns"),
        ("ttft_intended", "ttft_intended_ns"),
        ("e2e_intended", "e2e_intended_ns"),
        ("dispatch_delay", "dispatch_delay_ns"),
    ):
        src = measured if name == "dispatch_delay" else ok
        out[f"{name}_ms"] = distribution(_ns_values(src, col))
    out["send_overhead_ms"] = distribution(
        [
            float(b - a)
            for a, b in zip(_col(measured, "submit_ns"), _col(measured, "sent_ns"), strict=True)
            if a is not None and b is not None
        ]
    )
    out["itl_ms"] = distribution(itl)
    out["icl_ms"] = distribution(icl)
    out["tokens_per_chunk"] = distribution(per_chunk, scale=1.0)
    outputs = _col(ok, "output_tokens")
    prompts = _col(ok, "prompt_tokens")
    out_total = sum(outputs) if outputs and None not in outputs else None
    in_total = sum(prompts) if prompts and None not in prompts else None
    tput: dict[str, Any] = {
        "requests_per_s": n_ok / window if window else None,
        "output_tokens_per_s": out_total / window if window and out_total is not None else None,
        "total_tokens_per_s": (
            (out_total + in_total) / window
            if window and out_total is not None and in_total is not None
            else None
        ),
        "output_tokens": out_total,
        "prompt_tokens": in_total,
    }
    if slo:
        good = 0
        cols = {m: _col(ok, SLO_METRICS[m]) for m in slo}
        for i in range(n_ok):
            if all(cols[m][i] is not None and cols[m][i] <= bound for m, bound in slo.items()):
                good += 1
        tput["goodput_requests_per_s"] = good / window if window else None
        tput["good_requests"] = good
        tput["good_fraction"] = good / n if n else None
        out["slo_ms"] = {m: v / 1e6 for m, v in slo.items()}
    out["throughput"] = tput
    out["rate"] = {
        "target": target_rate,
        "scheduled": _rate(_ns_values(measured, "intended_ns")) if target_rate else None,
        "achieved": _rate(sent),
    }
    # Judge the client against the schedule it drew (a Poisson sample's own rate differs
    # from the nominal one by chance), falling back to the nominal rate.
    want = out["rate"]["scheduled"] or target_rate
    got = out["rate"]["achieved"]
    if want and got is not None and got < (1 - RECONCILE_TOLERANCE) * want:
        out["warnings"].append(
            f"the client sent {got:.1f} requests/s of the {want:.1f} scheduled: it fell "
            "behind; judge latency from the intended send (`*_intended`)"
        )
    out["tokens"] = _reconcile(ok)
    tokens = out["tokens"]
    for name, d in tokens["relative_difference"].items():
        if d is None or d <= RECONCILE_TOLERANCE or name == "chunk_count":
            continue  # chunks carrying several tokens each are no disagreement
        if name == "requested":
            out["warnings"].append(
                f"the server generated {tokens['usage']} tokens of the {tokens['requested']} "
                f"requested ({d:.1%} fewer): outputs ended early (EOS?)"
            )
        else:
            out["warnings"].append(
                f"token counts disagree: {name} {tokens[name]} vs the server's usage "
                f"{tokens['usage']} ({d:.1%})"
            )
    if n_ok and out["tpot_ms"] is None and out["tokens"]["usage"] is not None:
        out["warnings"].append(
            "tokens per chunk are unknown (chunks carry several tokens and the server gives "
            "no per-chunk usage): tpot and itl need --tokenizer"
        )
    return out


def find_knee(
    loads: Sequence[float], throughputs: Sequence[float | None], min_gain: float = 0.10
) -> dict[str, Any] | None:
    """The knee of a throughput-vs-load curve: the last load whose step still raised
    throughput by at least ``min_gain`` (relative) per doubling of load, before the first
    step that did not. None with fewer than three points or when every step gained (the
    sweep never saturated)."""
    pts = [(x, y) for x, y in zip(loads, throughputs, strict=True) if y is not None and x > 0]
    if len(pts) < 3:
        return None
    for i in range(1, len(pts)):
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        doublings = math.log2(x1 / x0) if x1 > x0 else 0.0
        if doublings <= 0 or y0 <= 0:
            continue
        gain = (y1 / y0) ** (1.0 / doublings) - 1.0
        if gain < min_gain:
            return {"index": i - 1, "load": x0, "throughput": y0, "next_gain_per_doubling": gain}
    return None
