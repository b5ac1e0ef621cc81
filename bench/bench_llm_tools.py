"""Three load generators, one server: ``aaco llm bench``, NVIDIA AIPerf and GuideLLM side by side.

Each tool is run as a whole command, one after the other, against the same server with the
same load (closed loop, ``--concurrency`` streams, ``--requests`` requests, prompts of
``--input-tokens`` tokens, ``--output-tokens`` tokens generated, streaming chat). For every
run the script records:

* the tool's own figures, read from its own export (AACO: ``metrics/serving_summary.json``
  and ``serving/requests.parquet``; AIPerf: ``profile_export_aiperf.json`` and
  ``profile_export.jsonl``; GuideLLM: ``benchmarks.json``), mapped to AACO's names (the
  mapping is the first table printed; definitions in docs/metrics.md, "Serving");
* the client's cost: wall time and CPU time of the whole command (``getrusage`` of the
  reaped children), and its CPU during the load phase alone (its process tree sampled
  with psutil every 50 ms, cut at the first request's send and the last one's end as the
  tool itself recorded them);
* on the scripted server (:mod:`aaco.testing.llm_server`), the server's own stamps for that
  run (``GET /debug/requests``): when each request arrived and when its first chunk left,
  so each tool's TTFT can be split into the server's part and the client's own.

Servers (``--server``): ``scripted`` (one case per ``--tokens-per-chunk`` value; a word-level
tokenizer whose tokens are the server's whitespace words is built here, so every tool
counts exactly what the server counts), ``tiny-llama-bytelevel`` / ``tiny-llama-word``
(``transformers serve`` on a random-weight Llama built by ``tests/serving/real_server.py``;
needs ``transformers[serving]>=5`` in this venv), or the URL of any OpenAI-compatible server
(with ``--model`` and ``--tokenizer DIR``, a Hugging Face tokenizer folder).

Reproduce (each tool in a venv of its own, apart from AACO's: both pull transformers, GuideLLM
also torch, 6 GB with its CUDA wheels)::

    python3 -m venv /tmp/venv-aiperf && /tmp/venv-aiperf/bin/pip install aiperf==0.13.0
    python3 -m venv /tmp/venv-guidellm && /tmp/venv-guidellm/bin/pip install guidellm==0.8.1
    .venv/bin/python bench/bench_llm_tools.py --server scripted --tokens-per-chunk 1,3 \\
        --repeat 3 --json /tmp/llm_tools.json            # ~25 min on 2 cores
    .venv/bin/python bench/bench_llm_tools.py --server tiny-llama-bytelevel --repeat 3
    .venv/bin/python bench/bench_llm_tools.py --server tiny-llama-bytelevel \\
        --pin-server 1 --pin-client 0                    # the server on a core of its own
    .venv/bin/python bench/bench_llm_tools.py --load /tmp/llm_tools.json   # tables again

``--repeat N`` runs the tools round-robin N times and the tables show each figure's median
(the JSON keeps every run). The tools share the machine with the server: on a CPU-bound
server (``transformers serve``) a client's CPU is taken from the server, so its speed
changes with the client; ``--pin-server``/``--pin-client`` give each its own cores.

``bench/llm_tools_requirements.txt`` holds the same pins. Nothing is downloaded at run
time: the tokenizers are local folders and ``HF_HUB_OFFLINE=1`` is set for AACO and
GuideLLM. Not for AIPerf: AIPerf 0.13.0 in offline mode looks every tokenizer name up in
the Hub cache, a local folder included, and fails ("Repo id must be in the form
'repo_name'"); online, it loads a local folder without touching the network.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import psutil

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("aaco", "aiperf", "aiperf-server-tokens", "guidellm")
TOOL_TITLES = {
    "aaco": "AACO",
    "aiperf": "AIPerf",
    "aiperf-server-tokens": "AIPerf `--use-server-token-count`",
    "guidellm": "GuideLLM",
}
SAMPLE_S = 0.05

Figures = dict[str, float | None]


# -- what is run against what ---------------------------------------------------------------


@dataclass(frozen=True)
class Load:
    """The load every tool is given."""

    concurrency: int
    requests: int
    input_tokens: int
    output_tokens: int
    seed: int


@dataclass(frozen=True)
class Truth:
    """What the scripted server does, hence what a perfect client would measure."""

    ttft_ms: float
    itl_ms: float
    tokens_per_chunk: int
    output_tokens: int
    requests: int
    concurrency: int

    @property
    def chunks(self) -> int:
        return math.ceil(self.output_tokens / self.tokens_per_chunk)

    @property
    def decode_ms(self) -> float:
        return (self.chunks - 1) * self.itl_ms

    @property
    def e2e_ms(self) -> float:
        return self.ttft_ms + self.decode_ms

    def figures(self) -> Figures:
        first = min(self.tokens_per_chunk, self.output_tokens)
        n = self.output_tokens
        per_token = self.itl_ms / self.tokens_per_chunk
        req_s = self.concurrency / (self.e2e_ms / 1e3)
        return {
            "ttft_p50": self.ttft_ms,
            "ttft_p99": self.ttft_ms,
            # AACO's tpot: decode time over the tokens after the first chunk
            "tpot_p50": self.decode_ms / (n - first) if n > first else None,
            "tpot_osl1_p50": self.decode_ms / (n - 1) if n > 1 else None,
            "icl_p50": self.itl_ms if self.chunks > 1 else None,
            "itl_p50": per_token if self.chunks > 1 else None,
            "e2e_per_token_p50": self.e2e_ms / n,
            "e2e_p50": self.e2e_ms,
            "out_tok_s": req_s * n,
            "req_s": req_s,
            "out_tokens": float(n * self.requests),
        }


@dataclass(frozen=True)
class Target:
    """A server that is up: where, what model name and tokenizer folder the tools get."""

    label: str
    url: str
    model: str
    tokenizer_dir: Path
    ignore_eos: bool
    stamps: bool
    pid: int | None
    truth: Truth | None


@dataclass(frozen=True)
class Invocation:
    """One tool's command line and where it leaves its results."""

    tool: str
    argv: list[str]
    env: dict[str, str]
    out: Path
    parse: Callable[[Path, Load], Parsed]


