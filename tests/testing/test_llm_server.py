"""The scripted LLM server answers as scripted: chunk times, chunking, usage, errors, queueing,
metrics and the CLI, checked from a real aiohttp client over real sockets."""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import pytest

from aaco.errors import UsageError
from aaco.testing.llm_server import (
    URL_LINE_PREFIX,
    Script,
    ServerHandle,
    _parser,
    _script_from_args,
    completion_text,
    count_prompt_tokens,
    serve_in_thread,
    start_process,
)

T = TypeVar("T")
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "say four words please"}]  # 4 prompt tokens


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@dataclass
class Stream:
    """What a client saw of one streamed response."""

    status: int
    events: list[Any] = field(default_factory=list)  # parsed JSON, or "[DONE]"
    arrival_ns: list[int] = field(default_factory=list)  # one per event
    sent_ns: int = 0
    error: BaseException | None = None

    @property
    def done(self) -> bool:
        return bool(self.events) and self.events[-1] == "[DONE]"

    def content_events(self) -> list[tuple[int, dict[str, Any]]]:
        """(arrival_ns, event) of the events that carry tokens."""
        out = []
        for t, e in zip(self.arrival_ns, self.events, strict=True):
            if e == "[DONE]" or not e["choices"]:
                continue
            choice = e["choices"][0]
            delta = choice.get("delta", {})
            if choice.get("text") or delta.get("content") or delta.get("reasoning_content"):
                out.append((t, e))
        return out


async def stream(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], path: str = CHAT
) -> Stream:
    sent = time.perf_counter_ns()
    async with session.post(url + path, json={**body, "stream": True}) as response:
        result = Stream(status=response.status, sent_ns=sent)
        if response.status != 200:
            result.events.append(await response.json())
            return result
        buffer = b""
        try:
            async for data in response.content.iter_any():
                now = time.perf_counter_ns()
                buffer += data
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    assert event.startswith(b"data: ")
                    payload = event[len(b"data: ") :]
                    result.events.append("[DONE]" if payload == b"[DONE]" else json.loads(payload))
                    result.arrival_ns.append(now)
        except aiohttp.ClientPayloadError as e:
            result.error = e
    return result


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as response:
        assert response.status == 200
        return await response.json()


async def records(session: aiohttp.ClientSession, url: str) -> dict[int, dict[str, Any]]:
    return {r["index"]: r for r in await get_json(session, url + "/debug/requests")}


def request_index(s: Stream) -> int:
    return int(s.events[0]["id"].rsplit("-", 1)[1])


async def gather(*aws: Awaitable[T]) -> list[T]:
    return list(await asyncio.gather(*aws))


# -- timing, against a server in its own process -------------------------------------------

TTFT, ITL, TOKENS = 0.030, 0.010, 12


@pytest.fixture(scope="module")
def timed_server() -> Iterator[ServerHandle]:
    with start_process(Script(ttft=TTFT, itl=ITL)) as server:
        yield server


def lateness_ms(record: dict[str, Any]) -> list[float]:
    """How late each chunk left the server, against its scripted deadline."""
    return [
        (t - record["slot_ns"]) / 1e6 - (TTFT + k * ITL) * 1e3
        for k, t in enumerate(record["chunk_ns"])
    ]


def check_timing(
    streams: list[Stream], recs: dict[int, dict[str, Any]], server_ms: float, client_ms: float
) -> None:
    """Chunks leave the server within ``server_ms`` of their deadlines and reach the client
    within ``client_ms`` of them (medians: this box runs other work too); never before."""
    late, delivery, ttft_err, itl_err = [], [], [], []
    for s in streams:
        assert s.done
        record = recs[request_index(s)]
        assert record["status"] == "ok" and record["completion_tokens"] == TOKENS
        arrivals = [t for t, _ in s.content_events()]
        assert len(arrivals) == TOKENS == len(record["chunk_ns"])
        late += lateness_ms(record)
        # the client's clock and the server's stamps are one CLOCK_MONOTONIC
        delivery += [(a - t) / 1e6 for a, t in zip(arrivals, record["chunk_ns"], strict=True)]
        ttft_err.append((arrivals[0] - record["slot_ns"]) / 1e6 - TTFT * 1e3)
        itl_err += [(b - a) / 1e6 - ITL * 1e3 for a, b in itertools.pairwise(arrivals)]
    # absolute deadlines: never early, and a late chunk does not push the later ones back
    assert min(late) > -0.05 and min(ttft_err) > -0.05
    assert statistics.median(late) < server_ms
    assert 0 < statistics.median(delivery) < client_ms
    assert min(ttft_err) < server_ms + client_ms
    assert abs(statistics.median(itl_err)) < client_ms


