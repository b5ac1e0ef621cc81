"""Scrape an inference server's Prometheus ``/metrics`` while a load runs, on the client's
clock, keeping only the series that explain serving latency (vendor names mapped to one
neutral name each: running and waiting requests, KV-cache usage, prefix-cache queries and
hits, prompt and generated token counters).

A background thread polls with the standard library's HTTP client and parses with
``prometheus_client``'s text parser; the first failed scrape stops it quietly (a server
without ``/metrics`` is the common case) and is said in :meth:`Scraper.info`.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pyarrow as pa

from aaco.session.schema import SERVER_METRICS

__all__ = ["KNOWN", "Scraper", "parse_metrics"]

#: server metric name -> AACO's neutral name (vLLM, SGLang, TGI)
KNOWN: dict[str, str] = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",
    "vllm:prefix_cache_queries": "prefix_cache_queries",
    "vllm:prefix_cache_hits": "prefix_cache_hits",
    "vllm:gpu_prefix_cache_queries": "prefix_cache_queries",
    "vllm:gpu_prefix_cache_hits": "prefix_cache_hits",
    "vllm:prompt_tokens": "prompt_tokens",
    "vllm:generation_tokens": "generation_tokens",
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "waiting",
    "sglang:token_usage": "kv_cache_usage",
    "sglang:cache_hit_rate": "prefix_cache_hit_rate",
    "sglang:prompt_tokens": "prompt_tokens",
    "sglang:generation_tokens": "generation_tokens",
    "tgi_batch_current_size": "running",
    "tgi_queue_size": "waiting",
}


def parse_metrics(text: str) -> list[tuple[str, str, float, str]]:
    """(name, labels, value, neutral name) of the known samples in a text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    out: list[tuple[str, str, float, str]] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = s.name
            base = name[: -len("_total")] if name.endswith("_total") else name
            neutral = KNOWN.get(name) or KNOWN.get(base)
            if neutral is None:
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out.append((name, labels, float(s.value), neutral))
    return out


class Scraper:
    """Polls ``url`` every ``interval_s`` on a daemon thread between start() and stop()."""

    def __init__(self, url: str, interval_s: float = 0.5, timeout_s: float = 2.0) -> None:
        self.url = url
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._rows: list[tuple[int, str, str, float, str]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.scrapes = 0
        self.error: str | None = None

    def scrape_once(self) -> bool:
        try:
            with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
                body = resp.read().decode("utf-8", "replace")
            t = time.perf_counter_ns()
            rows = parse_metrics(body)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"[:200]
            return False
        self._rows.extend((t, n, lab, v, m) for n, lab, v, m in rows)
        self.scrapes += 1
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            if not self.scrape_once():
                return
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="aaco-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_s + 1)
        if self.scrapes and self.error is None:
            self.scrape_once()

    def table(self) -> pa.Table:
        names = ("t_ns", "name", "labels", "value", "metric")
        cols: dict[str, list[Any]] = {
            n: [row[i] for row in self._rows] for i, n in enumerate(names)
        }
        return SERVER_METRICS.from_columns(cols)

    def info(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "scrapes": self.scrapes,
            "error": self.error,
            "interval_s": self.interval_s,
        }
