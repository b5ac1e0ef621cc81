"""The streaming client against real sockets: an aiohttp server in the test writes exact
byte sequences (events split across reads, CRLF, reasoning, tool calls, errors)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from aaco.analysis.serving import RequestResult, finalize
from aaco.serving.client import Endpoint, RequestSpec, new_session, payload, send

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _chunk(
    delta: dict[str, Any] | None = None,
    usage: dict[str, int] | None = None,
    finish: str | None = None,
) -> bytes:
    obj: dict[str, Any] = {
        "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    }
    if usage is not None:
        obj["usage"] = usage
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _run(
    handler: Handler, endpoint_kind: str = "chat", **endpoint_kw: Any
) -> tuple[RequestResult, list[dict[str, Any]]]:
    bodies: list[dict[str, Any]] = []

    async def wrapped(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.json())
        return await handler(request)

    async def main() -> RequestResult:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", wrapped)
        app.router.add_post("/v1/completions", wrapped)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ep = Endpoint(url=f"http://127.0.0.1:{port}", kind=endpoint_kind, model="m", **endpoint_kw)
        r = RequestResult(
            point=0, request=0, phase="measured", intended_ns=None, sent_ns=0, end_ns=None
        )
        try:
            async with new_session(5.0) as session:
                await send(session, ep, RequestSpec(0, "hello world", 8), r, keep_text=True)
        finally:
            await runner.cleanup()
        return r

    return asyncio.run(main()), bodies


def _streamer(parts: list[bytes | float]) -> Handler:
    """Writes each bytes part, sleeping for each float (seconds)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for p in parts:
            if isinstance(p, float):
                await asyncio.sleep(p)
            else:
                await resp.write(p)
        await resp.write_eof()
        return resp

    return handler


def test_chunks_are_classified_and_stamped() -> None:
    parts: list[bytes | float] = [
        _chunk({"role": "assistant", "content": ""}),
        0.02,
        _chunk({"reasoning_content": "hmm"}),
        0.02,
        _chunk({"content": "Hi"}),
        0.02,
        _chunk({"tool_calls": [{"index": 0, "function": {"name": "f"}}]}),
        _chunk({"content": " there"}, finish="length"),
        _chunk(None, usage={"prompt_tokens": 2, "completion_tokens": 4}),
        b"data: [DONE]\n\n",
    ]
    r, bodies = _run(_streamer(parts))
    assert r.status == "ok" and r.http_status == 200
    kinds = [c.kind for c in r.chunks]
    assert kinds == ["role", "reasoning", "content", "tool", "content", "usage"]
    assert r.usage_tokens == 4 and r.prompt_tokens == 2
    t = [c.t_ns for c in r.chunks]
    assert t == sorted(t)
    assert (t[2] - t[1]) / 1e6 == pytest.approx(20, abs=8)
    assert r.end_ns is not None and r.end_ns >= t[-1] >= r.sent_ns
    # what was asked for
    assert bodies[0]["stream"] is True
    assert bodies[0]["stream_options"] == {"include_usage": True}
    assert bodies[0]["messages"] == [{"role": "user", "content": "hello world"}]
    assert bodies[0]["max_tokens"] == 8


def test_event_split_across_reads_and_crlf() -> None:
    whole = _chunk({"content": "abc"}).replace(b"\n", b"\r\n")
    parts: list[bytes | float] = [
        whole[:7],
        0.03,
        whole[7:],
        _chunk({"content": "d"}),
        b"data: [DONE]\n\n",
    ]
    r, _ = _run(_streamer(parts))
    assert r.status == "ok"
    content = [c for c in r.chunks if c.kind == "content"]
    assert [c.text for c in content] == ["abc", "d"]


def test_continuous_usage_gives_tokens_per_chunk() -> None:
    parts: list[bytes | float] = [
        _chunk({"role": "assistant", "content": ""}, usage={"completion_tokens": 0}),
        _chunk({"content": "ab"}, usage={"prompt_tokens": 3, "completion_tokens": 2}),
        _chunk({"content": "cde"}, usage={"prompt_tokens": 3, "completion_tokens": 5}),
        _chunk(None, usage={"prompt_tokens": 3, "completion_tokens": 5}),
        b"data: [DONE]\n\n",
    ]
    r, _ = _run(_streamer(parts))
    assert [c.tokens for c in r.chunks if c.kind == "content"] == [2, 3]
    assert r.usage_tokens == 5


def test_a_total_on_the_last_chunk_is_not_that_chunks_count() -> None:
    # usage appears first on the last content chunk: the request's total, not its tokens
    parts: list[bytes | float] = [_chunk({"content": "a"}) for _ in range(3)]
    parts += [_chunk({"content": "b"}, usage={"completion_tokens": 4}, finish="length")]
    r, _ = _run(_streamer(parts))
    assert [c.tokens for c in r.chunks] == [None] * 4
    row = finalize(r)
    assert row["output_tokens"] == 4 and row["chunk_tokens"] == 4  # one per chunk, implied


def test_running_usage_from_the_first_content_chunk_fills_it_from_the_total() -> None:
    parts: list[bytes | float] = [
        _chunk({"content": "ab"}, usage={"completion_tokens": 2}),
        _chunk({"content": "cde"}, usage={"completion_tokens": 5}),
        b"data: [DONE]\n\n",
    ]
    r, _ = _run(_streamer(parts))
    assert [c.tokens for c in r.chunks] == [None, 3]
    finalize(r)
    assert [c.tokens for c in r.chunks] == [2, 3]


