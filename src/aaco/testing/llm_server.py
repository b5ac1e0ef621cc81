"""A scripted, OpenAI-compatible streaming LLM server whose timing is known by construction.

AACO's LLM load generator is tested against it: every answer it gives (when each chunk
goes out, how many tokens it carries, how long a request queues) is fixed by a
:class:`Script`, so a client's measured TTFT, inter-token latency and queueing can be
asserted against known values.

The script
----------
A generation request (``POST /v1/chat/completions`` or ``POST /v1/completions``) goes
through these steps:

1. **arrival**: checks in this order: a body that is not a JSON object, HTTP 400; a
   top-level key in ``Script.reject_params``, HTTP 422 naming it; every
   ``Script.fail_every``-th request (counted from 1 over all generation requests, the
   ``index`` of ``/debug/requests``), HTTP 500; a bad ``max_tokens``, HTTP 400. A
   streaming request then gets its response headers at once (as vLLM sends them).
2. **slot**: the request waits FIFO for one of ``Script.max_concurrency`` slots (no wait
   when unlimited). At the slot time ``t_slot`` a chat stream gets the role chunk
   (``delta: {"role": "assistant", "content": ""}``, no token) when ``Script.role_chunk``.
3. **content chunks**: the output is exactly ``max_completion_tokens`` (else
   ``max_tokens``, else ``Script.default_max_tokens``) tokens; nothing ends it early.
   Chunk ``k`` (0-based) carries tokens ``k*tokens_per_chunk`` up to the next multiple
   (the last may carry fewer) and is written at the absolute deadline
   ``t_slot + ttft + k*itl`` of the loop's clock: a late chunk does not delay the next.
   Token ``i``'s text is ``" w{i}"`` (``" w0"``, ``" w1"``, ...), so a full output of
   ``n`` tokens reads ``" w0 w1 ... w{n-1}"`` and counts ``n`` whitespace-separated words
   (:func:`completion_text`). On the chat endpoint the first ``reasoning_tokens`` tokens
   go in ``delta.reasoning_content`` instead of ``delta.content`` (a chunk that straddles
   the boundary carries both keys); they count as completion tokens. The last content
   chunk has ``finish_reason: "length"``, the others ``null``.
4. **end**: right after the last content chunk, in the same write: the usage chunk
   (``choices: []`` and ``usage``) when ``Script.usage`` is not ``"none"`` and the request
   asked ``stream_options: {"include_usage": true}``, then ``data: [DONE]``. The slot is
   then handed to the next waiting request. With ``usage="continuous"`` every chunk (role
   chunk included) also carries the cumulative ``usage``, asked for or not.

``abort_after = A`` (when the output has more than ``A`` chunks) writes chunks ``0..A-1``,
then closes the connection at chunk ``A``'s deadline, without ``[DONE]`` or the chunked
encoding's end. A non-streaming request waits until the last chunk's deadline and gets one
JSON body with the whole text and ``usage`` (an abort closes it at chunk ``A``'s deadline
with no response).

``prompt_tokens`` is a count of whitespace-separated words: of ``prompt`` (a string or a
list of strings; a list of token ids counts its ids) on ``/v1/completions``, of every
message's ``content`` (a string, or the ``text`` of its parts) on the chat endpoint
(:func:`count_prompt_tokens`).

Endpoints
---------
``POST /v1/chat/completions`` and ``POST /v1/completions`` (streaming or not), ``GET
/v1/models`` (the one model, ``Script.model``; any ``model`` a request names is accepted),
``GET /health`` (200), ``GET /metrics`` (Prometheus text, vLLM's names, a ``model_name``
label: gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` and
``vllm:kv_cache_usage_perc`` = running / ``max_concurrency`` (0 when unlimited), counters
``vllm:prompt_tokens_total`` and ``vllm:prefix_cache_queries_total`` (prompt tokens, at slot
time), ``vllm:generation_tokens_total`` (as chunks go out; a non-streaming response's
at its end) and
``vllm:prefix_cache_hits_total`` (0)), ``GET``/``DELETE /debug/requests`` (below).

Exactness
---------
Deadlines are absolute ``loop.time()`` values (``CLOCK_MONOTONIC``), and chunks are written
from timer callbacks, no task switch per chunk. The event loop waits on epoll through
``select()``, whose timeout has microsecond resolution (epoll's own is a millisecond,
rounded up: up to 1 ms late on every chunk), and the loop's thread asks the kernel for a
1 us timer slack (the default is 50 us). Measured on a 2-core VM with the server and the
client kept off the other work of the machine: a chunk leaves 0.02-0.07 ms after its
deadline (p99 0.1-0.2 ms) at 1, 64 and 512 streams and at 500 requests/s; chunks that share
a deadline go out back to back, each ``send`` costing 15-40 us. Where other processes hold
every core the scheduler adds milliseconds: compare a client's figures with the server's
stamps, not only with the script. The scripted times run from the slot, which starts when
the request's handler runs: a burst of requests also waits for the server to read the ones
ahead of it (aiohttp spends 0.1-0.3 ms of CPU on each), which ``arrival_ns`` shows. Nothing
is compressed, TCP_NODELAY is set (aiohttp sets it on every connection), and there is no
access log.

Server-side stamps
------------------
``GET /debug/requests`` lists one record per finished request (the latest
:data:`KEEP_RECORDS`), in ``index`` order::

    {"index": 3, "prompt_head": "r12 the quick ...", "arrival_ns": ..., "slot_ns": ...,
     "first_chunk_ns": ..., "end_ns": ..., "completion_tokens": 16, "status": "ok",
     "chunk_ns": [...]}

``prompt_head`` (the prompt's first 40 characters) lets a benchmark match the server's
record of a request with the client's.

stamped with ``time.perf_counter_ns()``: ``CLOCK_MONOTONIC`` on Linux, the same clock in
every process of the host, so a client in another process can compare its own
``perf_counter_ns()`` stamps with them. ``arrival_ns``: the handler starts (the request's
headers are read); ``slot_ns``: it gets its slot; ``chunk_ns``: each content chunk's
``send`` (the role chunk is not in it), ``first_chunk_ns`` the first of them; ``end_ns``:
the response is complete (or cut). A non-streaming request has one ``chunk_ns``, its
response. ``slot_ns`` and ``first_chunk_ns`` are ``null`` when the request never got that
far; ``completion_tokens`` counts the tokens actually sent; ``status`` is one of ``ok``,
``bad_request`` (400), ``rejected`` (422), ``failed`` (500), ``aborted`` (cut by
``abort_after``), ``disconnected`` (the client went away), ``cancelled`` (the server shut
down). ``DELETE /debug/requests`` empties the list (the index keeps counting). The
request's ``index`` is also in its response's ``id`` (``chatcmpl-3``, ``cmpl-3``).

Three ways to run it: ``python -m aaco.testing.llm_server --port 0 --ttft-ms 20 --itl-ms 5``
(prints ``AACO_LLM_SERVER_URL http://127.0.0.1:PORT`` once listening, serves until
SIGTERM or SIGINT, exits 0); :func:`start_process` (that command in a subprocess);
:func:`serve_in_thread` (an event loop in a daemon thread, for quick tests).
"""

