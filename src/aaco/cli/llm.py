"""``aaco llm``: LLM serving (``bench`` against any OpenAI-compatible server) and in-process
generation over ONNX decoders (``run``)."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import click

from aaco.cli._common import CONTEXT, finish, format_option, sessions_root
from aaco.errors import UsageError

__all__ = ["llm_app", "parse_duration_ns", "parse_param", "parse_slo"]

_UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}


def parse_duration_ns(text: str) -> float:
    """``200ms``, ``1.5s``, ``800us`` -> ns; a bare number is milliseconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*(ns|us|µs|ms|s)?\s*", text)
    if not m:
        raise UsageError(f"not a duration: {text!r} (e.g. 200ms, 1.5s)")
    return float(m.group(1)) * _UNITS[m.group(2) or "ms"]


def _finite_positive(value: float, name: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name} must be a positive number, not {value}")
    return value


def parse_slo(values: tuple[str, ...]) -> dict[str, float]:
    """``--slo ttft=200ms`` values -> {metric: bound in ns}."""
    from aaco.analysis.serving import SLO_METRICS

    out: dict[str, float] = {}
    for v in values:
        key, sep, bound = v.partition("=")
        if not sep or key.strip() not in SLO_METRICS:
            raise UsageError(
                f"--slo takes METRIC=DURATION with METRIC one of "
                f"{', '.join(SLO_METRICS)}, not {v!r}"
            )
        out[key.strip()] = _finite_positive(parse_duration_ns(bound), f"--slo {key.strip()}")
    return out


def parse_param(values: tuple[str, ...]) -> dict[str, Any]:
    """``--param temperature=0`` values -> request fields (JSON values, else strings)."""
    out: dict[str, Any] = {}
    for v in values:
        key, sep, raw = v.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--param takes KEY=VALUE, not {v!r}")
        try:
            out[key.strip()] = json.loads(raw, parse_constant=_no_constant)
        except json.JSONDecodeError:
            out[key.strip()] = raw
        except ValueError as exc:
            raise UsageError(f"--param {key.strip()}: {exc}") from None
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value a server accepts")


def _mean_spread(text: str, name: str) -> tuple[int, float]:
    """``128`` or ``128:0.25`` (mean and relative spread)."""
    mean, _, spread = text.partition(":")
    try:
        m, s = int(mean), float(spread) if spread else 0.0
    except ValueError:
        raise UsageError(f"{name} takes N or N:SPREAD (e.g. 128:0.25), not {text!r}") from None
    if m < 1 or not 0 <= s < 1:
        raise UsageError(f"{name}: N must be >= 1 and SPREAD in [0, 1): {text!r}")
    return m, s


def _progress(message: str) -> None:
    sys.stderr.write(f"aaco: {message}\n")


@click.group("llm", context_settings=CONTEXT)
def llm_app() -> None:
    """LLM inference: serving benchmarks and ONNX decoder generation."""