@dataclass
class Parsed:
    """A tool's own figures mapped to AACO's keys, and the span of its load (wall ns)."""

    figures: Figures
    window_ns: tuple[int, int] | None
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class Measured:
    """What running one command cost."""

    rc: int
    wall_s: float
    cpu_s: float
    self_cpu_s: float
    samples: list[tuple[int, float, float | None, float]]
    max_procs: int


# -- the scripted tokenizer -----------------------------------------------------------------


def _aiperf_corpus(aiperf_bin: Path) -> Path | None:
    found = sorted(
        aiperf_bin.resolve().parent.parent.glob(
            "lib/python*/site-packages/aiperf/dataset/generator/assets/shakespeare.txt"
        )
    )
    return found[0] if found else None


def build_word_tokenizer(out: Path, words: int, corpus: Path | None) -> Path:
    """A word-level tokenizer folder whose tokens are whitespace-separated words, as the
    scripted server counts them: ``w0`` ... (its output) and the words of AIPerf's prompt
    corpus. Any other word is ``[UNK]``, a plain token (not a special one, which GuideLLM
    drops when it decodes its prompts), so every word still counts one."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab: dict[str, int] = {"[UNK]": 0}
    for i in range(words):
        vocab.setdefault(f"w{i}", len(vocab))
    if corpus is not None:
        for word in corpus.read_text("utf-8", "replace").split():
            vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    # what AutoTokenizer.from_pretrained (AIPerf, GuideLLM) needs beside tokenizer.json
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1_000_000}
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


# -- servers --------------------------------------------------------------------------------


def _real_server_module() -> ModuleType:
    path = REPO / "tests" / "serving" / "real_server.py"
    spec = importlib.util.spec_from_file_location("aaco_bench_real_server", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _newest_child(needle: str) -> int | None:
    kids = [p for p in psutil.Process().children(recursive=True) if needle in " ".join(p.cmdline())]
    return max(kids, key=lambda p: p.create_time()).pid if kids else None


@contextlib.contextmanager
def serve(
    server: str, tokens_per_chunk: int, a: argparse.Namespace, work: Path, load: Load
) -> Iterator[Target]:
    """Start the server (or name the one at a URL) and yield it as a :class:`Target`."""
    if server == "scripted":
        from aaco.testing.llm_server import Script, start_process

        corpus = _aiperf_corpus(Path(a.aiperf))
        tok = build_word_tokenizer(
            work / "tokenizer-scripted", max(8192, load.output_tokens + 1), corpus
        )
        script = Script(ttft=a.ttft_ms / 1e3, itl=a.itl_ms / 1e3, tokens_per_chunk=tokens_per_chunk)
        truth = Truth(
            ttft_ms=a.ttft_ms,
            itl_ms=a.itl_ms,
            tokens_per_chunk=tokens_per_chunk,
            output_tokens=load.output_tokens,
            requests=load.requests,
            concurrency=load.concurrency,
        )
        with start_process(script) as handle:
            yield Target(
                label=f"scripted server, TTFT {a.ttft_ms:g} ms, a chunk every {a.itl_ms:g} ms, "
                f"{tokens_per_chunk} token(s) per chunk",
                url=handle.url,
                model=script.model,
                tokenizer_dir=tok,
                ignore_eos=True,
                stamps=True,
                pid=handle.pid,
                truth=truth,
            )
    elif server.startswith("tiny-llama-"):
        kind = server.removeprefix("tiny-llama-")
        real = _real_server_module()
        why = real.transformers_serve_available()
        if why:
            raise SystemExit(f"--server {server}: {why}")
        model_dir = real.build_tiny_llama(work / f"llama-{kind}", kind)
        with real.transformers_server(model_dir) as url:
            yield Target(
                label=f"`transformers serve` (CPU), random tiny Llama, {kind} tokenizer",
                url=url,
                model=str(model_dir),
                tokenizer_dir=model_dir,
                ignore_eos=False,  # it answers ignore_eos with HTTP 422
                stamps=False,
                pid=_newest_child("transformers"),
                truth=None,
            )
    else:
        if not (a.model and a.tokenizer):
            raise SystemExit("--server URL needs --model and --tokenizer (a tokenizer folder)")
        yield Target(
            label=server,
            url=server.rstrip("/"),
            model=a.model,
            tokenizer_dir=Path(a.tokenizer),
            ignore_eos=not a.no_ignore_eos,
            stamps=False,
            pid=a.server_pid,
            truth=None,
        )


def _http(url: str, method: str = "GET") -> Any:
    request = urllib.request.Request(url, method=method)
    with urllib.request.urlopen(request, timeout=60) as reply:
        body = reply.read()
    return json.loads(body) if body else None


# -- measuring a command --------------------------------------------------------------------


class TreeSampler:
    """Samples the CPU time of a process tree (and of the server) every ``SAMPLE_S``.

    A process's time is kept at its last sample once it is gone, so the tree's total keeps
    the work of workers that exit before the root does."""

    def __init__(self, pid: int, server_pid: int | None) -> None:
        self.pid = pid
        self.server = psutil.Process(server_pid) if server_pid else None
        self.samples: list[tuple[int, float, float | None, float]] = []
        self._last: dict[tuple[int, float], float] = {}
        self.max_procs = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        self.max_procs = max(self.max_procs, len(procs))
        for p in procs:
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                self._last[(p.pid, p.create_time())] = t.user + t.system
        server = None
        if self.server is not None:
            with contextlib.suppress(psutil.Error):
                t = self.server.cpu_times()
                server = t.user + t.system
        every = psutil.cpu_times()
        busy = every.user + every.nice + every.system + every.irq + every.softirq + every.steal
        self.samples.append((time.time_ns(), sum(self._last.values()), server, busy))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(SAMPLE_S)
        self._sample()


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_measured(inv: Invocation, server_pid: int | None, timeout: float) -> Measured:
    """Run the command; its CPU is what ``getrusage`` charges to this process's reaped
    children meanwhile (the tool and every process it waited for)."""
    inv.out.mkdir(parents=True, exist_ok=True)
    log = (inv.out / "command.log").open("wb")
    cpu0, self0, t0 = _children_cpu(), time.process_time(), time.perf_counter()
    with log:
        proc = subprocess.Popen(
            inv.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=inv.env, cwd=inv.out,
        )  # fmt: skip
        with TreeSampler(proc.pid, server_pid) as sampler:
            try:
                rc = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
    wall = time.perf_counter() - t0
    return Measured(
        rc=rc,
        wall_s=wall,
        cpu_s=_children_cpu() - cpu0,
        self_cpu_s=time.process_time() - self0,
        samples=sampler.samples,
        max_procs=sampler.max_procs,
    )


def _cpu_between(
    samples: Sequence[tuple[int, float, float | None, float]], t0: int, t1: int, col: int
) -> float | None:
    points = [(s[0], s[col]) for s in samples if s[col] is not None]
    if len(points) < 2:
        return None
    t = np.array([p[0] for p in points], dtype=np.float64)
    v = np.array([p[1] for p in points], dtype=np.float64)
    return float(np.interp(t1, t, v) - np.interp(t0, t, v))


# -- the three tools ------------------------------------------------------------------------


def _q(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else None


def _offline_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_UPDATE_CHECK="1", TOKENIZERS_PARALLELISM="false",
    )  # fmt: skip
    return env


def aaco_invocation(target: Target, load: Load, out: Path) -> Invocation:
    argv = [
        sys.executable, "-m", "aaco", "llm", "bench", "--url", target.url,
        "--model", target.model, "--concurrency", str(load.concurrency),
        "--requests", str(load.requests), "--input-tokens", str(load.input_tokens),
        "--output-tokens", str(load.output_tokens),
        "--tokenizer", str(target.tokenizer_dir / "tokenizer.json"),
        "--seed", str(load.seed), "--report", "none", "-o", str(out / "sessions"),
        "--no-telemetry", "--no-scrape",
    ]  # fmt: skip
    if not target.ignore_eos:
        argv.append("--no-ignore-eos")
    return Invocation("aaco", argv, _offline_env(), out, parse_aaco)


def parse_aaco(out: Path, load: Load) -> Parsed:
    import pyarrow.parquet as pq

    log = (out / "command.log").read_text("utf-8", "replace")
    bundle = Path(
        [x for x in log.splitlines() if x.startswith("bundle: ")][-1].removeprefix("bundle: ")
    )
    summary = json.loads((bundle / "metrics/serving_summary.json").read_text())
    session = json.loads((bundle / "session.json").read_text())
    p = summary["points"][0]
    rows = pq.read_table(bundle / "serving/requests.parquet").to_pylist()
    ok = [r for r in rows if r["status"] == "ok" and r["phase"] == "measured"]
    offset = int(session["clock"]["epoch_offset_ns"])
    window = (min(r["sent_ns"] for r in ok) + offset, max(r["end_ns"] for r in ok) + offset)

    def stat(name: str, q: str) -> float | None:
        d = p.get(f"{name}_ms")
        return None if d is None else d.get(q)

    per_token = [r["e2e_ns"] / 1e6 / r["output_tokens"] for r in ok if r["output_tokens"]]
    tokens = p["tokens"]
    figures: Figures = {
        "ok": float(p["requests"]["ok"]),
        "ttft_p50": stat("ttft", "p50"),
        "ttft_p99": stat("ttft", "p99"),
        "tpot_p50": stat("tpot", "p50"),
        "icl_p50": stat("icl", "p50"),
        "itl_p50": stat("itl", "p50"),
        "e2e_per_token_p50": _q(per_token, 50),
        "e2e_p50": stat("e2e", "p50"),
        "out_tok_s": p["throughput"]["output_tokens_per_s"],
        "req_s": p["throughput"]["requests_per_s"],
        "span_s": p["duration_s"],
        "out_tokens": float(p["throughput"]["output_tokens"]),
        "usage_tokens": tokens.get("usage"),
        "retok_tokens": tokens.get("retokenized"),
        "self_cpu_pct": p["client"]["cpu_pct"],
        "loop_lag_p99": p["client"]["loop_lag_ms"]["p99"],
        # submit -> body written: AACO's TTFT clock starts after it, AIPerf's before it
        "send_p50": stat("send_overhead", "p50"),
    }
    raw = {"bundle": str(bundle), "warnings": summary.get("warnings", []), "tokens": tokens}
    return Parsed(figures, window, raw)


def aiperf_invocation(
    target: Target, load: Load, out: Path, aiperf: str, server_tokens: bool
) -> Invocation:
    argv = [
        aiperf, "profile", "--model", target.model, "--url", target.url,
        "--endpoint-type", "chat", "--streaming", "--tokenizer", str(target.tokenizer_dir),
        "--concurrency", str(load.concurrency), "--request-count", str(load.requests),
        "--isl", str(load.input_tokens), "--isl-stddev", "0",
        "--osl", str(load.output_tokens), "--osl-stddev", "0",
        "--random-seed", str(load.seed), "--artifact-dir", str(out / "artifacts"),
        "--ui", "none", "--no-server-metrics", "--no-gpu-telemetry",
    ]  # fmt: skip
    if target.ignore_eos:
        argv += ["--extra-inputs", "ignore_eos:true"]
    if server_tokens:
        argv.append("--use-server-token-count")
    env = _offline_env()
    # AIPerf 0.13.0 offline resolves even a local folder through the Hub cache and fails
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        env.pop(key)
    tool = "aiperf-server-tokens" if server_tokens else "aiperf"
    return Invocation(tool, argv, env, out, parse_aiperf)


def parse_aiperf(out: Path, load: Load) -> Parsed:
    art = out / "artifacts"
    d = json.loads((art / "profile_export_aiperf.json").read_text())

    def stat(tag: str, q: str = "avg") -> float | None:
        m = d.get(tag)
        return None if not isinstance(m, dict) else m.get(q)

    starts, ends = [], []
    records = art / "profile_export.jsonl"
    if records.exists():
        for line in records.read_text().splitlines():
            meta = json.loads(line).get("metadata", {})
            if meta.get("benchmark_phase") == "profiling" and meta.get("request_end_ns"):
                starts.append(int(meta["request_start_ns"]))
                ends.append(int(meta["request_end_ns"]))
    e2e_tput = stat("e2e_output_token_throughput", "p50")
    figures: Figures = {
        "ok": stat("completed_request_count") or stat("request_count"),
        "ttft_p50": stat("time_to_first_token", "p50"),
        "ttft_p99": stat("time_to_first_token", "p99"),
        "tpot_p50": stat("inter_token_latency", "p50"),
        "icl_p50": stat("inter_chunk_latency", "p50"),
        "itl_p50": None,
        # 1/median(x) = median(1/x) for an odd count; within one sample's gap otherwise
        "e2e_per_token_p50": 1e3 / e2e_tput if e2e_tput else None,
        "e2e_p50": stat("request_latency", "p50"),
        "out_tok_s": stat("output_token_throughput"),
        "req_s": stat("request_throughput"),
        "span_s": stat("benchmark_duration"),
        "out_tokens": stat("total_output_tokens"),
        "usage_tokens": stat("total_usage_completion_tokens"),
        "retok_tokens": None,
        # k6's "sending": writing the request; inside AIPerf's TTFT (its clock starts first)
        "send_p50": stat("http_req_sending", "p50"),
    }
    window = (min(starts), max(ends)) if starts else None
    # where AIPerf's TTFT goes: sending the request, then waiting for the response headers
    trace = ("http_req_sending", "http_req_waiting", "credit_to_start_latency")
    raw = {"version": d.get("aiperf_version"), **{f"{t}_p50": stat(t, "p50") for t in trace}}
    return Parsed(figures, window, raw)


def guidellm_invocation(target: Target, load: Load, out: Path, guidellm: str) -> Invocation:
    backend = f"kind=openai_http,target={target.url},model={target.model}"
    data = f"kind=synthetic_text,prompt_tokens={load.input_tokens}"
    if target.ignore_eos:
        # an output length in the data makes GuideLLM send max_completion_tokens, ignore_eos
        data += f",output_tokens={load.output_tokens}"
    else:
        # ...whereas the backend's max_tokens sends max_completion_tokens alone
        backend += f",max_tokens={load.output_tokens}"
    argv = [
        guidellm, "run", "--backend", backend,
        "--profile", f"kind=concurrent,streams={load.concurrency}",
        "--constraint", f"kind=max_requests,count={load.requests}",
        "--data", data, "--tokenizer", f"kind=hf_auto,model={target.tokenizer_dir}",
        "--seed", f"kind=static,value={load.seed}",
        "--output", f"kind=json,path={out / 'benchmarks.json'}",
        "--disable-console-interactive",
    ]  # fmt: skip
    return Invocation("guidellm", argv, _offline_env(), out, parse_guidellm)


def parse_guidellm(out: Path, load: Load) -> Parsed:
    d = json.loads((out / "benchmarks.json").read_text())
    b = d["benchmarks"][0]
    m = b["metrics"]

    def stat(name: str, q: str, scale: float = 1.0) -> float | None:
        s = m.get(name, {}).get("successful")
        if not s or not s.get("count"):
            return None
        v = s["percentiles"][q] if q.startswith("p") else s[q]
        return None if v is None else v * scale

    done = b["requests"].get("successful", [])
    starts = [r["info"]["timings"]["request_start"] for r in done]
    ends = [r["info"]["timings"]["request_end"] for r in done]
    figures: Figures = {
        "ok": float(m["request_totals"]["successful"]),
        "ttft_p50": stat("time_to_first_token_ms", "p50"),
        "ttft_p99": stat("time_to_first_token_ms", "p99"),
        "tpot_p50": stat("inter_token_latency_ms", "p50"),
        "icl_p50": None,
        "itl_p50": None,
        "e2e_per_token_p50": stat("time_per_output_token_ms", "p50"),
        "e2e_p50": stat("request_latency", "p50", 1e3),
        "out_tok_s": stat("output_tokens_per_second", "mean"),
        "req_s": stat("requests_per_second", "mean"),
        "span_s": b["duration"],
        "out_tokens": stat("output_token_count", "total_sum"),
        "usage_tokens": None,
        "retok_tokens": None,
    }
    window = (int(min(starts) * 1e9), int(max(ends) * 1e9)) if starts else None
    return Parsed(figures, window, {})


# -- one case: a server, every tool ---------------------------------------------------------


def server_figures(records: list[dict[str, Any]], load: Load) -> Figures:
    """The scripted server's own view of a run's requests (its perf_counter stamps)."""
    full = [
        r
        for r in records
        if r.get("status") == "ok" and r.get("completion_tokens") == load.output_tokens
    ]
    ttft = [(r["first_chunk_ns"] - r["arrival_ns"]) / 1e6 for r in full]
    e2e = [(r["end_ns"] - r["arrival_ns"]) / 1e6 for r in full]
    return {
        "srv_requests": float(len(records)),
        "srv_ttft_p50": _q(ttft, 50),
        "srv_ttft_p99": _q(ttft, 99),
        "srv_e2e_p50": _q(e2e, 50),
        "srv_tokens": float(sum(r.get("completion_tokens") or 0 for r in records)),
    }


def run_tool(inv: Invocation, target: Target, load: Load, timeout: float) -> dict[str, Any]:
    if target.stamps:
        _http(target.url + "/debug/requests", "DELETE")
    measured = run_measured(inv, target.pid, timeout)
    result: dict[str, Any] = {
        "tool": inv.tool,
        "command": inv.argv,
        "rc": measured.rc,
        "wall_s": measured.wall_s,
        "cpu_s": measured.cpu_s,
        "bench_self_cpu_s": measured.self_cpu_s,
    }
    if measured.rc != 0:
        tail = (inv.out / "command.log").read_text("utf-8", "replace")[-3000:]
        result["error"] = tail
        print(f"  {inv.tool}: exit code {measured.rc}; log tail:\n{tail}", file=sys.stderr)
        return result
    parsed = inv.parse(inv.out, load)
    figures = dict(parsed.figures)
    figures["cmd_cpu_s"] = measured.cpu_s
    figures["cmd_wall_s"] = measured.wall_s
    figures["cmd_cpu_pct"] = 100 * measured.cpu_s / measured.wall_s
    figures["procs"] = float(measured.max_procs)
    if parsed.window_ns is not None:
        t0, t1 = parsed.window_ns
        span = (t1 - t0) / 1e9
        load_cpu = _cpu_between(measured.samples, t0, t1, 1)
        server_cpu = _cpu_between(measured.samples, t0, t1, 2)
        figures["load_span_s"] = span
        figures["load_cpu_s"] = load_cpu
        figures["load_cpu_pct"] = None if load_cpu is None else 100 * load_cpu / span
        figures["server_cpu_pct"] = None if server_cpu is None else 100 * server_cpu / span
        # everything else the machine ran meanwhile: this script's sampler, other users
        busy = _cpu_between(measured.samples, t0, t1, 3)
        if busy is not None:
            others = busy - (load_cpu or 0.0) - (server_cpu or 0.0)
            figures["other_cpu_pct"] = 100 * others / span
    if target.stamps:
        figures.update(server_figures(_http(target.url + "/debug/requests"), load))
        srv, cli = figures.get("srv_ttft_p50"), figures.get("ttft_p50")
        if srv is not None and cli is not None:
            figures["client_ttft_excess_p50"] = cli - srv
    result["figures"] = figures
    result["raw"] = parsed.raw
    return result


def _cpus(spec: str) -> set[int]:
    return {int(c) for c in spec.split(",") if c.strip()}


def pin_process(pid: int, cpus: set[int]) -> None:
    """Pin every thread of ``pid`` and of its children: a process's affinity is per thread
    on Linux, and a server's worker threads exist before it answers."""
    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    for proc in procs:
        for thread in proc.threads():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(thread.id, cpus)