def deciles(xs: list[float]) -> list[float]:
    return [round(x, 2) for x in statistics.quantiles(xs, n=10)]


def test_chunk_times_one_stream(timed_server: ServerHandle) -> None:
    async def go() -> tuple[list[Stream], dict[int, dict[str, Any]]]:
        async with aiohttp.ClientSession() as session:
            body = {"messages": MESSAGES, "max_tokens": TOKENS}
            got = [await stream(session, timed_server.url, body) for _ in range(3)]
            return got, await records(session, timed_server.url)

    streams, recs = run(go())
    check_timing(streams, recs, server_ms=0.5, client_ms=1.0)


def test_chunk_times_64_streams(timed_server: ServerHandle) -> None:
    async def go() -> tuple[list[Stream], dict[int, dict[str, Any]]]:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as session:
            body = {"messages": MESSAGES, "max_tokens": TOKENS}
            got = await gather(*(stream(session, timed_server.url, body) for _ in range(64)))
            return got, await records(session, timed_server.url)

    streams, recs = run(go())
    check_timing(streams, recs, server_ms=2.0, client_ms=5.0)


# -- behaviour, against a server in a thread ------------------------------------------------

FAST = Script(ttft=0.002, itl=0.001)


def collect(script: Script, body: dict[str, Any], path: str = CHAT, n: int = 1) -> list[Stream]:
    async def go(url: str) -> list[Stream]:
        async with aiohttp.ClientSession() as session:
            return [await stream(session, url, body, path) for _ in range(n)]

    with serve_in_thread(script) as url:
        return run(go(url))


def deltas(s: Stream) -> list[dict[str, Any]]:
    return [e["choices"][0]["delta"] for e in s.events if e != "[DONE]" and e["choices"]]


def test_role_chunk_first_and_only_on_request() -> None:
    body = {"messages": MESSAGES, "max_tokens": 3}
    (with_role,) = collect(FAST, body)
    assert deltas(with_role)[0] == {"role": "assistant", "content": ""}
    assert [d.get("content") for d in deltas(with_role)[1:]] == [" w0", " w1", " w2"]
    (without,) = collect(Script(ttft=0.002, itl=0.001, role_chunk=False), body)
    assert [d for d in deltas(without) if "role" in d] == []
    assert "".join(d["content"] for d in deltas(without)) == completion_text(3)
    # the completions endpoint has no role chunk
    (text,) = collect(FAST, {"prompt": "a b", "max_tokens": 3}, path=COMPLETIONS)
    assert [e["choices"][0]["text"] for e in text.events[:-1]] == [" w0", " w1", " w2"]
    assert {e["object"] for e in text.events[:-1]} == {"text_completion"}


def test_reasoning_tokens_go_first_in_reasoning_content() -> None:
    script = Script(ttft=0.002, itl=0.001, reasoning_tokens=3, role_chunk=False)
    (s,) = collect(script, {"messages": MESSAGES, "max_tokens": 5})
    assert deltas(s) == [
        {"reasoning_content": " w0"},
        {"reasoning_content": " w1"},
        {"reasoning_content": " w2"},
        {"content": " w3"},
        {"content": " w4"},
    ]
    # a chunk across the boundary carries both
    script = Script(ttft=0.002, itl=0.001, reasoning_tokens=2, role_chunk=False, tokens_per_chunk=3)
    (s,) = collect(script, {"messages": MESSAGES, "max_tokens": 4})
    assert deltas(s) == [{"reasoning_content": " w0 w1", "content": " w2"}, {"content": " w3"}]


def test_usage_chunk_exactly_when_asked() -> None:
    asked = {"messages": MESSAGES, "max_tokens": 4, "stream_options": {"include_usage": True}}
    (s,) = collect(FAST, asked)
    assert s.done
    last = s.events[-2]
    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}
    assert all("usage" not in e for e in s.events[:-2])
    (s,) = collect(FAST, {"messages": MESSAGES, "max_tokens": 4})
    assert all(e["choices"] and "usage" not in e for e in s.events[:-1])
    (s,) = collect(Script(ttft=0.002, itl=0.001, usage="none"), asked)
    assert all(e["choices"] and "usage" not in e for e in s.events[:-1])