from __future__ import annotations

import argparse
import array
import asyncio
import collections
import contextlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from aiohttp import web

from aaco.errors import RunError, UsageError
from aaco.serving.eventloop import new_event_loop as _precise_loop
from aaco.serving.eventloop import reduce_timer_slack

__all__ = [
    "KEEP_RECORDS",
    "URL_LINE_PREFIX",
    "Script",
    "ServerHandle",
    "UsageMode",
    "build_app",
    "completion_text",
    "count_prompt_tokens",
    "main",
    "new_event_loop",
    "serve",
    "serve_in_thread",
    "start_process",
    "token_text",
]

UsageMode = Literal["final", "continuous", "none"]
URL_LINE_PREFIX = "AACO_LLM_SERVER_URL"
KEEP_RECORDS = 100_000
"""``/debug/requests`` keeps the records of this many latest requests."""


@dataclass(frozen=True)
class Script:
    """What the server answers and when; all times in seconds.

    >>> Script(ttft=0.05, itl=0.01, tokens_per_chunk=2, max_concurrency=4).itl
    0.01
    """

    ttft: float = 0.02
    """Slot time to the first content chunk."""
    itl: float = 0.005
    """Gap between successive content chunks."""
    tokens_per_chunk: int = 1
    """Tokens per content chunk (the last may carry fewer)."""
    role_chunk: bool = True
    """Chat only: send ``delta: {"role": "assistant", "content": ""}`` at slot time."""
    reasoning_tokens: int = 0
    """Chat only: the first N tokens go out as ``delta.reasoning_content``."""
    usage: UsageMode = "final"
    """``final``: a usage chunk when the request asks; ``continuous``: also the cumulative
    usage on every chunk, asked for or not; ``none``: never."""
    max_concurrency: int | None = None
    """Slots; further requests wait FIFO. None: unlimited."""
    reject_params: frozenset[str] = field(default_factory=frozenset)
    """Top-level request keys answered with HTTP 422."""
    fail_every: int = 0
    """Every Nth generation request gets HTTP 500 (0: never)."""
    abort_after: int = 0
    """Cut each stream after this many content chunks (0: never)."""
    model: str = "scripted"
    """The served model name."""
    default_max_tokens: int = 16
    """Output length when the request names none."""

    def __post_init__(self) -> None:
        # a plain set or list passed by a caller still makes a hashable, frozen script
        object.__setattr__(self, "reject_params", frozenset(self.reject_params))
        for name in ("ttft", "itl"):
            value = getattr(self, name)
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (number and math.isfinite(value) and value >= 0):
                raise UsageError(f"Script.{name} must be a finite number >= 0, not {value!r}")
        minimums = {
            "tokens_per_chunk": 1,
            "reasoning_tokens": 0,
            "fail_every": 0,
            "abort_after": 0,
            "default_max_tokens": 1,
        }
        for name, low in minimums.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise UsageError(f"Script.{name} must be an integer >= {low}, not {value!r}")
        limit = self.max_concurrency
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or limit < 1
        ):
            raise UsageError(
                f"Script.max_concurrency must be None or an integer >= 1, "
                f"not {self.max_concurrency!r}"
            )
        if self.usage not in get_args(UsageMode):
            valid = ", ".join(get_args(UsageMode))
            raise UsageError(f"Script.usage must be one of {valid}, not {self.usage!r}")

    def to_argv(self) -> list[str]:
        """The command-line flags that make the CLI serve this script.

        >>> Script(ttft=0.02, itl=0.005).to_argv()[:4]
        ['--ttft-ms', '20.0', '--itl-ms', '5.0']
        """
        argv = [
            "--ttft-ms",
            repr(self.ttft * 1000),
            "--itl-ms",
            repr(self.itl * 1000),
            "--tokens-per-chunk",
            str(self.tokens_per_chunk),
            "--role-chunk" if self.role_chunk else "--no-role-chunk",
            "--reasoning-tokens",
            str(self.reasoning_tokens),
            "--usage",
            self.usage,
            "--max-concurrency",
            str(self.max_concurrency or 0),
            "--fail-every",
            str(self.fail_every),
            "--abort-after",
            str(self.abort_after),
            f"--model={self.model}",  # one token: a name may start with "-"
            "--default-max-tokens",
            str(self.default_max_tokens),
        ]
        for param in sorted(self.reject_params):
            argv.append(f"--reject-param={param}")
        return argv