@llm_app.command("bench")
@click.option("--url", required=True, help="Base URL of the server, e.g. http://127.0.0.1:8000.")
@click.option("--model", help="Model name to request (default: the first of /v1/models).")
@click.option(
    "--endpoint",
    type=click.Choice(["chat", "completions"]),
    default="chat",
    show_default=True,
    help="/v1/chat/completions or /v1/completions.",
)
@click.option(
    "--api-key-env",
    default="OPENAI_API_KEY",
    show_default=True,
    help="Environment variable holding the API key (sent as a Bearer token).",
)
@click.option("--concurrency", type=int, help="Closed loop: requests kept in flight.")
@click.option("--rate", type=float, help="Open loop: requests per second (absolute schedule).")
@click.option(
    "--arrival",
    type=click.Choice(["constant", "poisson", "gamma"]),
    default="poisson",
    show_default=True,
    help="Open-loop inter-arrival law.",
)
@click.option(
    "--burstiness",
    type=float,
    default=1.0,
    show_default=True,
    help="Gamma shape (1 = Poisson, < 1 burstier).",
)
@click.option(
    "--ramp-up",
    type=float,
    default=0.0,
    show_default=True,
    help="Closed loop: start the slots evenly over this many seconds, not all at once.",
)
@click.option(
    "--max-in-flight",
    type=int,
    help="Open loop: cap on requests in flight (sends wait for a free one, and "
    "the wait shows as dispatch delay).",
)
@click.option("--requests", "n_requests", type=int, help="Measured requests per load point.")
@click.option("--duration", type=float, help="Or: seconds of load per point.")
@click.option(
    "--warmup",
    type=int,
    default=0,
    show_default=True,
    help="Requests excluded from the figures, counted from the first sent.",
)
@click.option(
    "--warmup-s",
    type=float,
    default=0.0,
    help="Or: seconds excluded from the start (with --requests, counted within them).",
)
@click.option(
    "--input-tokens",
    default="128",
    show_default=True,
    help="Prompt length N or N:SPREAD (uniform within +-SPREAD x N).",
)
@click.option("--output-tokens", default="128", show_default=True, help="max_tokens N or N:SPREAD.")
@click.option(
    "--tokenizer",
    help="tokenizer.json (or its directory) of the served model: "
    "sizes prompts in tokens, re-tokenizes as a fallback and for reconciliation.",
)
@click.option(
    "--dataset",
    type=click.Path(path_type=Path),
    help="JSONL of prompts ('prompt' or 'messages', optional 'max_tokens').",
)
@click.option("--sweep", help="concurrency=1,2,4,8 or rate=5,10,20: one load point per value.")
@click.option(
    "--no-stop-at-saturation",
    is_flag=True,
    help="Run every sweep point even after throughput stops rising.",
)
@click.option("--slo", multiple=True, help="Goodput bound, e.g. ttft=200ms, tpot=50ms, e2e=2s.")
@click.option("--param", multiple=True, help="Extra request field KEY=VALUE (JSON value).")
@click.option("--no-ignore-eos", is_flag=True, help="Do not send ignore_eos: true.")
@click.option("--server-pid", type=int, help="Sample this server process's CPU and memory.")
@click.option("--launch", help="Start the server with this command, wait for it, stop it after.")
@click.option("--launch-timeout", type=float, default=300.0, show_default=True)
@click.option("--metrics-url", help="Prometheus endpoint (default URL/metrics).")
@click.option("--no-scrape", is_flag=True, help="Do not scrape the server's /metrics.")
@click.option("--no-telemetry", is_flag=True, help="Do not sample system telemetry.")
@click.option("--sample-hz", type=float, default=10.0, show_default=True)
@click.option(
    "--timeout",
    type=float,
    default=600.0,
    show_default=True,
    help="Deadline of each request, whole response, in seconds.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--tag", help="Free text stored with the session.")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Sessions root (default ./sessions or $AACO_SESSIONS).",
)
@format_option("--report", "report_format", help="Report printed after the run.")
def bench_command(
    url: str,
    model: str | None,
    endpoint: str,
    api_key_env: str,
    concurrency: int | None,
    rate: float | None,
    arrival: str,
    burstiness: float,
    ramp_up: float,
    max_in_flight: int | None,
    n_requests: int | None,
    duration: float | None,
    warmup: int,
    warmup_s: float,
    input_tokens: str,
    output_tokens: str,
    tokenizer: str | None,
    dataset: Path | None,
    sweep: str | None,
    no_stop_at_saturation: bool,
    slo: tuple[str, ...],
    param: tuple[str, ...],
    no_ignore_eos: bool,
    server_pid: int | None,
    launch: str | None,
    launch_timeout: float,
    metrics_url: str | None,
    no_scrape: bool,
    no_telemetry: bool,
    sample_hz: float,
    timeout: float,
    seed: int,
    tag: str | None,
    output: Path | None,
    report_format: str,
) -> None:
    """Measure an OpenAI-compatible server under load: TTFT, TPOT, ITL, throughput, goodput."""
    from aaco.serving.bench import BenchOptions, bench
    from aaco.serving.load import Load, sweep_values

    _finite_positive(timeout, "--timeout")
    _finite_positive(sample_hz, "--sample-hz")
    _finite_positive(launch_timeout, "--launch-timeout")
    # lazy, like the library: `aaco --help` imports this module
    import psutil

    if server_pid is not None and (server_pid <= 0 or not psutil.pid_exists(server_pid)):
        raise UsageError(f"--server-pid {server_pid}: no such process")

    sweep_spec = None
    if sweep:
        key, vals = sweep_values(sweep)
        sweep_spec = (key, tuple(vals))
        if key == "concurrency" and concurrency is None and rate is None:
            concurrency = int(vals[0])
        if key == "rate" and rate is None and concurrency is None:
            rate = vals[0]
    if n_requests is None and duration is None:
        n_requests = 100
    load = Load(
        concurrency=concurrency,
        rate=rate,
        arrival=arrival,
        burstiness=burstiness,
        requests=n_requests,
        duration_s=duration,
        warmup_requests=warmup,
        warmup_s=warmup_s,
        seed=seed,
        max_in_flight=max_in_flight,
        ramp_up_s=ramp_up,
    )
    in_mean, in_spread = _mean_spread(input_tokens, "--input-tokens")
    out_mean, out_spread = _mean_spread(output_tokens, "--output-tokens")
    opts = BenchOptions(
        url=url,
        load=load,
        model=model,
        endpoint=endpoint,
        api_key=os.environ.get(api_key_env) or None,
        sweep=sweep_spec,
        stop_at_saturation=not no_stop_at_saturation,
        input_tokens=in_mean,
        input_spread=in_spread,
        output_tokens=out_mean,
        output_spread=out_spread,
        tokenizer=tokenizer,
        dataset=dataset,
        slo=parse_slo(slo),
        params=parse_param(param),
        ignore_eos=not no_ignore_eos,
        output=sessions_root(output),
        tag=tag,
        argv=["aaco", *sys.argv[1:]],
        server_pid=server_pid,
        launch=launch,
        launch_timeout_s=launch_timeout,
        metrics_url=metrics_url,
        scrape=not no_scrape,
        telemetry=not no_telemetry,
        sample_hz=sample_hz,
        request_timeout_s=timeout,
        seed=seed,
    )
    session = bench(opts, progress=_progress)
    finish(session, "bench", report_format)