def test_lone_cr_line_ends_and_multiline_data() -> None:
    line = json.dumps({"choices": [{"index": 0, "delta": {"content": "x"}}]}).encode()
    multi = b'data: {"choices": [{"index": 0,\ndata:  "delta": {"content": "y"}}]}\n\n'
    parts: list[bytes | float] = [b"data: " + line + b"\r\r", multi, b"data: [DONE]\r\n\r\n"]
    r, _ = _run(_streamer(parts))
    assert r.status == "ok"
    assert [c.text for c in r.chunks] == ["x", "y"]


def test_crlf_events_are_stamped_when_they_arrive() -> None:
    first = _chunk({"content": "a"}).replace(b"\n", b"\r\n")
    parts: list[bytes | float] = [
        first,
        0.2,
        _chunk({"content": "b"}).replace(b"\n", b"\r\n"),
        b"data: [DONE]\r\n\r\n",
    ]
    r, _ = _run(_streamer(parts))
    assert (r.chunks[0].t_ns - r.sent_ns) / 1e6 < 100  # not held until the next read
    assert (r.chunks[1].t_ns - r.chunks[0].t_ns) / 1e6 == pytest.approx(200, abs=60)


def test_done_ends_the_response_even_if_the_server_keeps_the_stream_open() -> None:
    parts: list[bytes | float] = [_chunk({"content": "a"}), b"data: [DONE]\n\n", 3.0]
    r, _ = _run(_streamer(parts))
    assert r.status == "ok"
    assert r.end_ns is not None and (r.end_ns - r.sent_ns) / 1e9 < 1.0


def test_content_parts_are_read_and_other_types_ignored() -> None:
    part = {"choices": [{"index": 0, "delta": {"content": [{"type": "text", "text": "hi"}]}}]}
    parts: list[bytes | float] = [
        b"data: " + json.dumps(part).encode() + b"\n\n",
        b'data: {"choices": [{"index": 0, "delta": {"content": 5}}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    r, _ = _run(_streamer(parts))
    assert r.status == "ok"
    assert [c.kind for c in r.chunks] == ["content", "empty"]
    assert r.chunks[0].text == "hi"


def test_completions_endpoint_text() -> None:
    line = {"choices": [{"index": 0, "text": "xyz", "finish_reason": None}]}
    parts: list[bytes | float] = [
        b"data: " + json.dumps(line).encode() + b"\n\n",
        b"data: [DONE]\n\n",
    ]
    r, bodies = _run(_streamer(parts), endpoint_kind="completions")
    assert [c.kind for c in r.chunks] == ["content"]
    assert bodies[0]["prompt"] == "hello world" and "messages" not in bodies[0]


def test_http_error_is_the_result_not_an_exception() -> None:
    async def refuse(request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": "ignore_eos is not allowed"}}, status=422)

    r, _ = _run(refuse)
    assert r.status == "error" and r.http_status == 422
    assert r.error == "HTTP 422: ignore_eos is not allowed"


def test_cut_stream_is_an_error() -> None:
    r, _ = _run(_streamer([_chunk({"content": "a"})]))
    assert r.status == "error"
    assert "ended before its end" in (r.error or "")


def test_error_event_in_stream() -> None:
    parts: list[bytes | float] = [
        _chunk({"content": "a"}),
        b'data: {"error": {"message": "out of memory"}}\n\n',
    ]
    r, _ = _run(_streamer(parts))
    assert r.status == "error" and "out of memory" in (r.error or "")


def test_malformed_event_does_not_reject_the_stream() -> None:
    parts: list[bytes | float] = [
        b"data: {not json\n\n",
        _chunk({"content": "a"}, finish="stop"),
        b": keep-alive comment\n\n",
        b"data: [DONE]\n\n",
    ]
    r, _ = _run(_streamer(parts))
    assert r.status == "ok"
    assert [c.kind for c in r.chunks] == ["empty", "content"]


def test_payload_keeps_extra_params_and_drops_usage_when_told() -> None:
    ep = Endpoint(
        url="http://x", params={"temperature": 0, "ignore_eos": True}, include_usage=False
    )
    body = json.loads(payload(ep, RequestSpec(0, "p", 3)))
    assert body["temperature"] == 0 and body["ignore_eos"] is True
    assert "stream_options" not in body


def test_unreachable_server_is_an_error_result() -> None:
    async def main() -> RequestResult:
        ep = Endpoint(url="http://127.0.0.1:9", model="m")
        r = RequestResult(
            point=0, request=0, phase="measured", intended_ns=None, sent_ns=0, end_ns=None
        )
        async with new_session(2.0) as session:
            await send(session, ep, RequestSpec(0, "p", 3), r)
        return r

    r = asyncio.run(main())
    assert r.status == "error" and r.http_status is None and r.error


def test_a_stream_that_only_pings_hits_the_deadline() -> None:
    async def pinger(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(100):
            await resp.write(b": ping\n\n")
            await asyncio.sleep(0.1)
        return resp

    async def main() -> RequestResult:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", pinger)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        ep = Endpoint(url=f"http://127.0.0.1:{port}", model="m")
        r = RequestResult(
            point=0, request=0, phase="measured", intended_ns=None, sent_ns=0, end_ns=None
        )
        try:
            async with new_session(1.0) as session:
                await send(session, ep, RequestSpec(0, "p", 3), r)
        finally:
            await runner.cleanup()
        return r

    t0 = time.perf_counter()
    r = asyncio.run(main())
    assert r.status == "error" and "Timeout" in (r.error or "")
    assert time.perf_counter() - t0 < 5
