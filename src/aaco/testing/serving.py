"""Serving bundles for tests: :func:`scripted_results` draws requests whose every time is
known by construction (no server, no clock), :func:`make_serving_bundle` publishes them as a
``kind: "serving"`` bundle with the same writer ``aaco llm bench`` uses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from aaco.analysis.serving import Chunk, RequestResult
from aaco.report.publish import write_reports
from aaco.serving.bench import serving_meta, write_serving
from aaco.serving.load import Load
from aaco.session.bundle import BundleWriter, Session

__all__ = ["make_serving_bundle", "scripted_results"]

_MS = 1_000_000


def scripted_results(
    n: int,
    *,
    ttft_ms: float | Sequence[float] = 20.0,
    itl_ms: float = 5.0,
    output_tokens: int = 16,
    tokens_per_chunk: int = 1,
    prompt_tokens: int = 32,
    gap_ms: float = 10.0,
    point: int = 0,
    warmup: int = 0,
    start_ns: int = 1_000_000_000,
    usage: bool = True,
    failed: Sequence[int] = (),
) -> list[RequestResult]:
    """``n`` requests sent every ``gap_ms``: a role chunk at the send, the first content
    chunk ``ttft_ms`` later (request i takes ``ttft_ms[i]`` when a sequence is given), then
    one chunk of ``tokens_per_chunk`` tokens (the last may carry fewer) every ``itl_ms``;
    the end is the last chunk. Requests whose index is in ``failed`` are HTTP 500s."""
    out = []
    for i in range(n):
        sent = start_ns + round(i * gap_ms * _MS)
        if i in failed:
            out.append(
                RequestResult(
                    point=point,
                    request=i,
                    phase="warmup" if i < warmup else "measured",
                    intended_ns=sent,
                    sent_ns=sent,
                    end_ns=sent + _MS,
                    status="error",
                    http_status=500,
                    error="HTTP 500: scripted failure",
                    max_tokens=output_tokens,
                )
            )
            continue
        ttft = ttft_ms[i] if isinstance(ttft_ms, Sequence) else ttft_ms
        chunks = [Chunk(t_ns=sent, kind="role")]
        left, t = output_tokens, sent + round(ttft * _MS)
        while left > 0:
            k = min(tokens_per_chunk, left)
            chunks.append(Chunk(t_ns=t, kind="content", tokens=None, chars=2 * k, text=" w" * k))
            left -= k
            t += round(itl_ms * _MS)
        end = chunks[-1].t_ns
        out.append(
            RequestResult(
                point=point,
                request=i,
                phase="warmup" if i < warmup else "measured",
                intended_ns=sent,
                sent_ns=sent,
                end_ns=end,
                http_status=200,
                max_tokens=output_tokens,
                prompt_tokens=prompt_tokens,
                usage_tokens=output_tokens if usage else None,
                chunks=chunks,
            )
        )
    return out


def make_serving_bundle(
    root: Path,
    results: Sequence[RequestResult],
    *,
    loads: Sequence[Load] | None = None,
    slo: Mapping[str, float] | None = None,
    model: str = "fake-llm",
    tag: str | None = None,
    reports: bool = False,
    serving: Mapping[str, Any] | None = None,
) -> Session:
    """A published serving bundle under ``root`` holding ``results``; ``loads`` gives each
    point's load (default: closed loop, concurrency 1, one point per distinct point index).
    Chunks whose tokens are None get 1 token each when the usage total says so (as the
    real writer does)."""
    n_points = max((r.point for r in results), default=0) + 1
    if loads is None:
        count = len(results) // n_points or 1
        loads = [Load(concurrency=1, requests=count) for _ in range(n_points)]
    points = [
        {
            "point": i,
            "label": ld.label,
            "load": ld.to_json(),
            "client": {
                "wall_s": None,
                "cpu_s": None,
                "cpu_pct": None,
                "loop_lag_ms": None,
                "warnings": [],
            },
        }
        for i, ld in enumerate(loads)
    ]
    writer = BundleWriter(root)
    meta = serving_meta(
        writer,
        model=model,
        source="test",
        backend={"name": "fake", "provider": "test"},
        run={"framework": "openai-http"},
        serving={
            "url": "http://test",
            "endpoint": "chat",
            "model": model,
            "load": loads[0].to_json(),
            **(serving or {}),
        },
        tag=tag,
        argv=["test"],
    )
    write_serving(writer, meta, results, points, slo or {})
    writer.publish()
    if reports:
        write_reports(writer.final_path)
    return Session.load(writer.final_path)