@llm_app.command("run")
@click.option(
    "--model",
    "-m",
    default="gpt2",
    show_default=True,
    help="A built-in decoder (gpt2, gpt2-tiny) or an .onnx decoder with past_key_values inputs.",
)
@click.option("--prompt-tokens", type=int, default=128, show_default=True)
@click.option("--output-tokens", type=int, default=64, show_default=True)
@click.option("--batch", type=int, default=1, show_default=True, help="Sequences per generation.")
@click.option("--warmup", type=int, default=1, show_default=True, help="Warmup generations.")
@click.option("--iterations", type=int, default=3, show_default=True, help="Measured generations.")
@click.option(
    "--backend", default="cpu", show_default=True, help="cpu, cuda, rocm, ... or a provider."
)
@click.option("--threads", type=int, help="Intra-op threads (default: onnxruntime's).")
@click.option("--no-profile", is_flag=True, help="Skip the prefill/decode operator profile.")
@click.option("--no-telemetry", is_flag=True, help="Do not sample system telemetry.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--tag", help="Free text stored with the session.")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    help="Sessions root (default ./sessions or $AACO_SESSIONS).",
)
@click.option(
    "--config",
    type=click.Path(path_type=Path),
    help="Directory with models.yaml/backends.yaml overriding the built-ins.",
)
@format_option("--report", "report_format", help="Report printed after the run.")
def run_command(
    model: str,
    prompt_tokens: int,
    output_tokens: int,
    batch: int,
    warmup: int,
    iterations: int,
    backend: str,
    threads: int | None,
    no_profile: bool,
    no_telemetry: bool,
    seed: int,
    tag: str | None,
    output: Path | None,
    config: Path | None,
    report_format: str,
) -> None:
    """Generate with an ONNX decoder and its KV cache: TTFT (prefill), TPOT (decode steps)
    and the operator profile split into prefill and decode."""
    # lazy: onnxruntime and onnx
    from aaco.config import load_registry
    from aaco.generate.decoder import GenerateOptions
    from aaco.generate.session import run_generate

    provider = load_registry(config).backend(backend).provider
    opts = GenerateOptions(
        model=model,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        batch=batch,
        warmup=warmup,
        iterations=iterations,
        provider=provider,
        threads=threads,
        seed=seed,
        profile=not no_profile,
    )
    session = run_generate(
        opts,
        output=sessions_root(output),
        tag=tag,
        argv=["aaco", *sys.argv[1:]],
        config_dir=config,
        telemetry=not no_telemetry,
    )
    finish(session, "generation", report_format)