def test_continuous_usage_is_cumulative() -> None:
    script = Script(ttft=0.002, itl=0.001, usage="continuous", tokens_per_chunk=2)
    (s,) = collect(script, {"messages": MESSAGES, "max_tokens": 5})
    completions = [e["usage"]["completion_tokens"] for e in s.events[:-1]]
    assert completions == [0, 2, 4, 5]  # role chunk, then 2, 2, 1 tokens
    assert all(e["usage"]["prompt_tokens"] == 4 for e in s.events[:-1])
    assert all(e["choices"] for e in s.events[:-1])  # no usage-only chunk unless asked


def test_tokens_per_chunk_and_finish_reason() -> None:
    script = Script(ttft=0.002, itl=0.001, tokens_per_chunk=3, role_chunk=False)
    (s,) = collect(script, {"messages": MESSAGES, "max_completion_tokens": 8})
    texts = [d["content"] for d in deltas(s)]
    assert [len(t.split()) for t in texts] == [3, 3, 2]
    assert "".join(texts) == completion_text(8) == " w0 w1 w2 w3 w4 w5 w6 w7"
    finish = [e["choices"][0]["finish_reason"] for e in s.events[:-1]]
    assert finish == [None, None, "length"]
    first = s.events[0]
    assert first["object"] == "chat.completion.chunk" and first["model"] == "scripted"
    assert first["id"].startswith("chatcmpl-") and isinstance(first["created"], int)


def test_default_max_tokens() -> None:
    (s,) = collect(Script(ttft=0.0, itl=0.0, role_chunk=False), {"messages": MESSAGES})
    assert len(deltas(s)) == 16


def test_rejected_param_gets_422() -> None:
    script = Script(ttft=0.0, itl=0.0, reject_params=frozenset({"ignore_eos"}))
    (s,) = collect(script, {"messages": MESSAGES, "ignore_eos": True})
    assert s.status == 422
    error = s.events[0]["error"]
    assert error["param"] == "ignore_eos" and "ignore_eos" in error["message"]
    assert error["type"] == "invalid_request_error"
    (ok,) = collect(script, {"messages": MESSAGES, "max_tokens": 2})
    assert ok.status == 200 and ok.done


def test_fail_every_gets_500() -> None:
    script = Script(ttft=0.0, itl=0.0, fail_every=2)
    got = collect(script, {"messages": MESSAGES, "max_tokens": 2}, n=4)
    assert [s.status for s in got] == [200, 500, 200, 500]
    assert got[1].events[0]["error"]["type"] == "server_error"


def test_abort_after_cuts_without_done() -> None:
    script = Script(ttft=0.002, itl=0.002, abort_after=2, role_chunk=False)

    async def go(url: str) -> tuple[Stream, dict[int, dict[str, Any]]]:
        async with aiohttp.ClientSession() as session:
            s = await stream(session, url, {"messages": MESSAGES, "max_tokens": 6})
            return s, await records(session, url)

    with serve_in_thread(script) as url:
        s, recs = run(go(url))
    assert s.status == 200 and not s.done
    assert isinstance(s.error, aiohttp.ClientPayloadError)
    assert [d["content"] for d in deltas(s)] == [" w0", " w1"]
    record = recs[1]
    assert record["status"] == "aborted" and record["completion_tokens"] == 2
    # cut at chunk 2's deadline
    assert (record["end_ns"] - record["slot_ns"]) / 1e6 >= 2 + 2 * 2 - 0.05