def run_case(
    server: str, tokens_per_chunk: int, a: argparse.Namespace, load: Load, work: Path
) -> dict[str, Any]:
    case_dir = work / f"{server.replace('/', '_').replace(':', '_')}-tpc{tokens_per_chunk}"
    with serve(server, tokens_per_chunk, a, case_dir, load) as target:
        print(f"case: {target.label} at {target.url}", file=sys.stderr)
        if a.pin_server and target.pid:
            pin_process(target.pid, _cpus(a.pin_server))
        runs = []
        for rep, tool in ((rep, tool) for rep in range(a.repeat) for tool in a.tools):
            out = case_dir / f"{tool}-{rep}"
            if tool == "aaco":
                inv = aaco_invocation(target, load, out)
            elif tool in ("aiperf", "aiperf-server-tokens"):
                inv = aiperf_invocation(target, load, out, a.aiperf, tool != "aiperf")
            else:
                inv = guidellm_invocation(target, load, out, a.guidellm)
            if a.pin_client:
                # every process the tool starts inherits the affinity
                inv = replace(inv, argv=["taskset", "-c", a.pin_client, *inv.argv])
            print(f"  {tool}: {' '.join(inv.argv)}", file=sys.stderr)
            runs.append({"repeat": rep, **run_tool(inv, target, load, a.timeout)})
            time.sleep(a.pause)  # let the last tool's processes and sockets go
    return {
        "server": target.label,
        "url": target.url,
        "model": target.model,
        "tokenizer": str(target.tokenizer_dir),
        "truth": None if target.truth is None else target.truth.figures(),
        "pinning": {"server": a.pin_server, "client": a.pin_client},
        "runs": runs,
    }