@dataclass(frozen=True)
class ServerHandle:
    """A server started by :func:`start_process`: its base URL (no trailing slash) and pid."""

    url: str
    pid: int


def token_text(i: int) -> str:
    """The text of output token ``i`` (0-based): ``" w{i}"``."""
    return f" w{i}"


def completion_text(n: int, start: int = 0) -> str:
    """The text of output tokens ``start..n-1``.

    >>> completion_text(3)
    ' w0 w1 w2'
    """
    return "".join(f" w{i}" for i in range(start, n))


def _words(value: object) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        # a list of token ids counts its ids; a list of strings (or of id lists) its parts
        return sum(1 if isinstance(v, int) else _words(v) for v in value)
    return 0


def _prompt_head(body: Mapping[str, Any]) -> str | None:
    """The first 40 characters of the prompt (of the last chat message): lets a benchmark
    match the server's record of a request with the client's."""
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        content = messages[-1].get("content")
        return content[:40] if isinstance(content, str) else None
    prompt = body.get("prompt")
    return prompt[:40] if isinstance(prompt, str) else None


def count_prompt_tokens(body: Mapping[str, Any]) -> int:
    """The ``prompt_tokens`` the server reports for a request body: whitespace-separated
    words of ``prompt``, or of every chat message's content (token ids count one each).

    >>> count_prompt_tokens({"messages": [{"role": "user", "content": "two words"}]})
    2
    """
    messages = body.get("messages")
    if isinstance(messages, list):
        total = 0
        for message in messages:
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            if isinstance(content, list):
                total += sum(_words(p.get("text")) for p in content if isinstance(p, dict))
            else:
                total += _words(content)
        return total
    return _words(body.get("prompt"))


