"""The streaming client of ``aaco llm bench``: one OpenAI-compatible request, read chunk by
chunk with a monotonic stamp per read.

Lean on purpose (the client must not be what it measures): aiohttp with no connection cap
and a 1 MiB read buffer, Server-Sent Events split by hand on the raw bytes as they arrive,
each event decoded with msgspec, ``time.perf_counter_ns`` read once per network read (events
that arrived in one read did arrive together and share the stamp).

What a chunk carries is classified (:data:`aaco.analysis.serving.TOKEN_KINDS`): answer
``content``, ``reasoning`` (``reasoning_content`` / ``reasoning``), ``tool`` (tool-call
deltas), or nothing generated: ``role`` (role-only), ``usage`` (usage-only) and ``empty``.
A cumulative ``usage`` in a content chunk (vLLM's ``continuous_usage_stats``) gives the
chunk's own token count; the last ``usage`` gives the request's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec

from aaco.analysis.serving import Chunk, RequestResult

__all__ = ["ENDPOINTS", "Endpoint", "RequestSpec", "new_session", "payload", "send"]

#: the API paths of the two endpoints (``--endpoint``)
ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
_READ_BUFFER = 1 << 20
_decode = msgspec.json.Decoder()


@dataclass(frozen=True)
class Endpoint:
    """Where and how to send: base URL, endpoint kind, model, headers, extra body fields."""

    url: str
    kind: str = "chat"
    model: str = ""
    api_key: str | None = None
    #: extra top-level request fields (``--param``), sent with every request
    params: Mapping[str, Any] = field(default_factory=dict)
    #: ask for ``stream_options.include_usage`` (dropped when the server refuses it)
    include_usage: bool = True

    @property
    def target(self) -> str:
        return self.url.rstrip("/") + ENDPOINTS[self.kind]

    @property
    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h


@dataclass(frozen=True)
class RequestSpec:
    """One request of the plan: its prompt and output length."""

    index: int
    prompt: str
    max_tokens: int
    #: input tokens of the prompt when the tokenizer is known
    prompt_tokens: int | None = None


def payload(endpoint: Endpoint, spec: RequestSpec, *, stream: bool = True) -> bytes:
    """The JSON body of ``spec`` for ``endpoint``."""
    body: dict[str, Any] = {"model": endpoint.model, "max_tokens": spec.max_tokens}
    if endpoint.kind == "chat":
        body["messages"] = [{"role": "user", "content": spec.prompt}]
    else:
        body["prompt"] = spec.prompt
    body["stream"] = stream
    if stream and endpoint.include_usage:
        body["stream_options"] = {"include_usage": True}
    body.update(endpoint.params)
    return msgspec.json.encode(body)


class _SendStamp:
    """Filled by the trace hook: when the request body was handed to the socket."""

    __slots__ = ("ns",)

    def __init__(self) -> None:
        self.ns: int | None = None


async def _on_body_sent(
    _session: aiohttp.ClientSession, ctx: Any, _params: aiohttp.TraceRequestChunkSentParams
) -> None:
    stamp = ctx.trace_request_ctx
    if isinstance(stamp, _SendStamp):
        stamp.ns = time.perf_counter_ns()


def new_session(timeout_s: float | None = None) -> aiohttp.ClientSession:
    """A client session with no connection cap, large read buffers, a deadline of
    ``timeout_s`` on each whole request (None: none), and a trace hook that stamps the moment
    each request's body is written to the socket."""
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300)
    # a deadline on the whole request: a read timeout alone restarts on every keep-alive
    # comment, so a stalled stream that pings would never end
    timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=30, sock_read=timeout_s)
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_on_body_sent)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        read_bufsize=_READ_BUFFER,
        auto_decompress=False,
        trace_configs=[trace],
    )


def _error_text(body: bytes) -> str:
    try:
        data = _decode.decode(body)
    except msgspec.DecodeError:
        return body.decode("utf-8", "replace").strip().splitlines()[0][:300] if body else ""
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data))
        if isinstance(err, dict):
            err = err.get("message", err)
        return str(err)[:300]
    return str(data)[:300]