# -- rendering ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One metric of the comparison: its AACO name and each tool's name for it."""

    title: str
    key: str
    aaco: str
    aiperf: str
    guidellm: str
    digits: int = 2


ROWS = (
    Row(
        "requests ok",
        "ok",
        "`requests.ok`",
        "`completed_request_count`",
        "`request_totals.successful`",
        0,
    ),
    Row(
        "TTFT p50 (ms)",
        "ttft_p50",
        "`ttft`",
        "`time_to_first_token` (TTFT)",
        "`time_to_first_token_ms` (TTFT)",
    ),
    Row(
        "TTFT p99 (ms)",
        "ttft_p99",
        "`ttft`",
        "`time_to_first_token` (TTFT)",
        "`time_to_first_token_ms` (TTFT)",
    ),
    Row(
        "TPOT p50 (ms/token), per request (e2e − ttft) / decode tokens",
        "tpot_p50",
        "`tpot` (÷ output − first-chunk tokens)",
        "`inter_token_latency` (ITL, ÷ output − 1)",
        "`inter_token_latency_ms` (ITL, ÷ output − 1)",
        3,
    ),
    Row(
        "ICL p50 (ms), gap per chunk, pooled",
        "icl_p50",
        "`icl`",
        "`inter_chunk_latency` (ICL)",
        "—",
        3,
    ),
    Row("ITL p50 (ms/token), gap ÷ chunk tokens, pooled", "itl_p50", "`itl`", "—", "—", 3),
    Row(
        "e2e ÷ output tokens p50 (ms/token), TTFT included",
        "e2e_per_token_p50",
        "— (from requests.parquet)",
        "1 / `e2e_output_token_throughput`",
        "`time_per_output_token_ms` (TPOT)",
        3,
    ),
    Row("E2E p50 (ms)", "e2e_p50", "`e2e`", "`request_latency`", "`request_latency` (s)"),
    Row(
        "output tokens/s",
        "out_tok_s",
        "`output_tokens_per_s`",
        "`output_token_throughput`",
        "`output_tokens_per_second` (mean)",
        1,
    ),
    Row(
        "requests/s",
        "req_s",
        "`requests_per_s`",
        "`request_throughput`",
        "`requests_per_second` (mean)",
        3,
    ),
    Row(
        "span of the figures (s)", "span_s", "`duration_s`", "`benchmark_duration`", "`duration`", 3
    ),
    Row(
        "output tokens, the tool's count",
        "out_tokens",
        "`throughput.output_tokens` (usage)",
        "`total_output_tokens` (re-tokenized, or usage with the flag)",
        "`output_token_count` total (usage)",
        0,
    ),
    Row(
        "output tokens, server usage as received",
        "usage_tokens",
        "`tokens.usage`",
        "`total_usage_completion_tokens`",
        "—",
        0,
    ),
    Row(
        "output tokens, output text re-tokenized",
        "retok_tokens",
        "`tokens.retokenized`",
        "— (= the tool's count without the flag)",
        "—",
        0,
    ),
    Row(
        "request send path p50 (ms)",
        "send_p50",
        "`send_overhead` (not in `ttft`)",
        "`http_req_sending` (in TTFT)",
        "—",
        3,
    ),
    Row("client processes (most at once)", "procs", "", "", "", 0),
    Row("whole command: wall (s)", "cmd_wall_s", "", "", "", 1),
    Row("whole command: client CPU (s)", "cmd_cpu_s", "", "", "", 1),
    Row("whole command: client CPU (% of a core)", "cmd_cpu_pct", "", "", "", 0),
    Row("load phase: client CPU (s)", "load_cpu_s", "", "", "", 2),
    Row("load phase: client CPU (% of a core)", "load_cpu_pct", "", "", "", 0),
    Row("load phase: server CPU (% of a core)", "server_cpu_pct", "", "", "", 0),
    Row("load phase: rest of the machine CPU (% of a core)", "other_cpu_pct", "", "", "", 0),
    Row(
        "client's own report: CPU % / loop lag p99 ms",
        "self_cpu_pct",
        "`client.cpu_pct`",
        "—",
        "—",
        1,
    ),
    Row("server stamps: requests served", "srv_requests", "", "", "", 0),
    Row("server stamps: output tokens sent", "srv_tokens", "", "", "", 0),
    Row("server stamps: TTFT p50 (ms), arrival → first chunk", "srv_ttft_p50", "", "", "", 2),
    Row("server stamps: TTFT p99 (ms)", "srv_ttft_p99", "", "", "", 2),
    Row("client TTFT p50 − server TTFT p50 (ms)", "client_ttft_excess_p50", "", "", "", 2),
)


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def format_names() -> list[str]:
    """The mapping of each tool's metric names onto AACO's, as Markdown lines."""
    lines = ["| metric | AACO | AIPerf | GuideLLM |", "|---|---|---|---|"]
    for row in ROWS:
        if row.aaco or row.aiperf or row.guidellm:
            lines.append(f"| {row.title} | {row.aaco} | {row.aiperf} | {row.guidellm} |")
    return lines


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) if known else None


