"""``aaco llm bench`` against a real server: `transformers serve` on a tiny random Llama
built offline (tests/serving/real_server.py). The byte-level tokenizer streams chunks that
carry several tokens; re-tokenizing its text over-counts, and the server's usage is the
truth."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.serving.real_server import (
    build_tiny_llama,
    transformers_serve_available,
    transformers_server,
)

from aaco.serving.bench import BenchOptions, bench
from aaco.serving.load import Load

UNAVAILABLE = transformers_serve_available()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("llama"), "bytelevel")


@pytest.fixture(scope="module")
def batching_server(model_dir: Path) -> Iterator[str]:
    with transformers_server(model_dir, continuous_batching=True) as url:
        yield url


def _summary(path: Path) -> dict[str, Any]:
    return json.loads((path / "metrics/serving_summary.json").read_text())  # type: ignore[no-any-return]


def test_usage_is_the_truth_and_itl_differs_from_icl(
    batching_server: str, model_dir: Path, tmp_path: Path
) -> None:
    s = bench(
        BenchOptions(
            url=batching_server,
            load=Load(concurrency=4, requests=12, warmup_requests=2),
            input_tokens=32,
            output_tokens=32,
            tokenizer=str(model_dir),
            output=tmp_path,
        )
    )
    assert s.status == "completed"
    summ = _summary(s.path)
    p = summ["points"][0]
    tokens = p["tokens"]
    # every request generated exactly max_tokens, by the server's own count
    assert tokens["usage"] == tokens["requested"] == 12 * 32
    assert tokens["token_source"] == {"usage": 12}
    # byte-level chunks carry several tokens: fewer chunks than tokens ...
    assert tokens["chunk_count"] < tokens["usage"]
    assert p["tokens_per_chunk"]["mean"] > 1.0
    # ... so the per-token gap is shorter than the per-chunk gap
    assert p["itl_ms"]["mean"] < p["icl_ms"]["mean"]
    # per-chunk counts are rescaled to the server's total; the raw re-count is kept and,
    # as the issue measured, over-counts
    assert tokens["chunks"] == tokens["usage"]
    assert tokens["retokenized"] > tokens["usage"]
    assert any("retokenized" in w for w in p["warnings"])
    # transformers serve refuses ignore_eos: dropped, and said
    assert any("refused 'ignore_eos'" in w for w in summ["warnings"])
    meta = json.loads((s.path / "session.json").read_text())
    assert "ignore_eos" not in meta["serving"]["params_sent"]


def test_concurrency_sweep_draws_the_curve(
    batching_server: str, model_dir: Path, tmp_path: Path
) -> None:
    s = bench(
        BenchOptions(
            url=batching_server,
            load=Load(concurrency=1, requests=8, warmup_requests=1),
            sweep=("concurrency", (1.0, 2.0, 4.0, 8.0, 16.0)),
            stop_at_saturation=False,
            input_tokens=16,
            output_tokens=24,
            output=tmp_path,
        )
    )
    summ = _summary(s.path)
    assert [p["load"]["concurrency"] for p in summ["points"]] == [1, 2, 4, 8, 16]
    tput = [p["throughput"]["output_tokens_per_s"] for p in summ["points"]]
    ttft = [p["ttft_ms"]["p50"] for p in summ["points"]]
    # continuous batching: more streams, more tokens/s, and each waits longer for its first
    assert tput[-1] > 1.5 * tput[0]
    assert ttft[-1] > ttft[0]
    sweep = summ["sweep"]
    assert sweep["values"] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert len(sweep["power"]) == 5 and sweep["best_power"] is not None


def test_serial_server_saturates_at_once(model_dir: Path, tmp_path: Path) -> None:
    # without continuous batching the server runs one request at a time: more streams add
    # no throughput (beyond filling the gaps between requests) and the knee is at 1 or 2
    with transformers_server(model_dir) as url:
        s = bench(
            BenchOptions(
                url=url,
                load=Load(concurrency=1, requests=8, warmup_requests=2),
                sweep=("concurrency", (1.0, 2.0, 4.0, 8.0)),
                stop_at_saturation=False,
                input_tokens=16,
                output_tokens=24,
                output=tmp_path,
            )
        )
    summ = _summary(s.path)
    tput = [p["throughput"]["output_tokens_per_s"] for p in summ["points"]]
    ttft = [p["ttft_ms"]["p50"] for p in summ["points"]]
    assert tput[-1] < 1.4 * tput[0], (tput, ttft)
    assert ttft[-1] > 3 * ttft[0]  # 8 streams queue behind each other
    knee = summ["sweep"]["knee"]
    assert knee is not None and knee["load"] <= 2.0
