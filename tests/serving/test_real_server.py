"""A real `transformers serve` on the tiny offline Llama streams exactly `max_tokens` tokens, in
one chunk per token with the word tokenizer and fewer chunks than tokens with the byte-level one,
and rejects the vLLM-only `ignore_eos` with a 422."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from tests.serving.real_server import (
    TokenizerKind,
    build_tiny_llama,
    transformers_serve_available,
    transformers_server,
)

UNAVAILABLE = transformers_serve_available()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")

CHAT = "/v1/chat/completions"
# multi-byte characters in the prompt, as the byte-level tokenizer's merges have them
MESSAGES = [{"role": "user", "content": "the quick brown fox, café 日本 🙂"}]


@pytest.fixture(scope="module", params=["bytelevel", "word"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TokenizerKind, str]]:
    kind: TokenizerKind = request.param
    model_dir = build_tiny_llama(tmp_path_factory.mktemp(f"llama-{kind}"), kind)
    with transformers_server(model_dir) as base_url:
        yield kind, base_url


async def _post(base_url: str, body: dict[str, Any]) -> tuple[int, str]:
    timeout = aiohttp.ClientTimeout(total=60)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(base_url + CHAT, json=body) as reply,
    ):
        return reply.status, await reply.text()


def _events(sse: str) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE body's `data:` lines (transformers sends no `[DONE]`)."""
    payloads = [
        line[len("data:") :].strip() for line in sse.splitlines() if line.startswith("data:")
    ]
    return [json.loads(payload) for payload in payloads if payload != "[DONE]"]


def test_stream_carries_max_tokens(server: tuple[TokenizerKind, str]) -> None:
    kind, base_url = server
    body = {
        "messages": MESSAGES,
        "stream": True,
        "max_tokens": 16,
        "stream_options": {"include_usage": True},
        "seed": 0,
    }
    status, text = asyncio.run(_post(base_url, body))
    assert status == 200, text
    events = _events(text)

    assert events[0]["choices"][0]["delta"] == {"role": "assistant"}
    last = events[-1]
    assert last["usage"]["completion_tokens"] == 16  # no early EOS
    assert last["choices"][0]["finish_reason"] == "length"
    chunks = [e["choices"][0]["delta"].get("content") for e in events[1:-1]]
    assert chunks and all(chunks), chunks
    if kind == "word":
        assert len(chunks) == 16, chunks
    else:
        # a token that ends inside a UTF-8 character is held back and sent with the next one
        assert len(chunks) < 16, chunks


def test_ignore_eos_is_rejected(server: tuple[TokenizerKind, str]) -> None:
    _, base_url = server
    body = {"messages": MESSAGES, "stream": True, "max_tokens": 4, "ignore_eos": True}
    status, text = asyncio.run(_post(base_url, body))
    assert status == 422
    assert json.loads(text) == {"detail": "Unexpected fields in the request: {'ignore_eos'}"}