def merge_repeats(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One run per tool, each figure the median over the tool's successful repeats."""
    by_tool: dict[str, list[Figures]] = {}
    for r in runs:
        if "figures" in r:
            by_tool.setdefault(r["tool"], []).append(r["figures"])
    merged = []
    for tool, figs in by_tool.items():
        keys = {k for f in figs for k in f}
        merged.append(
            {
                "tool": tool,
                "n": len(figs),
                "figures": {k: _median([f.get(k) for f in figs]) for k in keys},
            }
        )
    return merged


def format_case(case: dict[str, Any]) -> list[str]:
    """One case's values, a column per tool (and the scripted truth), as Markdown lines;
    with repeats, each value is the median of the tool's runs."""
    runs = merge_repeats(case["runs"])
    truth: Figures = case["truth"] or {}
    heads = [
        "metric",
        *(["scripted truth"] if truth else []),
        *(TOOL_TITLES[r["tool"]] + (f" (median of {r['n']})" if r["n"] > 1 else "") for r in runs),
    ]
    pins = case.get("pinning") or {}
    title = case["server"]
    if pins.get("server") or pins.get("client"):
        server_cpus, client_cpus = pins.get("server") or "any", pins.get("client") or "any"
        title += f"; server pinned to CPU {server_cpus}, client to CPU {client_cpus}"
    lines = [f"**{title}**", "", "| " + " | ".join(heads) + " |"]
    lines.append("|" + "---|" * len(heads))
    for row in ROWS:
        cells = [row.title]
        if truth:
            t = truth.get(row.key)
            if row.key == "tpot_p50" and t is not None:
                osl1 = _fmt(truth["tpot_osl1_p50"], 3)
                cells.append(f"{_fmt(t, 3)} (÷ n − first chunk) / {osl1} (÷ n − 1)")
            else:
                cells.append(_fmt(t, row.digits))
        values = [r["figures"].get(row.key) for r in runs]
        if row.key == "self_cpu_pct":
            lag = [r["figures"].get("loop_lag_p99") for r in runs]
            cells += [
                "—" if v is None else f"{_fmt(v, 1)} / {_fmt(g, 2)}"
                for v, g in zip(values, lag, strict=True)
            ]
        else:
            cells += [_fmt(v, row.digits) for v in values]
        if all(c == "—" for c in cells[1:]):
            continue
        lines.append("| " + " | ".join(cells) + " |")
    failed = [r for r in case["runs"] if "figures" not in r]
    for r in failed:
        lines += ["", f"{TOOL_TITLES[r['tool']]} failed (exit code {r['rc']})."]
    return lines


def format_doc(doc: dict[str, Any]) -> list[str]:
    """Every table of a result document (what ``--json`` writes), as Markdown lines."""
    host, load = doc["machine"], doc["load"]
    lines = [
        f"Machine: {host['cpu']}, {host['cores']} cores, {host['memory_gib']} GiB, "
        f"Linux {host['kernel']}, Python {host['python']}; "
        + ", ".join(f"{k} {v}" for k, v in doc["versions"].items()),
        f"Load: closed loop, concurrency {load['concurrency']}, {load['requests']} requests, "
        f"{load['input_tokens']} input tokens, {load['output_tokens']} output tokens, "
        "streaming chat.",
        "",
        *format_names(),
    ]
    for case in doc["cases"]:
        lines += ["", *format_case(case)]
    return lines


def machine() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def tool_version(python: Path, package: str) -> str | None:
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    try:
        out = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--server",
        default="scripted",
        help="scripted, tiny-llama-bytelevel, tiny-llama-word, or a base URL (default scripted)",
    )
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"among {','.join(TOOLS)}")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--input-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokens-per-chunk", default="1,3", help="scripted server: one case each")
    ap.add_argument("--ttft-ms", type=float, default=50.0, help="scripted server")
    ap.add_argument("--itl-ms", type=float, default=10.0, help="scripted server: chunk gap")
    ap.add_argument("--model", help="URL server: the model name to request")
    ap.add_argument("--tokenizer", help="URL server: its Hugging Face tokenizer folder")
    ap.add_argument("--no-ignore-eos", action="store_true", help="URL server: refuses it")
    ap.add_argument("--server-pid", type=int, help="URL server: sample its CPU")
    ap.add_argument("--aiperf", default="/tmp/venv-aiperf/bin/aiperf")
    ap.add_argument("--guidellm", default="/tmp/venv-guidellm/bin/guidellm")
    ap.add_argument(
        "--repeat", type=int, default=1, help="rounds over the tools; the table shows medians"
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="per command, seconds")
    ap.add_argument("--pause", type=float, default=2.0, help="seconds between commands")
    ap.add_argument("--pin-server", help="CPU list for the server's threads, e.g. 1")
    ap.add_argument("--pin-client", help="CPU list for the tools (taskset -c), e.g. 0")
    ap.add_argument("--workdir", type=Path, help="keep every tool's output here")
    ap.add_argument("--json", type=Path, help="write every figure and command here")
    ap.add_argument("--load", type=Path, help="re-render the tables of a saved --json; run nothing")
    a = ap.parse_args(argv)
    if a.load:
        print("\n".join(format_doc(json.loads(a.load.read_text()))))
        return 0
    a.tools = [t.strip() for t in a.tools.split(",") if t.strip()]
    unknown = sorted(set(a.tools) - set(TOOLS))
    if unknown:
        ap.error(f"unknown tool(s) {', '.join(unknown)}; valid: {', '.join(TOOLS)}")
    load = Load(a.concurrency, a.requests, a.input_tokens, a.output_tokens, a.seed)
    chunkings = [int(v) for v in a.tokens_per_chunk.split(",")] if a.server == "scripted" else [1]

    versions = {
        "aaco": tool_version(Path(sys.executable), "aaco"),
        "aiperf": tool_version(Path(a.aiperf).parent / "python", "aiperf"),
        "guidellm": tool_version(Path(a.guidellm).parent / "python", "guidellm"),
    }
    with contextlib.ExitStack() as stack:
        work = a.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="llm-tools-"))
        )
        cases = [run_case(a.server, tpc, a, load, work) for tpc in chunkings]

    doc = {
        "command": [sys.executable, *sys.argv],
        "machine": machine(),
        "versions": versions,
        "load": asdict(load),
        "cases": cases,
    }
    print("\n".join(format_doc(doc)))
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1, default=str))
    failed = any("figures" not in r for c in cases for r in c["runs"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
