"""``aaco llm bench``: measure an OpenAI-compatible server under load into a session bundle.

Stages: reach the server (or launch it) -> probe one small request (parameters the server
refuses are dropped and said) -> for each load point (one, or a ``--sweep`` that stops at
saturation) drive the load while the system sampler watches the server process (or this
one) and the server's ``/metrics`` is scraped -> re-tokenize where a tokenizer is given ->
write the ``serving_*`` tables, ``metrics/serving_summary.json`` (:func:`summarize`) and
``session.json`` (``kind: "serving"``) -> publish and render the reports.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from aaco import __version__
from aaco.analysis.gpu import summarize_gpu
from aaco.analysis.serving import (
    RequestResult,
    find_knee,
    serving_tables,
    summarize_point,
)
from aaco.collectors.base import COLLECTORS, Collector
from aaco.collectors.environment import capture_environment
from aaco.errors import UsageError
from aaco.report.publish import write_reports
from aaco.serving.client import Endpoint, RequestSpec, new_session, send
from aaco.serving.load import Load, LoadResult, loads_for_sweep, run_load
from aaco.serving.prometheus import Scraper
from aaco.serving.prompts import Tokenizer, load_dataset, load_tokenizer, make_plan
from aaco.session.bundle import (
    FORMAT_VERSION,
    STATUS_COMPLETED,
    STATUS_FAILED,
    STATUS_RUNNING,
    BundleWriter,
    Session,
    utc_now_iso,
)
from aaco.session.paths import ENV_FILE, SERVING_SUMMARY_FILE
from aaco.session.records import save_session

__all__ = ["BenchOptions", "bench", "serving_meta", "summarize", "write_serving"]

#: request fields AACO adds on its own and drops (saying so) when a server refuses them
OPTIONAL_PARAMS = ("ignore_eos", "stream_options")
#: a sweep stops once a step raises throughput by less than this (relative)
SATURATION_GAIN = 0.05


@dataclass(frozen=True)
class BenchOptions:
    url: str
    load: Load
    model: str | None = None
    endpoint: str = "chat"
    api_key: str | None = None
    sweep: tuple[str, tuple[float, ...]] | None = None
    stop_at_saturation: bool = True
    input_tokens: int = 128
    input_spread: float = 0.0
    output_tokens: int = 128
    output_spread: float = 0.0
    tokenizer: str | None = None
    dataset: Path | None = None
    #: SLO bounds in ns by metric (ttft, tpot, e2e)
    slo: Mapping[str, float] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    ignore_eos: bool = True
    output: Path = Path("sessions")
    tag: str | None = None
    argv: Sequence[str] | None = None
    server_pid: int | None = None
    launch: str | None = None
    launch_timeout_s: float = 300.0
    metrics_url: str | None = None
    scrape: bool = True
    telemetry: bool = True
    sample_hz: float = 10.0
    request_timeout_s: float = 600.0
    seed: int = 0


def _get_json(url: str, api_key: str | None, timeout: float = 10.0) -> Any:
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return msgspec.json.decode(resp.read())


def _served_models(url: str, api_key: str | None) -> list[str]:
    data = _get_json(url.rstrip("/") + "/v1/models", api_key)
    items = data.get("data", []) if isinstance(data, dict) else []
    return [str(m["id"]) for m in items if isinstance(m, dict) and "id" in m]


def _wait_ready(
    url: str, api_key: str | None, proc: subprocess.Popen[bytes] | None, timeout_s: float
) -> list[str]:
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        try:
            return _served_models(url, api_key)
        except (urllib.error.URLError, OSError, ValueError, msgspec.DecodeError) as exc:
            last = str(getattr(exc, "reason", exc))
        if proc is not None and proc.poll() is not None:
            raise UsageError(
                f"--launch: the server exited with code {proc.returncode} before it "
                f"answered at {url}"
            )
        if proc is None or time.monotonic() > deadline:
            raise UsageError(f"cannot reach an OpenAI-compatible server at {url}: {last}")
        time.sleep(0.5)


def _launch(cmd: str) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(
            shlex.split(cmd),
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except (OSError, ValueError) as exc:
        raise UsageError(f"--launch: cannot start {cmd!r}: {exc}") from None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


async def _probe_once(endpoint: Endpoint, timeout_s: float) -> RequestResult:
    r = RequestResult(point=-1, request=0, phase="probe", intended_ns=None, sent_ns=0, end_ns=None)
    async with new_session(timeout_s) as session:
        await send(session, endpoint, RequestSpec(0, "Hello, how are you today?", 4), r)
    return r


def probe(endpoint: Endpoint, timeout_s: float = 60.0) -> tuple[Endpoint, list[str]]:
    """Send one small request; drop the optional fields a server refuses (with a warning
    each) until it answers. UsageError when it still refuses."""
    warnings: list[str] = []
    for _ in range(len(OPTIONAL_PARAMS) + 1):
        r = asyncio.run(_probe_once(endpoint, timeout_s))
        if r.status == "ok":
            return endpoint, warnings
        err = r.error or ""
        refused = (r.http_status or 0) in (400, 422)
        culprit = next((p for p in OPTIONAL_PARAMS if p in err and _sends(endpoint, p)), None)
        if not refused or culprit is None:
            break
        warnings.append(
            f"the server refused '{culprit}' ({err[:160]}); it is not sent"
            + (
                "; output may end at EOS before max_tokens"
                if culprit == "ignore_eos"
                else "; token counts come from chunks or the tokenizer"
            )
        )
        if culprit == "stream_options":
            endpoint = replace(endpoint, include_usage=False)
        else:
            endpoint = replace(
                endpoint, params={k: v for k, v in endpoint.params.items() if k != culprit}
            )
    raise UsageError(f"the server at {endpoint.target} failed the first (probe) request: {r.error}")


def _sends(endpoint: Endpoint, name: str) -> bool:
    return endpoint.include_usage if name == "stream_options" else name in endpoint.params


def retokenize(results: Sequence[RequestResult], tokenizer: Tokenizer) -> None:
    """The tokenizer's count of each request's output, and of each chunk whose count the
    server did not give.

    A chunk's count is by prefix: count(text up to chunk k) - count(text up to chunk k-1),
    so a token split across chunks counts once. Re-tokenized text need not give the server's
    count (a byte-level BPE re-encodes decoded text differently: docs/metrics.md), so when
    the server's usage is known the chunk counts are rescaled to sum to it (largest
    remainder): the split between chunks is then an estimate, the total the server's.
    """
    for r in results:
        tc = [c for c in r.all_chunks() if c.kind in ("content", "reasoning", "tool")]
        if not tc:
            r.retokenized_tokens = 0 if r.status == "ok" else None
            continue
        text = "".join(c.text for c in tc)
        r.retokenized_tokens = tokenizer.count(text)
        if all(c.tokens is not None for c in tc):
            continue
        if r.usage_tokens is not None and r.usage_tokens == len(tc):
            continue  # one token per chunk: finalize() says so without the tokenizer
        prefixes, acc = [], ""
        for c in tc:
            acc += c.text
            prefixes.append(acc)
        counts, prev = [], 0
        for n in tokenizer.counts(prefixes):
            counts.append(max(0, n - prev))
            prev = max(prev, n)
        if r.usage_tokens is not None and sum(counts) != r.usage_tokens:
            counts = rescale(counts, r.usage_tokens)
        for c, n in zip(tc, counts, strict=True):
            c.tokens = n


def rescale(counts: Sequence[int], total: int) -> list[int]:
    """``counts`` scaled to sum to ``total`` by the largest-remainder method (each count
    proportional to its share; all equal when every count is 0)."""
    weight = sum(counts)
    shares = [c * total / weight for c in counts] if weight else [total / len(counts)] * len(counts)
    out = [int(v) for v in shares]
    order = sorted(range(len(shares)), key=lambda i: shares[i] - out[i], reverse=True)
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def summarize(
    requests: pa.Table,
    chunks: pa.Table,
    points: Sequence[dict[str, Any]],
    slo: Mapping[str, float],
) -> dict[str, Any]:
    """``metrics/serving_summary.json`` from the ``serving_requests`` and ``serving_chunks``
    tables: per point (load, client health, figures), the sweep's curve and knee, and every
    warning."""
    out_points = []
    warnings: list[str] = []
    for p in points:
        s = summarize_point(
            requests, chunks, point=p["point"], slo=slo, target_rate=p["load"].get("rate")
        )
        s["label"] = p["label"]
        s["load"] = p["load"]
        s["client"] = p["client"]
        s["warnings"] = list(s["warnings"]) + list(p["client"].get("warnings", []))
        warnings += [f"{p['label']}: {w}" for w in s["warnings"]]
        out_points.append(s)
    sweep = None
    if len(out_points) > 1:
        key = out_points[0]["load"]["mode"]
        loads = [float(p["load"][key]) for p in out_points]
        tput = [p["throughput"]["output_tokens_per_s"] for p in out_points]
        power = [
            t / (p["e2e_ms"]["p50"] / 1e3) if t is not None and p["e2e_ms"] else None
            for t, p in zip(tput, out_points, strict=True)
        ]
        known = [i for i, v in enumerate(power) if v is not None]
        best = max(known, key=lambda i: power[i] or 0.0) if known else None
        sweep = {
            "power": power,
            "best_power": (
                None
                if best is None
                else {"index": best, "load": loads[best], "at_sweep_end": best == len(loads) - 1}
            ),
            "parameter": key,
            "values": loads,
            "knee": find_knee(loads, tput),
            "stopped_at_saturation": any(p.get("saturated") for p in points),
        }
    return {"points": out_points, "sweep": sweep, "warnings": warnings}


def _saturated(prev: dict[str, Any], cur: dict[str, Any]) -> bool:
    a = prev["throughput"]["output_tokens_per_s"]
    b = cur["throughput"]["output_tokens_per_s"]
    return a is not None and b is not None and a > 0 and b < a * (1 + SATURATION_GAIN)


def bench(opts: BenchOptions, progress: Callable[[str], None] | None = None) -> Session:
    """Run the benchmark and publish its bundle; UsageError before any bundle exists when
    the server cannot be reached or refuses the request."""
    say = progress or (lambda _m: None)
    tokenizer = load_tokenizer(opts.tokenizer)
    dataset = load_dataset(opts.dataset) if opts.dataset else None
    proc = _launch(opts.launch) if opts.launch else None
    try:
        return _bench(opts, tokenizer, dataset, proc, say)
    finally:
        if proc is not None:
            _stop(proc)


def _bench(
    opts: BenchOptions,
    tokenizer: Tokenizer | None,
    dataset: Any,
    proc: subprocess.Popen[bytes] | None,
    say: Callable[[str], None],
) -> Session:
    models = _wait_ready(opts.url, opts.api_key, proc, opts.launch_timeout_s)
    model = opts.model or (models[0] if models else None)
    if model is None:
        raise UsageError(f"the server at {opts.url} lists no model; give --model")
    params = dict(opts.params)
    if opts.ignore_eos:
        params.setdefault("ignore_eos", True)
    endpoint = Endpoint(
        url=opts.url, kind=opts.endpoint, model=model, api_key=opts.api_key, params=params
    )
    say(f"probing {endpoint.target} (model {model})")
    endpoint, warnings = probe(endpoint, opts.request_timeout_s)
    loads = [opts.load]
    if opts.sweep is not None:
        loads = loads_for_sweep(opts.load, opts.sweep[0], opts.sweep[1])
    # distinct prompts for every request of every point (make_plan caps the count and
    # cycles beyond it); a duration-bounded point is sized for 1.5x its expected requests
    n_plan = sum(
        ld.warmup_requests
        + (
            ld.requests
            or int(1.5 * (ld.rate or 100.0 * (ld.concurrency or 1)) * (ld.duration_s or 60))
        )
        for ld in loads
    )
    plan, plan_info = make_plan(
        n_plan,
        input_tokens=opts.input_tokens,
        input_spread=opts.input_spread,
        output_tokens=opts.output_tokens,
        output_spread=opts.output_spread,
        tokenizer=tokenizer,
        dataset=dataset,
        seed=opts.seed,
    )
    writer = BundleWriter(opts.output)
    argv = list(opts.argv if opts.argv is not None else sys.argv)
    meta = serving_meta(
        writer,
        model=model,
        source="server",
        backend={"name": "openai-http", "provider": opts.url},
        run={
            "framework": "openai-http",
            "seed": opts.seed,
            "telemetry": opts.telemetry,
            "sample_hz": opts.sample_hz if opts.telemetry else None,
            "timeout_s": opts.request_timeout_s,
        },
        serving={
            "url": opts.url,
            "endpoint": opts.endpoint,
            "model": model,
            "params_sent": dict(endpoint.params)
            | ({"stream_options": {"include_usage": True}} if endpoint.include_usage else {}),
            "load": opts.load.to_json(),
            "sweep": (
                {"parameter": opts.sweep[0], "values": list(opts.sweep[1])} if opts.sweep else None
            ),
            "prompts": plan_info,
            "slo_ms": {k: v / 1e6 for k, v in opts.slo.items()},
            "server_pid": proc.pid if proc is not None else opts.server_pid,
            "launch": opts.launch,
            "probe_warnings": warnings,
        },
        tag=opts.tag,
        argv=argv,
    )
    results: list[RequestResult] = []
    points: list[dict[str, Any]] = []
    sampler: Collector | None = None
    gpu: Collector | None = None
    try:
        save_session(writer.path, meta)
        env = capture_environment(argv, [])
        writer.write_json(ENV_FILE, env)
        meta["fingerprint"] = env.get("fingerprint")
        watched = proc.pid if proc is not None else (opts.server_pid or os.getpid())
        if opts.telemetry:
            sampler = COLLECTORS.get("system").for_process(watched, opts.sample_hz)
            sampler.start()
            # the server's GPUs: clocks, power and the energy counters per load point
            gpu = COLLECTORS.get("gpu").for_process(watched, opts.sample_hz)
            gpu.start()
        scraper = None
        if opts.scrape:
            scraper = Scraper(opts.metrics_url or opts.url.rstrip("/") + "/metrics")
            if scraper.scrape_once():
                scraper.start()
        t_start = time.perf_counter_ns()
        prev: dict[str, Any] | None = None
        for i, load in enumerate(loads):
            say(f"load {load.label}")
            t0 = time.perf_counter_ns()
            lr: LoadResult = run_load(
                endpoint,
                load,
                plan,
                point=i,
                timeout_s=opts.request_timeout_s,
                keep_text=tokenizer is not None,
                plan_offset=len(results),
            )
            meta["phases"][f"point{i}"] = [t0, time.perf_counter_ns()]
            if tokenizer is not None:
                retokenize(lr.results, tokenizer)
            results += lr.results
            entry = {
                "point": i,
                "label": load.label,
                "load": load.to_json(),
                "client": lr.health.to_json(),
            }
            points.append(entry)
            if opts.sweep is not None and opts.stop_at_saturation and len(loads) > 1:
                req, ch = serving_tables(lr.results)
                cur = summarize_point(req, ch, point=i, target_rate=load.rate)
                if prev is not None and _saturated(prev, cur):
                    entry["saturated"] = True
                    say(
                        f"saturated at {load.label}: throughput rose < "
                        f"{SATURATION_GAIN:.0%}; sweep stopped"
                    )
                    break
                prev = cur
        meta["phases"]["measured"] = [t_start, time.perf_counter_ns()]
        if sampler is not None:
            sampler.stop()
            writer.write_table(sampler.table_name, sampler.table())
            meta["telemetry"] = {
                **sampler.info(),
                "pid": watched,
                "process": "server" if watched != os.getpid() else "client",
            }
        gpu_table = None
        if gpu is not None:
            gpu.stop()
            gpu_table = gpu.table()
            if gpu_table.num_rows:
                writer.write_table(gpu.table_name, gpu_table)
            meta.setdefault("collectors", {})["gpu"] = gpu.info()
        if scraper is not None:
            scraper.stop()
            if scraper.scrapes:
                writer.write_table("server_metrics", scraper.table())
            meta["serving"]["server_metrics"] = scraper.info()
        write_serving(writer, meta, results, points, opts.slo, warnings, gpu_table)
    except BaseException as exc:
        if sampler is not None:
            sampler.stop()
        if gpu is not None:
            gpu.stop()
        _salvage(writer, meta, results, points, opts.slo, exc)
        raise
    writer.publish()
    write_reports(writer.final_path)
    return Session.load(writer.final_path)


def serving_meta(
    writer: BundleWriter,
    *,
    model: str,
    source: str,
    backend: Mapping[str, Any],
    run: Mapping[str, Any],
    serving: Mapping[str, Any],
    tag: str | None,
    argv: Sequence[str],
) -> dict[str, Any]:
    """The first ``session.json`` of a serving bundle (``kind: "serving"``)."""
    return {
        "format_version": FORMAT_VERSION,
        "aaco_version": __version__,
        "session_id": writer.session_id,
        "kind": "serving",
        "created_utc": utc_now_iso(),
        "finished_utc": None,
        "status": STATUS_RUNNING,
        "error": None,
        "tag": tag,
        "command_line": list(argv),
        "model": {"name": model, "path": None, "source": source},
        "backend": dict(backend),
        "run": dict(run),
        "clock": {
            "name": "perf_counter_ns (CLOCK_MONOTONIC)",
            "epoch_offset_ns": time.time_ns() - time.perf_counter_ns(),
        },
        "serving": dict(serving),
        "phases": {},
        "failures": [],
    }


def write_serving(
    writer: BundleWriter,
    meta: dict[str, Any],
    results: Sequence[RequestResult],
    points: Sequence[dict[str, Any]],
    slo: Mapping[str, float],
    warnings: Sequence[str] = (),
    gpu_table: pa.Table | None = None,
) -> None:
    """Write the serving tables and summary into ``writer``'s bundle and finish ``meta``
    (status ``failed`` when no measured request succeeded). With the GPU collector's table,
    each load point gets its energy (``gpu``: joules per output token and per request)."""
    requests, chunks = serving_tables(results)
    writer.write_table("serving_requests", requests)
    writer.write_table("serving_chunks", chunks)
    summary = summarize(requests, chunks, points, slo)
    summary["warnings"] = list(warnings) + summary["warnings"]
    if gpu_table is not None and gpu_table.num_rows:
        add_gpu_energy(summary, gpu_table, meta["phases"])
    writer.write_json(SERVING_SUMMARY_FILE, summary)
    measured = [r for r in results if r.phase == "measured"]
    if not measured:
        meta["status"] = STATUS_FAILED
        meta["error"] = {
            "message": "no measured request: the warmup (or the duration) left none",
            "stage": "load",
        }
    elif not any(r.status == "ok" for r in measured):
        errs = [r.error for r in measured if r.error]
        meta["status"] = STATUS_FAILED
        meta["error"] = {
            "message": f"no request succeeded: {errs[0] if errs else 'unknown error'}",
            "stage": "load",
        }
    else:
        meta["status"] = STATUS_COMPLETED
    meta["finished_utc"] = utc_now_iso()
    save_session(writer.path, meta)


def add_gpu_energy(summary: dict[str, Any], gpu_table: pa.Table, phases: Mapping[str, Any]) -> None:
    """``summary["gpu"]`` over the measured phase and each point's ``gpu``: the energy the
    GPUs the server used drew during that point's load (their counters differenced between
    the point's ends, docs/metrics.md), per output token and per successful request."""
    measured = phases.get("measured")
    whole = summarize_gpu(gpu_table, _span(measured), None)
    summary["gpu"] = whole
    for p in summary.get("points") or []:
        span = _span(phases.get(f"point{p['point']}"))
        tput = p.get("throughput") or {}
        n_ok = (p.get("requests") or {}).get("ok")
        g = summarize_gpu(gpu_table, span, n_ok if isinstance(n_ok, int) else None)
        if g is None:
            continue
        energy = g.get("energy_j")
        tokens = tput.get("output_tokens")
        p["gpu"] = {
            "energy_j": energy,
            "avg_power_w": g.get("avg_power_w"),
            "joules_per_request": g.get("joules_per_inference"),
            "joules_per_output_token": (energy / tokens if energy is not None and tokens else None),
            "clock_ratio": g.get("clock_ratio"),
            "throttled_share": g.get("throttled_share"),
            "unknown": g.get("unknown") or [],
        }