def test_queueing_fifo_and_metrics() -> None:
    ttft, itl, n = 0.040, 0.010, 4
    service = ttft + (n - 1) * itl  # 70 ms from slot to the last chunk
    script = Script(ttft=ttft, itl=itl, max_concurrency=2, role_chunk=False)

    async def poll_waiting(session: aiohttp.ClientSession, url: str) -> list[float]:
        seen = []
        for _ in range(8):
            await asyncio.sleep(0.015)
            async with session.get(url + "/metrics") as response:
                for line in (await response.text()).splitlines():
                    if line.startswith("vllm:num_requests_waiting{"):
                        seen.append(float(line.rsplit(" ", 1)[1]))
        return seen

    async def go(url: str) -> tuple[list[Stream], list[float], dict[int, dict[str, Any]]]:
        async with aiohttp.ClientSession() as session:
            body = {"messages": MESSAGES, "max_tokens": n}
            streams = [asyncio.create_task(stream(session, url, body)) for _ in range(4)]
            waiting = await poll_waiting(session, url)
            done = await gather(*streams)
            return done, waiting, await records(session, url)

    with serve_in_thread(script) as url:
        streams, waiting, recs = run(go(url))
    assert all(s.done for s in streams)
    assert max(waiting) == 2 and waiting[-1] == 0
    queued = sorted(recs.values(), key=lambda r: r["arrival_ns"])
    waits_ms = [(r["slot_ns"] - r["arrival_ns"]) / 1e6 for r in queued]
    assert waits_ms[0] < 5 and waits_ms[1] < 5
    # FIFO: the later two get the slots in arrival order, each the moment a first one ends
    ends = sorted(r["end_ns"] for r in queued[:2])
    for r, end in zip(queued[2:], ends, strict=True):
        assert abs(r["slot_ns"] - end) / 1e6 < 2
        assert (r["slot_ns"] - r["arrival_ns"]) / 1e6 == pytest.approx(service * 1e3, abs=10)