# -- the event loop -------------------------------------------------------------------------


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A plain asyncio loop whose timers fire within microseconds of their deadline
    (:func:`aaco.serving.eventloop.new_event_loop`)."""
    return _precise_loop()


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    if deadline <= loop.time():
        return
    future: asyncio.Future[None] = loop.create_future()
    handle = loop.call_at(deadline, _wake, future)
    try:
        await future
    finally:
        handle.cancel()


# -- the server -----------------------------------------------------------------------------


_JSON_HEADERS = {"Content-Type": "application/json"}
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_DONE = b"data: [DONE]\n\n"


class _Failed(Exception):
    """A request answered with an error body instead of a completion."""

    def __init__(self, http_status: int, status: str, message: str, kind: str, param: str | None):
        super().__init__(message)
        self.http_status = http_status
        self.status = status
        self.kind = kind
        self.param = param

    def response(self) -> web.Response:
        error = {"message": str(self), "type": self.kind, "param": self.param, "code": None}
        body = {"error": error}
        return web.Response(status=self.http_status, text=json.dumps(body), headers=_JSON_HEADERS)


class _Record:
    __slots__ = (
        "arrival_ns",
        "chunk_ns",
        "completion_tokens",
        "end_ns",
        "first_chunk_ns",
        "index",
        "prompt_head",
        "slot_ns",
        "status",
    )

    def __init__(self, index: int, arrival_ns: int) -> None:
        self.index = index
        self.arrival_ns = arrival_ns
        self.slot_ns: int | None = None
        self.first_chunk_ns: int | None = None
        self.end_ns: int | None = None
        self.completion_tokens = 0
        self.status = "ok"
        self.prompt_head: str | None = None
        self.chunk_ns = array.array("q")  # 8 bytes a stamp: long runs keep millions

    def as_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in _RECORD_KEYS}
        out["chunk_ns"] = self.chunk_ns.tolist()
        return out


_RECORD_KEYS = (
    "index",
    "prompt_head",
    "arrival_ns",
    "slot_ns",
    "first_chunk_ns",
    "end_ns",
    "completion_tokens",
    "status",
    "chunk_ns",
)


class _Request:
    """One generation request, parsed: what to send and how each chunk is encoded."""

    def __init__(self, script: Script, index: int, body: Mapping[str, Any], chat: bool) -> None:
        self.chat = chat
        self.n_tokens = _max_tokens(body, script.default_max_tokens)
        self.prompt_tokens = count_prompt_tokens(body)
        self.prompt_head = _prompt_head(body)
        self.stream = bool(body.get("stream", False))
        options = body.get("stream_options")
        asked = isinstance(options, dict) and options.get("include_usage") is True
        self.usage_chunk = self.stream and asked and script.usage != "none"
        self.continuous = script.usage == "continuous"
        self.tpc = script.tokens_per_chunk
        self.n_chunks = -(-self.n_tokens // self.tpc)
        self.reasoning = script.reasoning_tokens if chat else 0
        self.id = f"chatcmpl-{index}" if chat else f"cmpl-{index}"
        self.created = int(time.time())
        self.model = script.model
        obj = "chat.completion.chunk" if chat else "text_completion"
        # every chunk starts alike: built once, not json.dumps'ed per chunk
        self._head = (
            f'data: {{"id":"{self.id}","object":"{obj}","created":{self.created},'
            f'"model":{json.dumps(script.model)},"choices":'
        )

    def chunk_tokens(self, k: int) -> tuple[int, int]:
        return k * self.tpc, min(self.n_tokens, (k + 1) * self.tpc)

    def usage(self, completion: int) -> dict[str, int]:
        p = self.prompt_tokens
        return {"prompt_tokens": p, "completion_tokens": completion, "total_tokens": p + completion}

    def _usage(self, completion: int) -> str:
        p = self.prompt_tokens
        return (
            f'"usage":{{"prompt_tokens":{p},"completion_tokens":{completion},'
            f'"total_tokens":{p + completion}}}'
        )

    def _event(self, choice: str, completion: int) -> str:
        usage = "," + self._usage(completion) if self.continuous else ""
        return f"{self._head}[{choice}]{usage}}}\n\n"

    def role_event(self) -> bytes:
        choice = (
            '{"index":0,"delta":{"role":"assistant","content":""},'
            '"logprobs":null,"finish_reason":null}'
        )
        return self._event(choice, 0).encode()

    def content_event(self, k: int) -> bytes:
        lo, hi = self.chunk_tokens(k)
        finish = '"length"' if hi == self.n_tokens else "null"
        if self.chat:
            parts = []
            if lo < self.reasoning:
                text = completion_text(min(hi, self.reasoning), lo)
                parts.append(f'"reasoning_content":"{text}"')
            if hi > self.reasoning:
                parts.append(f'"content":"{completion_text(hi, max(lo, self.reasoning))}"')
            body = f'"delta":{{{",".join(parts)}}}'
        else:
            body = f'"text":"{completion_text(hi, lo)}"'
        choice = f'{{"index":0,{body},"logprobs":null,"finish_reason":{finish}}}'
        event = self._event(choice, hi)
        if hi == self.n_tokens and self.usage_chunk:
            event += f"{self._head}[],{self._usage(hi)}}}\n\n"
        return event.encode()

    def full_response(self) -> dict[str, Any]:
        n = self.n_tokens
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            message: dict[str, Any] = {"role": "assistant"}
            if self.reasoning:
                message["reasoning_content"] = completion_text(min(n, self.reasoning))
            message["content"] = completion_text(n, min(n, self.reasoning))
            choice["message"] = message
        else:
            choice["text"] = completion_text(n)
        choice.update(logprobs=None, finish_reason="length")
        return {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(n),
        }


def _max_tokens(body: Mapping[str, Any], default: int) -> int:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise _Failed(
                400, "bad_request", f"{key} must be an integer >= 1", "invalid_request_error", key
            )
        return value
    return default


class _Emitter:
    """Writes one stream's content chunks from timer callbacks at their absolute deadlines.

    No task switch and no coroutine per chunk: a chunk costs a timer, a string and one
    ``send``, so streams that share a deadline go out back to back. The HTTP chunked
    framing is written here (aiohttp's own ``write`` is a coroutine); aiohttp still writes
    the headers and the closing zero-length chunk.
    """

    def __init__(
        self,
        server: _Server,
        request: web.Request,
        chunked: bool,
        parsed: _Request,
        record: _Record,
        t_slot: float,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.server = server
        self.request = request
        self.transport = request.transport
        self.chunked = chunked
        self.parsed = parsed
        self.record = record
        self.first = t_slot + server.script.ttft
        self.itl = server.script.itl
        self.abort = server.script.abort_after or -1  # 0: never
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.k = 0
        self.handle: asyncio.TimerHandle | None = None

    def check_connected(self) -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("the client closed the connection")

    def write(self, payload: bytes) -> None:
        self.check_connected()
        assert self.transport is not None
        self.transport.write(b"%x\r\n%b\r\n" % (len(payload), payload) if self.chunked else payload)

    def start(self) -> None:
        self.handle = self.loop.call_at(self.first, self._emit)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()

    def _emit(self) -> None:
        k, parsed, record = self.k, self.parsed, self.record
        if k == self.abort:
            record.status = "aborted"
            _cut(self.request)
            self.done.set_result(None)
            return
        lo, hi = parsed.chunk_tokens(k)
        last = hi == parsed.n_tokens
        event = parsed.content_event(k)
        now = time.perf_counter_ns()
        try:
            self.write(event + _DONE if last else event)
        except ConnectionError as e:
            self.done.set_exception(e)
            return
        if k == 0:
            record.first_chunk_ns = now
        record.chunk_ns.append(now)
        record.completion_tokens = hi
        self.server.generation_tokens_total += hi - lo
        if last:
            self.done.set_result(None)
            return
        self.k = k + 1
        self.handle = self.loop.call_at(self.first + self.k * self.itl, self._emit)


class _Server:
    """The state behind one app: slots, counters and the finished requests' records."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.created = int(time.time())
        self.count = 0
        self.running = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.records: collections.deque[_Record] = collections.deque(maxlen=KEEP_RECORDS)

    # FIFO slots: a release hands its slot straight to the oldest waiter
    async def acquire(self) -> None:
        limit = self.script.max_concurrency
        if limit is None or (self.running < limit and not self.waiters):
            self.running += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(future)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # the slot reached us as we were cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self.waiters.remove(future)
            raise

    def release(self) -> None:
        while self.waiters:
            future = self.waiters.popleft()
            if not future.done():
                future.set_result(None)
                return
        self.running -= 1

    # -- handlers --------------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        self.count += 1
        record = _Record(self.count, time.perf_counter_ns())
        try:
            parsed = self._admit(record.index, await request.read(), chat)
            record.prompt_head = parsed.prompt_head
        except _Failed as failure:
            record.status = failure.status
            record.end_ns = time.perf_counter_ns()
            self.records.append(record)
            return failure.response()
        try:
            if parsed.stream:
                return await self._stream(request, parsed, record)
            return await self._respond(request, parsed, record)
        except asyncio.CancelledError:
            record.status = "cancelled"
            raise
        finally:
            record.end_ns = time.perf_counter_ns()
            self.records.append(record)

    def _admit(self, index: int, raw: bytes, chat: bool) -> _Request:
        try:
            body = json.loads(raw)
        except ValueError as e:
            raise _Failed(
                400, "bad_request", f"invalid JSON body: {e}", "invalid_request_error", None
            ) from None
        if not isinstance(body, dict):
            raise _Failed(
                400, "bad_request", "the body must be a JSON object", "invalid_request_error", None
            )
        rejected = sorted(k for k in body if k in self.script.reject_params)
        if rejected:
            names = ", ".join(rejected)
            raise _Failed(
                422,
                "rejected",
                f"unsupported parameter(s): {names}",
                "invalid_request_error",
                rejected[0],
            )
        if self.script.fail_every and index % self.script.fail_every == 0:
            raise _Failed(
                500,
                "failed",
                f"scripted failure: request {index} (fail_every={self.script.fail_every})",
                "server_error",
                None,
            )
        return _Request(self.script, index, body, chat)

    async def _take_slot(self, record: _Record, parsed: _Request) -> float:
        await self.acquire()
        loop = asyncio.get_running_loop()
        t_slot = loop.time()
        record.slot_ns = time.perf_counter_ns()
        self.prompt_tokens_total += parsed.prompt_tokens
        return t_slot

    async def _stream(
        self, request: web.Request, parsed: _Request, record: _Record
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers=_SSE_HEADERS)
        if request.version >= (1, 1):
            response.enable_chunked_encoding()  # the emitter frames the chunks itself
        await response.prepare(request)  # sends the headers now, as vLLM does
        t_slot = await self._take_slot(record, parsed)
        emitter = _Emitter(self, request, response.chunked, parsed, record, t_slot)
        try:
            emitter.check_connected()  # a client gone while queued frees its slot now
            if parsed.chat and self.script.role_chunk:
                emitter.write(parsed.role_event())
            emitter.start()
            await emitter.done
            if record.status != "aborted":
                await response.write_eof()
        except ConnectionError:
            # the client went away: aiohttp ignores the response we hand back (no log)
            record.status = "disconnected"
        finally:
            emitter.cancel()
            self.release()
        return response

    async def _respond(
        self, request: web.Request, parsed: _Request, record: _Record
    ) -> web.Response:
        loop = asyncio.get_running_loop()
        t_slot = await self._take_slot(record, parsed)
        try:
            first = t_slot + self.script.ttft
            abort = self.script.abort_after
            if abort and abort < parsed.n_chunks:
                await _sleep_until(loop, first + abort * self.script.itl)
                record.status = "aborted"
                record.completion_tokens = parsed.chunk_tokens(abort - 1)[1]
                _cut(request)
                return web.Response(status=500)  # never sent: the connection is gone
            await _sleep_until(loop, first + (parsed.n_chunks - 1) * self.script.itl)
            record.first_chunk_ns = time.perf_counter_ns()
            record.chunk_ns.append(record.first_chunk_ns)
            record.completion_tokens = parsed.n_tokens
            self.generation_tokens_total += parsed.n_tokens
            return web.Response(text=json.dumps(parsed.full_response()), headers=_JSON_HEADERS)
        finally:
            self.release()

    async def models(self, request: web.Request) -> web.Response:
        entry = {
            "id": self.script.model,
            "object": "model",
            "created": self.created,
            "owned_by": "aaco",
        }
        return web.json_response({"object": "list", "data": [entry]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def debug_requests(self, request: web.Request) -> web.Response:
        records = sorted(self.records, key=lambda r: r.index)
        return web.json_response([r.as_dict() for r in records])

    async def clear_requests(self, request: web.Request) -> web.Response:
        self.records.clear()
        return web.Response(status=204)

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=self.exposition(),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Prometheus-Format": "0.0.4"},
        )

    def exposition(self) -> str:
        """The Prometheus text exposition, vLLM's metric names, one ``model_name`` label."""
        limit = self.script.max_concurrency
        waiting = sum(1 for w in self.waiters if not w.done())
        series: list[tuple[str, str, str, float]] = [
            (
                "vllm:num_requests_running",
                "gauge",
                "Requests in model execution batches.",
                self.running,
            ),
            ("vllm:num_requests_waiting", "gauge", "Requests waiting to be processed.", waiting),
            (
                "vllm:kv_cache_usage_perc",
                "gauge",
                "KV-cache usage. 1 means 100 percent usage.",
                self.running / limit if limit else 0.0,
            ),
            (
                "vllm:prompt_tokens_total",
                "counter",
                "Number of prefill tokens processed.",
                self.prompt_tokens_total,
            ),
            (
                "vllm:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                self.generation_tokens_total,
            ),
            (
                "vllm:prefix_cache_queries_total",
                "counter",
                "Prefix cache queries, in terms of number of queried tokens.",
                self.prompt_tokens_total,
            ),
            (
                "vllm:prefix_cache_hits_total",
                "counter",
                "Prefix cache hits, in terms of number of cached tokens.",
                0,
            ),
        ]
        label = _label_value(self.script.model)
        lines = []
        for name, kind, help_text, value in series:
            lines += [
                f"# HELP {name} {help_text}",
                f"# TYPE {name} {kind}",
                f'{name}{{model_name="{label}"}} {float(value)!r}',
            ]
        return "\n".join(lines) + "\n"


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _cut(request: web.Request) -> None:
    """Close the connection mid-response, as a crashed server would."""
    transport = request.transport
    if transport is not None:
        transport.close()


def build_app(script: Script) -> web.Application:
    """The aiohttp application serving ``script`` (routes listed in the module docstring)."""
    server = _Server(script)
    app = web.Application()
    app.add_routes(
        [
            web.post("/v1/chat/completions", server.chat),
            web.post("/v1/completions", server.completions),
            web.get("/v1/models", server.models),
            web.get("/health", server.health),
            web.get("/metrics", server.metrics),
            web.get("/debug/requests", server.debug_requests),
            web.delete("/debug/requests", server.clear_requests),
        ]
    )
    return app


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve(
    script: Script,
    stop: asyncio.Event,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``script`` on ``host:port`` (0: a free port) until ``stop`` is set; ``on_ready``
    gets the base URL once the socket listens. Run it on :func:`new_event_loop`'s loop for
    sub-millisecond timing."""
    reduce_timer_slack()  # per thread: the loop's own, as this coroutine runs on it
    runner = web.AppRunner(build_app(script), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    try:
        # a 512-stream burst connects at once: the default backlog of 128 drops SYNs,
        # and a dropped SYN costs the client a 1 s retransmission
        site = web.TCPSite(runner, host, port, backlog=4096)
        await site.start()
        bound = runner.addresses[0]
        if on_ready is not None:
            on_ready(_url(host, int(bound[1])))
        await stop.wait()
    finally:
        await runner.cleanup()


@contextlib.contextmanager
def serve_in_thread(
    script: Script, *, host: str = "127.0.0.1", port: int = 0, timeout: float = 30.0
) -> Iterator[str]:
    """Serve ``script`` from a daemon thread with its own event loop; yields the base URL.

    The server shares the caller's process (and GIL): fine for behaviour tests, use
    :func:`start_process` for timing.

    >>> with serve_in_thread(Script(ttft=0.0, itl=0.0)) as url:  # doctest: +SKIP
    ...     ...
    """
    loop = new_event_loop()
    stop = asyncio.Event()
    started = threading.Event()
    outcome: list[str | BaseException] = []

    def ready(url: str) -> None:
        outcome.append(url)
        started.set()

    def run() -> None:
        try:
            loop.run_until_complete(serve(script, stop, host=host, port=port, on_ready=ready))
        except BaseException as e:  # handed to the caller, who raises it
            outcome.append(e)
            started.set()
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="aaco-llm-server", daemon=True)
    thread.start()
    try:
        if not started.wait(timeout):
            raise RunError(f"the scripted LLM server did not start within {timeout} s")
        first = outcome[0]
        if isinstance(first, BaseException):
            raise RunError(f"the scripted LLM server did not start: {first}") from first
        yield first
    finally:
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)


def _read_url(process: subprocess.Popen[bytes], timeout: float) -> str:
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout
    seen = b""
    while True:
        for line in seen.split(b"\n")[:-1]:
            text = line.decode(errors="replace").strip()
            if text.startswith(URL_LINE_PREFIX + " "):
                return text.split(" ", 1)[1]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RunError(f"the scripted LLM server printed no URL within {timeout} s")
        readable, _, _ = select.select([fd], [], [], remaining)
        if readable:
            data = os.read(fd, 4096)
            if not data:
                code = process.wait()
                raise RunError(f"the scripted LLM server exited with code {code} before listening")
            seen += data


@contextlib.contextmanager
def start_process(
    script: Script,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    timeout: float = 30.0,
    grace: float = 5.0,
) -> Iterator[ServerHandle]:
    """Run the server CLI (``python -m aaco.testing.llm_server``) in a subprocess; yields
    its URL and pid once it listens, sends SIGTERM on exit (SIGKILL after ``grace`` s).

    >>> with start_process(Script(ttft=0.02, itl=0.005)) as server:  # doctest: +SKIP
    ...     print(server.url)
    http://127.0.0.1:...
    """
    command = [
        sys.executable,
        "-m",
        "aaco.testing.llm_server",
        "--host",
        host,
        "--port",
        str(port),
        *script.to_argv(),
    ]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        url = _read_url(process, timeout)
        yield ServerHandle(url=url, pid=process.pid)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        assert process.stdout is not None
        process.stdout.close()


# -- the command line -----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    d = Script()
    p = argparse.ArgumentParser(
        prog="python -m aaco.testing.llm_server",
        description="A scripted OpenAI-compatible streaming LLM server with known timing. "
        f"Prints '{URL_LINE_PREFIX} http://HOST:PORT' once listening; serves until SIGTERM "
        "or SIGINT.",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: a free port (default)")
    p.add_argument(
        "--ttft-ms", type=float, default=d.ttft * 1000, help="slot to first content chunk"
    )
    p.add_argument("--itl-ms", type=float, default=d.itl * 1000, help="gap between chunks")
    p.add_argument("--tokens-per-chunk", type=int, default=d.tokens_per_chunk)
    p.add_argument(
        "--role-chunk",
        action=argparse.BooleanOptionalAction,
        default=d.role_chunk,
        help="chat: a role-only chunk at slot time",
    )
    p.add_argument(
        "--reasoning-tokens",
        type=int,
        default=d.reasoning_tokens,
        help="chat: the first N tokens go in delta.reasoning_content",
    )
    p.add_argument(
        "--usage",
        choices=get_args(UsageMode),
        default=d.usage,
        help="final: a usage chunk when asked; continuous: also on every chunk; none: never",
    )
    p.add_argument("--max-concurrency", type=int, default=0, help="0: unlimited (default)")
    p.add_argument(
        "--reject-param",
        action="append",
        default=[],
        metavar="KEY",
        help="answer requests carrying this top-level key with HTTP 422 (repeatable)",
    )
    p.add_argument(
        "--fail-every", type=int, default=d.fail_every, help="HTTP 500 on every Nth request"
    )
    p.add_argument(
        "--abort-after", type=int, default=d.abort_after, help="cut streams after N chunks"
    )
    p.add_argument("--model", default=d.model, help="the served model name")
    p.add_argument(
        "--default-max-tokens",
        type=int,
        default=d.default_max_tokens,
        help="output length when a request names none",
    )
    return p


def _script_from_args(args: argparse.Namespace) -> Script:
    return Script(
        ttft=args.ttft_ms / 1000,
        itl=args.itl_ms / 1000,
        tokens_per_chunk=args.tokens_per_chunk,
        role_chunk=args.role_chunk,
        reasoning_tokens=args.reasoning_tokens,
        usage=args.usage,
        max_concurrency=args.max_concurrency or None,
        reject_params=frozenset(args.reject_param),
        fail_every=args.fail_every,
        abort_after=args.abort_after,
        model=args.model,
        default_max_tokens=args.default_max_tokens,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI: serve until SIGTERM or SIGINT, then return 0."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        script = _script_from_args(args)
    except UsageError as e:
        parser.error(str(e))
    loop = new_event_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    def ready(url: str) -> None:
        # the one line a parent process waits for
        print(f"{URL_LINE_PREFIX} {url}", flush=True)

    try:
        loop.run_until_complete(serve(script, stop, host=args.host, port=args.port, on_ready=ready))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