class _Stream:
    """The state of one response's event parsing."""

    def __init__(self, result: RequestResult, keep_text: bool) -> None:
        self.result = result
        self.keep_text = keep_text
        self.done = False
        self.finished = False  # a finish_reason was seen
        #: the completion tokens of the last usage seen (None: no chunk carried usage yet)
        self.cum_usage: int | None = None

    def event(self, data: bytes, t_ns: int) -> None:
        if data == b"[DONE]":
            self.done = True
            return
        try:
            obj = _decode.decode(data)
        except msgspec.DecodeError:
            self.result.chunks.append(Chunk(t_ns=t_ns, kind="empty"))
            return
        if not isinstance(obj, dict):
            return
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise _StreamError(f"server error in stream: {str(msg)[:200]}")
        usage = obj.get("usage")
        text, reasoning, tool, role = "", "", False, False
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if choice.get("finish_reason"):
                self.finished = True
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text += _text(delta.get("content"))
                reasoning += _text(delta.get("reasoning_content") or delta.get("reasoning"))
                tool = tool or bool(delta.get("tool_calls") or delta.get("function_call"))
                role = role or "role" in delta
            else:
                text += _text(choice.get("text"))
        if text or tool:
            kind = "content"
            kind = "tool" if tool and not text else kind
        elif reasoning:
            kind = "reasoning"
        elif role:
            kind = "role"
        elif usage is not None:
            kind = "usage"
        else:
            kind = "empty"
        tokens: int | None = None
        if isinstance(usage, dict):
            completion = usage.get("completion_tokens")
            if isinstance(completion, int):
                # A running count (vLLM's continuous_usage_stats) gives a chunk its own
                # tokens, but only once an earlier chunk carried usage: a server that puts
                # the request's total on its last content chunk does not mean that chunk
                # carried them all (finalize() fills a single unknown chunk from the total)
                if kind in ("content", "reasoning", "tool") and self.cum_usage is not None:
                    tokens = max(0, completion - self.cum_usage)
                self.cum_usage = completion
                self.result.usage_tokens = completion
            prompt = usage.get("prompt_tokens")
            if isinstance(prompt, int):
                self.result.prompt_tokens = prompt
        body = text + reasoning
        self.result.chunks.append(
            Chunk(
                t_ns=t_ns,
                kind=kind,
                tokens=tokens,
                chars=len(body),
                text=body if self.keep_text else "",
            )
        )


class _StreamError(Exception):
    pass


def _text(value: Any) -> str:
    """A delta's text: a string, or the text parts of a content-part list; "" otherwise."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(
            p["text"] for p in value if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def _events(buf: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events' data fields in ``buf`` (``\r\n``, ``\r`` or ``\n`` line ends;
    several ``data:`` lines of one event joined by ``\n``, as the SSE spec says), and the
    incomplete rest. A trailing ``\r`` stays in the rest: its ``\n`` may be in the next
    read."""
    if b"\r" in buf:
        tail = buf.endswith(b"\r")
        buf = buf[:-1] if tail else buf
        buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + (b"\r" if tail else b"")
    out: list[bytes] = []
    while True:
        cut = buf.find(b"\n\n")
        if cut < 0:
            return out, buf
        event, buf = buf[:cut], buf[cut + 2 :]
        data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            out.append(b"\n".join(data).strip())


async def send(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    spec: RequestSpec,
    result: RequestResult,
    *,
    keep_text: bool = False,
) -> None:
    """Send ``spec`` and record the response into ``result`` (submit and send stamps,
    chunks, end, status); never raises for a failed request: the failure is the result's
    status and error.

    ``submit_ns`` is when the client began the request; ``sent_ns`` when its body was
    written to the socket (the trace hook), after the connection was taken and the headers
    built: latency counts from there, and the client's own cost in between is reported
    apart. Without the hook's stamp (a session not made by :func:`new_session`) the send is
    the submit. The chunks' text is kept only with ``keep_text`` (for re-tokenizing): a
    long run holds every chunk in memory, about 100 bytes each without it."""
    body = payload(endpoint, spec)
    result.max_tokens = spec.max_tokens
    stream = _Stream(result, keep_text)
    stamp = _SendStamp()
    result.submit_ns = result.sent_ns = time.perf_counter_ns()
    try:
        async with session.post(
            endpoint.target, data=body, headers=endpoint.headers, trace_request_ctx=stamp
        ) as resp:
            if stamp.ns is not None:
                result.sent_ns = stamp.ns
            result.http_status = resp.status
            if resp.status != 200:
                text = await resp.read()
                result.end_ns = time.perf_counter_ns()
                result.status = "error"
                result.error = f"HTTP {resp.status}: {_error_text(text)}".strip()
                return
            buf = b""
            async for data in resp.content.iter_any():
                t = time.perf_counter_ns()
                events, buf = _events(buf + data)
                for event in events:
                    stream.event(event, t)
                if stream.done:
                    break  # [DONE]: the response is complete, whatever the server does next
            result.end_ns = time.perf_counter_ns()
            if not stream.done and buf.strip():
                # a last event without its blank line, at the body's end
                events, _ = _events(buf.rstrip(b"\r\n") + b"\n\n")
                for event in events:
                    stream.event(event, result.end_ns)
            if not stream.done and not stream.finished:
                result.status = "error"
                result.error = "the stream ended before its end ([DONE] or a finish_reason)"
    except (_StreamError, TypeError, ValueError, KeyError, AttributeError) as exc:
        # a malformed event fails this request, never the run
        result.sent_ns = stamp.ns or result.sent_ns
        result.end_ns = time.perf_counter_ns()
        result.status = "error"
        result.error = (
            str(exc) if isinstance(exc, _StreamError) else f"malformed event: {exc}"[:300]
        )
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        result.sent_ns = stamp.ns or result.sent_ns
        result.end_ns = time.perf_counter_ns()
        result.status = "error"
        name = type(exc).__name__
        result.error = f"{name}: {exc}"[:300] if str(exc) else name