def _span(window: Any) -> tuple[int, int] | None:
    if isinstance(window, list | tuple) and len(window) == 2:
        return int(window[0]), int(window[1])
    return None


def _salvage(
    writer: BundleWriter,
    meta: dict[str, Any],
    results: Sequence[RequestResult],
    points: Sequence[dict[str, Any]],
    slo: Mapping[str, float],
    exc: BaseException,
) -> None:
    """On Ctrl-C or an internal error: keep the load points that finished (their tables and
    summary), mark the run failed, publish. The point that was running is lost."""
    interrupted = isinstance(exc, KeyboardInterrupt)
    reason = (
        "interrupted (Ctrl-C or SIGTERM)"
        if interrupted
        else f"internal error: {type(exc).__name__}: {exc}"
    )
    done = {p["point"] for p in points}
    kept = [r for r in results if r.point in done]
    try:
        if points:
            write_serving(writer, meta, kept, points, slo)
        meta["status"] = STATUS_FAILED
        meta["error"] = {
            "message": f"{reason}; {len(points)} load point(s) finished and kept",
            "stage": "aaco" if not interrupted else "load",
        }
        meta["finished_utc"] = utc_now_iso()
        save_session(writer.path, meta)
        writer.publish()
    except Exception:  # the original error is what the user sees; the bundle is best effort
        pass
