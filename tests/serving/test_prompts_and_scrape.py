"""Prompts (synthetic, sized by a tokenizer; JSONL datasets) and the Prometheus scrape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aaco.errors import UsageError
from aaco.serving.prometheus import Scraper, parse_metrics
from aaco.serving.prompts import Tokenizer, load_dataset, make_plan
from aaco.testing.llm_server import Script, serve_in_thread

# The shape of vLLM v1's exposition (prometheus_client): HELP/TYPE lines, an engine label,
# counters with _total and _created samples, histograms; the values are made up.
VLLM_PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# HELP vllm:prefix_cache_queries Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 200.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7e+09
# HELP vllm:prefix_cache_hits Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 120.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="m"} 5.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"} 5.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"} 9.5
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="s"} 4
# TYPE tgi_queue_size gauge
tgi_queue_size 2
"""


def test_parse_keeps_known_series_with_neutral_names() -> None:
    rows = {
        (name, metric): (labels, value) for name, labels, value, metric in parse_metrics(VLLM_PAGE)
    }
    assert rows[("vllm:num_requests_running", "running")] == (
        "engine=0,model_name=m",
        3.0,
    )
    assert rows[("vllm:kv_cache_usage_perc", "kv_cache_usage")][1] == 0.42
    assert rows[("vllm:prefix_cache_hits_total", "prefix_cache_hits")][1] == 120.0
    assert rows[("sglang:num_queue_reqs", "waiting")][1] == 4.0
    assert rows[("tgi_queue_size", "waiting")][1] == 2.0
    names = {name for name, _ in rows}
    assert not any("e2e_request_latency" in n or n.endswith("_created") for n in names)


def test_scraper_against_a_live_server() -> None:
    with serve_in_thread(Script(ttft=0.0, itl=0.0)) as url:
        s = Scraper(url + "/metrics", interval_s=0.05)
        assert s.scrape_once()
        s.start()
        s.stop()
    t = s.table()
    assert t.num_rows > 0 and s.scrapes >= 2 and s.error is None
    assert {"running", "waiting", "kv_cache_usage"} <= set(t.column("metric").to_pylist())


def test_scraper_without_metrics_stops_quietly() -> None:
    s = Scraper("http://127.0.0.1:9/metrics", timeout_s=0.5)
    assert not s.scrape_once()
    assert s.error and s.table().num_rows == 0


def _word_tokenizer(tmp_path: Path) -> Tokenizer:
    tokenizers = pytest.importorskip("tokenizers")
    from aaco.serving import prompts

    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(sorted(set(prompts._WORDS)))}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    return Tokenizer(tmp_path)  # a directory holding tokenizer.json


def test_synthetic_prompts_sized_by_the_tokenizer(tmp_path: Path) -> None:
    tok = _word_tokenizer(tmp_path)
    plan, info = make_plan(
        20, input_tokens=40, input_spread=0.5, output_tokens=10, tokenizer=tok, seed=3
    )
    specs = [plan(i) for i in range(20)]
    assert all(20 <= (s.prompt_tokens or 0) <= 60 for s in specs)
    assert all(s.prompt_tokens == tok.count(s.prompt) for s in specs)
    assert len({s.prompt_tokens for s in specs}) > 1  # the spread is used
    assert {s.max_tokens for s in specs} == {10}
    assert info["sized_with"].endswith("tokenizer.json")
    assert plan(25).index == 25 and plan(25).prompt == plan(5).prompt  # round robin


def test_without_tokenizer_prompts_are_sized_in_words() -> None:
    plan, info = make_plan(3, input_tokens=12, output_tokens=4)
    assert len(plan(0).prompt.split()) == 12 and plan(0).prompt_tokens is None
    assert "words" in info["sized_with"]


def test_dataset(tmp_path: Path) -> None:
    f = tmp_path / "d.jsonl"
    f.write_text(
        "\n".join(
            [
                json.dumps({"prompt": "hello there", "max_tokens": 7}),
                "not json",
                json.dumps({"messages": [{"role": "user", "content": "a b"}]}),
                json.dumps({"other": 1}),
                "",
            ]
        )
    )
    rows = load_dataset(f)
    assert [r.prompt for r in rows] == ["hello there", "a b"]
    plan, info = make_plan(4, output_tokens=5, dataset=rows)
    assert [plan(i).max_tokens for i in range(2)] == [7, 5] and info["source"] == "dataset"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n")
    with pytest.raises(UsageError, match="no line has a 'prompt'"):
        load_dataset(bad)
    with pytest.raises(UsageError, match="no file"):
        load_dataset(tmp_path / "missing.jsonl")


def test_bad_tokenizer_path_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"no tokenizer\.json"):
        Tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not a tokenizer")
    with pytest.raises(UsageError, match="cannot read"):
        Tokenizer(tmp_path)