def test_non_streaming_responses() -> None:
    script = Script(ttft=0.020, itl=0.005, reasoning_tokens=2)

    async def go(url: str) -> tuple[dict[str, Any], dict[str, Any], float]:
        async with aiohttp.ClientSession() as session:
            start = time.perf_counter()
            body = {"messages": MESSAGES, "max_tokens": 5}
            async with session.post(url + CHAT, json=body) as response:
                assert response.status == 200
                chat = await response.json()
            elapsed = time.perf_counter() - start
            body = {"prompt": ["one two", "three"], "max_tokens": 3}
            async with session.post(url + COMPLETIONS, json=body) as response:
                text = await response.json()
            return chat, text, elapsed

    with serve_in_thread(script) as url:
        chat, text, elapsed = run(go(url))
    assert elapsed >= 0.020 + 4 * 0.005
    assert chat["object"] == "chat.completion"
    choice = chat["choices"][0]
    assert choice["message"] == {
        "role": "assistant",
        "reasoning_content": " w0 w1",
        "content": " w2 w3 w4",
    }
    assert choice["finish_reason"] == "length"
    assert chat["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    assert text["object"] == "text_completion" and text["choices"][0]["text"] == " w0 w1 w2"
    assert text["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}


def test_models_health_metrics_and_stamps() -> None:
    script = Script(ttft=0.0, itl=0.0, model="tiny-llm", max_concurrency=4)

    async def go(url: str) -> tuple[Any, int, str, Any]:
        async with aiohttp.ClientSession() as session:
            await stream(session, url, {"messages": MESSAGES, "max_tokens": 3})
            async with session.post(url + CHAT, data=b"{not json") as response:
                assert response.status == 400
            models = await get_json(session, url + "/v1/models")
            async with session.get(url + "/health") as response:
                health = response.status
            async with session.get(url + "/metrics") as response:
                assert response.headers["Content-Type"].startswith("text/plain")
                metrics = await response.text()
            stamps = await get_json(session, url + "/debug/requests")
            async with session.delete(url + "/debug/requests") as response:
                assert response.status == 204
            assert await get_json(session, url + "/debug/requests") == []
            return models, health, metrics, stamps

    with serve_in_thread(script) as url:
        models, health, metrics, stamps = run(go(url))
    assert [m["id"] for m in models["data"]] == ["tiny-llm"]
    assert health == 200
    values = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if not line.startswith("#")
    }
    assert values == {
        "vllm:num_requests_running": 0.0,
        "vllm:num_requests_waiting": 0.0,
        "vllm:kv_cache_usage_perc": 0.0,
        "vllm:prompt_tokens_total": 4.0,
        "vllm:generation_tokens_total": 3.0,
        "vllm:prefix_cache_queries_total": 4.0,
        "vllm:prefix_cache_hits_total": 0.0,
    }
    assert 'vllm:num_requests_running{model_name="tiny-llm"} 0.0' in metrics
    parser = pytest.importorskip("prometheus_client.parser")
    families = {f.name: f.type for f in parser.text_string_to_metric_families(metrics)}
    assert families["vllm:num_requests_waiting"] == "gauge"
    assert families["vllm:generation_tokens"] == "counter"
    ok, bad = stamps
    assert list(ok) == [
        "index",
        "prompt_head",
        "arrival_ns",
        "slot_ns",
        "first_chunk_ns",
        "end_ns",
        "completion_tokens",
        "status",
        "chunk_ns",
    ]
    assert ok["status"] == "ok" and ok["completion_tokens"] == 3
    assert ok["arrival_ns"] <= ok["slot_ns"] <= ok["first_chunk_ns"] <= ok["end_ns"]
    assert ok["chunk_ns"][0] == ok["first_chunk_ns"] and len(ok["chunk_ns"]) == 3
    assert bad["status"] == "bad_request" and bad["slot_ns"] is None and bad["index"] == 2


def test_client_disconnect_frees_the_slot() -> None:
    script = Script(ttft=0.0, itl=0.005, max_concurrency=1, role_chunk=False)
    body = {"messages": MESSAGES, "max_tokens": 100, "stream": True}

    async def go(url: str) -> tuple[Stream, dict[int, dict[str, Any]]]:
        async with aiohttp.ClientSession() as session:
            async with session.post(url + CHAT, json=body) as running:
                await running.content.readuntil(b"\n\n")
                async with session.post(url + CHAT, json=body) as queued:
                    assert queued.status == 200  # headers at arrival, then it waits
                    queued.close()  # gone while queued
                running.close()  # gone mid-stream
            s = await stream(session, url, {"messages": MESSAGES, "max_tokens": 2})
            return s, await records(session, url)

    with serve_in_thread(script) as url:
        s, recs = run(go(url))
    assert s.done  # the third request got the only slot
    assert recs[1]["status"] == "disconnected" and 1 <= recs[1]["completion_tokens"] < 100
    assert recs[2]["status"] == "disconnected" and recs[2]["completion_tokens"] == 0
    assert recs[2]["slot_ns"] is not None and recs[2]["first_chunk_ns"] is None
    assert recs[3]["status"] == "ok"


def test_prompt_token_count() -> None:
    assert count_prompt_tokens({"prompt": "a b  c"}) == 3
    assert count_prompt_tokens({"prompt": [1, 2, 3, 4]}) == 4
    assert count_prompt_tokens({"prompt": ["a b", "c"]}) == 3
    parts = [{"type": "text", "text": "x y"}, {"type": "image_url", "image_url": {}}]
    body = {"messages": [{"role": "system", "content": "be brief"}, {"content": parts}]}
    assert count_prompt_tokens(body) == 4


def test_script_validation_and_argv_round_trip() -> None:
    with pytest.raises(UsageError, match="tokens_per_chunk"):
        Script(tokens_per_chunk=0)
    with pytest.raises(UsageError, match="usage"):
        Script(usage="sometimes")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="ttft"):
        Script(ttft=-1.0)
    script = Script(
        ttft=0.0123,
        itl=0.0045,
        tokens_per_chunk=2,
        role_chunk=False,
        reasoning_tokens=3,
        usage="continuous",
        max_concurrency=7,
        reject_params=frozenset({"ignore_eos", "min_tokens"}),
        fail_every=5,
        abort_after=9,
        model="m",
        default_max_tokens=32,
    )
    parsed = _script_from_args(_parser().parse_args(script.to_argv()))
    assert parsed == Script(**{**script.__dict__, "ttft": parsed.ttft, "itl": parsed.itl})
    assert parsed.ttft == pytest.approx(script.ttft) and parsed.itl == pytest.approx(script.itl)
    assert _script_from_args(_parser().parse_args(Script().to_argv())) == Script()


# -- the command line ----------------------------------------------------------------------


def test_cli_prints_url_and_exits_0_on_sigterm() -> None:
    command = [sys.executable, "-m", "aaco.testing.llm_server", "--port", "0", "--itl-ms", "1"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(URL_LINE_PREFIX + " http://127.0.0.1:")
        url = line.split()[1]

        async def go() -> Stream:
            async with aiohttp.ClientSession() as session:
                async with session.get(url + "/health") as response:
                    assert response.status == 200
                return await stream(session, url, {"prompt": "x", "max_tokens": 2}, COMPLETIONS)

        assert run(go()).done
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0
        assert process.stdout.read() == ""  # exactly one line
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
