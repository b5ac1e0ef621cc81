"""Serving metrics with answers known by construction (docs/metrics.md, "Serving")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from aaco.analysis.serving import (
    Chunk,
    RequestResult,
    distribution,
    finalize,
    find_knee,
    serving_tables,
    summarize_point,
)
from aaco.testing import scripted_results

MS = 1_000_000


def _req(chunks: list[Chunk], **kw: object) -> RequestResult:
    base: dict[str, object] = dict(
        point=0, request=0, phase="measured", intended_ns=0, sent_ns=0, end_ns=chunks[-1].t_ns
    )
    base.update(kw)
    return RequestResult(chunks=chunks, **base)  # type: ignore[arg-type]


def test_ttft_tpot_e2e_of_one_request() -> None:
    # role chunk at 0, content at 20, 25, 30, 35 ms; 1 token each per usage
    chunks = [Chunk(0, "role")] + [Chunk((20 + 5 * k) * MS, "content", chars=2) for k in range(4)]
    row = finalize(_req(chunks, usage_tokens=4, max_tokens=4))
    assert row["ttft_ns"] == 20 * MS
    assert row["e2e_ns"] == 35 * MS
    assert row["tpot_ns"] == pytest.approx(5 * MS)  # (35 - 20) / (4 - 1)
    assert row["output_tokens"] == 4 and row["token_source"] == "usage"
    assert row["chunks"] == 4 and row["chunk_tokens"] == 4  # 1 each: usage equals chunks


def test_multi_token_chunks_split_itl_but_not_icl() -> None:
    # 3 chunks of 3, 3, 2 tokens, 6 ms apart; per-chunk usage known
    chunks = [
        Chunk(10 * MS, "content", tokens=3),
        Chunk(16 * MS, "content", tokens=3),
        Chunk(22 * MS, "content", tokens=2),
    ]
    r = _req(chunks, usage_tokens=8)
    req, ch = serving_tables([r])
    s = summarize_point(req, ch)
    assert s["icl_ms"]["count"] == 2 and s["icl_ms"]["mean"] == pytest.approx(6.0)
    # itl: 3 samples of 2 ms (6/3) and 2 samples of 3 ms (6/2)
    assert s["itl_ms"]["count"] == 5
    assert s["itl_ms"]["mean"] == pytest.approx((3 * 2 + 2 * 3) / 5)
    # tpot: (22 - 10) / (8 - 3)
    assert s["tpot_ms"]["mean"] == pytest.approx(12 / 5)
    assert s["tokens_per_chunk"]["mean"] == pytest.approx(8 / 3)


def test_reasoning_kept_apart_from_ttft() -> None:
    chunks = [
        Chunk(0, "role"),
        Chunk(10 * MS, "reasoning", tokens=1),
        Chunk(15 * MS, "reasoning", tokens=1),
        Chunk(40 * MS, "content", tokens=1),
        Chunk(45 * MS, "content", tokens=1),
        Chunk(46 * MS, "usage"),
    ]
    row = finalize(_req(chunks, usage_tokens=4))
    assert row["ttfr_ns"] == 10 * MS
    assert row["ttft_ns"] == 40 * MS
    # decoding is timed from the first generated token of any kind
    assert row["tpot_ns"] == pytest.approx((46 - 10) * MS / 3)


def test_unknown_tokens_per_chunk_gives_unknown_tpot_and_a_warning() -> None:
    results = scripted_results(4, ttft_ms=20, itl_ms=5, output_tokens=9, tokens_per_chunk=3)
    req, ch = serving_tables(results)
    s = summarize_point(req, ch)
    assert s["tpot_ms"] is None and s["itl_ms"] is None
    assert s["icl_ms"]["mean"] == pytest.approx(5.0)
    assert any("--tokenizer" in w for w in s["warnings"])
    # the chunk count differs from usage, as it must with 3 tokens per chunk: no warning
    assert not any("disagree" in w for w in s["warnings"])


def test_goodput_counts_failures_against_it() -> None:
    # 10 requests 10 ms apart; ttft 10..19 ms; request 9 fails
    results = scripted_results(
        10, ttft_ms=[10.0 + i for i in range(10)], itl_ms=1, output_tokens=2, failed=[9]
    )
    req, ch = serving_tables(results)
    s = summarize_point(req, ch, slo={"ttft": 14.5 * MS})
    assert s["requests"] == {
        "measured": 10,
        "ok": 9,
        "failed": 1,
        "errors": {"HTTP 500: scripted failure": 1},
    }
    assert s["throughput"]["good_requests"] == 5  # ttft 10..14
    assert s["throughput"]["good_fraction"] == pytest.approx(0.5)
    # span: first send (0) to last end: request 8 ends at 80 + 18 + 1 ms
    assert s["duration_s"] == pytest.approx(0.099)
    assert s["throughput"]["goodput_requests_per_s"] == pytest.approx(5 / 0.099)
    assert s["throughput"]["requests_per_s"] == pytest.approx(9 / 0.099)


def test_warmup_excluded_and_intended_latency() -> None:
    results = scripted_results(6, ttft_ms=20, itl_ms=5, output_tokens=3, warmup=2)
    for r in results:  # the client sent each 7 ms late
        assert r.intended_ns is not None
        r.intended_ns -= 7 * MS
    req, ch = serving_tables(results)
    s = summarize_point(req, ch)
    assert s["requests"]["measured"] == 4
    assert s["ttft_ms"]["p50"] == pytest.approx(20.0)
    assert s["ttft_intended_ms"]["p50"] == pytest.approx(27.0)
    assert s["dispatch_delay_ms"]["max"] == pytest.approx(7.0)


def test_rate_shortfall_warns() -> None:
    results = scripted_results(11, gap_ms=20.0)  # sent at 50 requests/s
    for i, r in enumerate(results):  # ... of a schedule of 100/s
        r.intended_ns = 1_000_000_000 + i * 10 * MS
    req, ch = serving_tables(results)
    s = summarize_point(req, ch, target_rate=100.0)
    assert s["rate"]["achieved"] == pytest.approx(50.0)
    assert s["rate"]["scheduled"] == pytest.approx(100.0)
    assert any("fell behind" in w for w in s["warnings"])
    # a Poisson draw slower than nominal is no shortfall: the client kept its schedule
    on_time = serving_tables(scripted_results(11, gap_ms=20.0))
    ok = summarize_point(*on_time, target_rate=60.0)
    assert ok["rate"]["scheduled"] == pytest.approx(50.0)
    assert not any("fell behind" in w for w in ok["warnings"])


def test_reconciliation_warns_above_two_percent() -> None:
    results = scripted_results(5, output_tokens=50)
    for r in results:
        r.retokenized_tokens = 52  # +4 %
    req, ch = serving_tables(results)
    s = summarize_point(req, ch)
    assert s["tokens"]["usage"] == 250 and s["tokens"]["retokenized"] == 260
    assert s["tokens"]["relative_difference"]["retokenized"] == pytest.approx(0.04)
    assert any("retokenized 260" in w for w in s["warnings"])


def test_early_eos_warns() -> None:
    results = scripted_results(3, output_tokens=10)
    for r in results:
        r.max_tokens = 20
    req, ch = serving_tables(results)
    s = summarize_point(req, ch)
    assert any("ended early" in w for w in s["warnings"])


def test_distribution_matches_numpy() -> None:
    x = np.arange(1, 101, dtype=float) * MS
    d = distribution(x)
    assert d is not None
    assert d["p50"] == pytest.approx(50.5) and d["p99"] == pytest.approx(99.01)
    assert d["count"] == 100 and d["min"] == 1.0 and d["max"] == 100.0
    assert distribution([]) is None
    assert distribution([math.nan]) is None


def test_knee_is_the_last_load_that_still_paid() -> None:
    loads = [1, 2, 4, 8, 16]
    tput = [100.0, 195.0, 380.0, 400.0, 405.0]
    knee = find_knee(loads, tput)
    assert knee is not None and knee["load"] == 4 and knee["index"] == 2
    assert find_knee(loads, [100.0, 200.0, 400.0, 800.0, 1600.0]) is None
    assert find_knee([1, 2], [1.0, 1.0]) is None


def test_tables_round_trip_the_schema() -> None:
    results = scripted_results(3, output_tokens=4, tokens_per_chunk=2)
    req, ch = serving_tables(results)
    assert req.num_rows == 3
    assert ch.num_rows == 3 * (1 + 2)  # role + 2 content chunks each
    assert set(ch.column("kind").to_pylist()) == {"role", "content"}


def test_a_zero_token_chunk_passes_its_time_to_the_next() -> None:
    # chunks at 10/20/30/40 ms carrying 1/0/1/1 tokens (re-tokenizing by prefix gives 0s)
    chunks = [Chunk(t * MS, "content", tokens=n) for t, n in ((10, 1), (20, 0), (30, 1), (40, 1))]
    req, ch = serving_tables([_req(chunks, usage_tokens=3)])
    s = summarize_point(req, ch)
    assert s["itl_ms"]["count"] == 2
    assert s["itl_ms"]["mean"] == pytest.approx(15.0)  # 30 ms over the 2 tokens after the first
    assert s["icl_ms"]["count"] == 3 and s["icl_ms"]["mean"] == pytest.approx(10.0)
