"""Load shapes and the loop that drives them: closed loop (``--concurrency N``: N requests
in flight, each slot sends its next request when the previous one ends) and open loop
(``--rate R``: an absolute arrival schedule drawn up front, each request sent at its
scheduled instant however many are in flight).

The open-loop schedule is absolute (send i is due at ``t0 + offset[i]``), so a client that
falls behind does not drift: the lateness of each send is recorded as its dispatch delay and
latency is also measured from the intended send (docs/metrics.md). The loop also measures
itself: its CPU time and its event-loop lag (how late a 5 ms timer fires), the two ways a
client distorts what it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aaco.analysis.serving import RequestResult, distribution
from aaco.errors import UsageError
from aaco.report.serving import load_label
from aaco.serving.client import Endpoint, RequestSpec, new_session, send
from aaco.serving.eventloop import new_event_loop, reduce_timer_slack

__all__ = ["ARRIVALS", "ClientHealth", "Load", "LoadResult", "arrival_offsets", "run_load"]

ARRIVALS = ("constant", "poisson", "gamma")
#: more streams than this from one process is a typo, not a load
MAX_CONCURRENCY = 100_000
_LAG_PERIOD_S = 0.005
#: the client's own CPU use above which its timestamps may lag (100 = one core)
CPU_WARN_PCT = 80.0
#: event-loop lag p99 above which chunk stamps may be late
LAG_WARN_MS = 5.0


@dataclass(frozen=True)
class Load:
    """One load point: closed loop (``concurrency``) or open loop (``rate``)."""

    concurrency: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    burstiness: float = 1.0
    requests: int | None = None
    duration_s: float | None = None
    #: warmup by request count (the first N sent) or by time (sent before t0 + warmup_s)
    warmup_requests: int = 0
    warmup_s: float = 0.0
    seed: int = 0
    #: a rate-limited closed loop is not offered; in open loop, cap requests in flight
    max_in_flight: int | None = None
    #: closed loop: start the N slots evenly over this many seconds instead of all at once
    ramp_up_s: float = 0.0

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise UsageError("give either --concurrency or --rate")
        if self.concurrency is not None and self.concurrency < 1:
            raise UsageError(f"--concurrency must be >= 1, not {self.concurrency}")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise UsageError(f"--rate must be a positive number, not {self.rate}")
        if self.arrival not in ARRIVALS:
            raise UsageError(f"--arrival must be one of {', '.join(ARRIVALS)}")
        if self.max_in_flight is not None and (self.rate is None or self.max_in_flight < 1):
            raise UsageError("--max-in-flight takes a number >= 1, with --rate")
        if not (self.ramp_up_s >= 0 and math.isfinite(self.ramp_up_s)):
            raise UsageError(f"--ramp-up must be a number of seconds >= 0, not {self.ramp_up_s}")
        if self.ramp_up_s and self.concurrency is None:
            raise UsageError("--ramp-up applies to --concurrency (closed loop)")
        if not self.burstiness > 0:
            raise UsageError(f"--burstiness must be > 0, not {self.burstiness}")
        if self.requests is None and self.duration_s is None:
            raise UsageError("give --requests N or --duration S")
        if self.requests is not None and self.requests < 1:
            raise UsageError(f"--requests must be >= 1, not {self.requests}")
        if self.duration_s is not None and not (
            math.isfinite(self.duration_s) and self.duration_s > 0
        ):
            raise UsageError(
                f"--duration must be a positive number of seconds, not {self.duration_s}"
            )
        if self.warmup_requests < 0:
            raise UsageError(f"--warmup must be >= 0, not {self.warmup_requests}")
        if not (math.isfinite(self.warmup_s) and self.warmup_s >= 0):
            raise UsageError(f"--warmup-s must be a number of seconds >= 0, not {self.warmup_s}")
        if self.duration_s is not None and self.warmup_s >= self.duration_s:
            raise UsageError(
                f"--warmup-s {self.warmup_s:g} leaves nothing of --duration {self.duration_s:g}"
            )
        if self.concurrency is not None and self.concurrency > MAX_CONCURRENCY:
            raise UsageError(f"--concurrency must be at most {MAX_CONCURRENCY}")
        if not math.isfinite(self.burstiness):
            raise UsageError(f"--burstiness must be a finite number, not {self.burstiness}")

    @property
    def label(self) -> str:
        """``concurrency=4`` or ``rate=2/s (poisson)``: the reports' one naming of a load."""
        return load_label(self.to_json())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": "concurrency" if self.concurrency else "rate"}
        for k in ("concurrency", "rate", "requests", "duration_s", "warmup_requests"):
            out[k] = getattr(self, k)
        out["warmup_s"] = self.warmup_s
        if self.concurrency is not None:
            out["ramp_up_s"] = self.ramp_up_s
        if self.rate is not None:
            out.update(arrival=self.arrival, burstiness=self.burstiness, seed=self.seed)
            out["max_in_flight"] = self.max_in_flight
        return out


def arrival_offsets(
    rate: float, n: int, arrival: str, burstiness: float, seed: int
) -> np.ndarray[Any, Any]:
    """Send offsets in ns from the start for ``n`` requests at ``rate`` per second.

    ``constant``: every 1/rate. ``poisson``: exponential gaps. ``gamma``: gamma gaps of
    shape ``burstiness`` and mean 1/rate (shape 1 = Poisson, < 1 burstier, > 1 smoother;
    vLLM's convention). The first request goes at 0.
    """
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    mean = 1.0 / rate
    if arrival == "constant":
        gaps = np.full(n, mean)
    else:
        rng = np.random.default_rng(seed)
        shape = 1.0 if arrival == "poisson" else burstiness
        gaps = rng.gamma(shape, mean / shape, size=n)
    gaps[0] = 0.0
    return np.round(np.cumsum(gaps) * 1e9).astype(np.int64)


@dataclass
class ClientHealth:
    """How much the client itself cost, and how late its event loop ran."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    lag_ns: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        pct = 100.0 * self.cpu_s / self.wall_s if self.wall_s > 0 else None
        lag = distribution(self.lag_ns)
        warnings = []
        if pct is not None and pct > CPU_WARN_PCT:
            warnings.append(
                f"the client used {pct:.0f} % of a core: its own work may delay the stamps "
                "(lower the load, or run the client on a machine of its own)"
            )
        if lag is not None and lag["p99"] > LAG_WARN_MS:
            warnings.append(
                f"the client's event loop ran up to {lag['p99']:.1f} ms late (p99): chunk "
                "stamps may be late by as much"
            )
        return {
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "cpu_pct": pct,
            "loop_lag_ms": lag,
            "warnings": warnings,
        }


@dataclass
class LoadResult:
    results: list[RequestResult]
    health: ClientHealth
    target_rate: float | None


async def _lag_monitor(samples: list[int], stop: asyncio.Event) -> None:
    period = int(_LAG_PERIOD_S * 1e9)
    while not stop.is_set():
        due = time.perf_counter_ns() + period
        await asyncio.sleep(_LAG_PERIOD_S)
        samples.append(max(0, time.perf_counter_ns() - due))


async def _drive(
    endpoint: Endpoint,
    load: Load,
    plan: Callable[[int], RequestSpec],
    point: int,
    timeout_s: float | None,
    progress: Callable[[int], None] | None,
    keep_text: bool,
    plan_offset: int,
) -> LoadResult:
    results: list[RequestResult] = []
    health = ClientHealth()
    stop = asyncio.Event()
    monitor = asyncio.create_task(_lag_monitor(health.lag_ns, stop))
    cpu0, wall0 = time.process_time(), time.perf_counter_ns()
    # --requests counts measured requests: the warmup ones come on top
    limit = load.requests + load.warmup_requests if load.requests is not None else 1 << 62
    deadline = wall0 + int(load.duration_s * 1e9) if load.duration_s is not None else None
    warm_until = wall0 + int(load.warmup_s * 1e9)

    def new_result(i: int, intended: int | None) -> RequestResult:
        warm = i < load.warmup_requests or (intended or time.perf_counter_ns()) < warm_until
        r = RequestResult(
            point=point,
            request=i,
            phase="warmup" if warm else "measured",
            intended_ns=intended,
            sent_ns=0,
            end_ns=None,
        )
        results.append(r)
        return r

    async def one(i: int, intended: int | None) -> None:
        spec = plan(plan_offset + i)
        r = new_result(i, intended)
        r.prompt_tokens = spec.prompt_tokens
        await send(session, endpoint, spec, r, keep_text=keep_text)
        r.pack()
        if progress is not None:
            progress(len(results))

    async with new_session(timeout_s) as session:
        if load.concurrency is not None:
            counter = iter(range(limit))

            exhausted = asyncio.Event()

            async def worker(slot: int) -> None:
                if load.ramp_up_s and load.concurrency:
                    # slot j starts j/N of the ramp after the first: no thundering herd,
                    # and streams whose chunks would otherwise arrive in lockstep; a slot
                    # whose turn comes after the last request was taken just ends
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(
                            exhausted.wait(), load.ramp_up_s * slot / load.concurrency
                        )
                while not exhausted.is_set():
                    now = time.perf_counter_ns()
                    i = next(counter, None)
                    if i is None or (deadline is not None and now >= deadline):
                        exhausted.set()
                        return
                    await one(i, now)

            await asyncio.gather(*(worker(j) for j in range(load.concurrency)))
        else:
            assert load.rate is not None
            n = limit
            if load.requests is None:
                assert load.duration_s is not None
                n = int(load.rate * load.duration_s * 1.5) + 16
            offsets = arrival_offsets(load.rate, n, load.arrival, load.burstiness, load.seed)
            tasks: set[asyncio.Task[None]] = set()
            gate = asyncio.Semaphore(load.max_in_flight) if load.max_in_flight else None
            t0 = time.perf_counter_ns()
            for i, off in enumerate(offsets.tolist()):
                due = t0 + off
                if deadline is not None and due >= deadline:
                    break
                wait = due - time.perf_counter_ns()
                if wait > 0:
                    await asyncio.sleep(wait / 1e9)
                if gate is not None:
                    await gate.acquire()
                task = asyncio.create_task(one(i, due))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                if gate is not None:
                    task.add_done_callback(lambda _t: gate.release())  # type: ignore[union-attr]
            if tasks:
                await asyncio.gather(*tasks)
    stop.set()
    await monitor
    health.wall_s = (time.perf_counter_ns() - wall0) / 1e9
    health.cpu_s = time.process_time() - cpu0
    results.sort(key=lambda r: r.request)
    return LoadResult(results, health, load.rate)


def run_load(
    endpoint: Endpoint,
    load: Load,
    plan: Callable[[int], RequestSpec],
    *,
    point: int = 0,
    timeout_s: float | None = 600.0,
    progress: Callable[[int], None] | None = None,
    keep_text: bool = False,
    plan_offset: int = 0,
) -> LoadResult:
    """Drive ``load`` against ``endpoint`` on a fresh event loop with precise timers
    (:mod:`aaco.serving.eventloop`); ``plan(i)`` gives request i. Returns every request's
    result (warmup included, marked) and the client's health; ``keep_text`` keeps each
    chunk's text (for re-tokenizing); request i is sent ``plan(plan_offset + i)`` (a sweep
    gives each point prompts of its own: a server's prefix cache must not flatter later
    points)."""
    reduce_timer_slack()
    loop = new_event_loop()
    # What is alive now is kept out of the collector's sweeps (gc.freeze), and young
    # collections run less often: a full collection over a heap of in-flight streams
    # stalls the loop for milliseconds, which every stamp then carries.
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], 50_000), *thresholds[1:])
    try:
        return loop.run_until_complete(
            _drive(endpoint, load, plan, point, timeout_s, progress, keep_text, plan_offset)
        )
    finally:
        # after Ctrl-C: cancel what is still in flight and let it unwind (sessions close)
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def sweep_values(text: str) -> tuple[str, list[float]]:
    """``concurrency=1,2,4`` -> ("concurrency", [1, 2, 4]); UsageError when malformed."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or key not in ("concurrency", "rate"):
        raise UsageError(f"--sweep takes concurrency=A,B,... or rate=A,B,..., not {text!r}")
    try:
        vals = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--sweep values must be numbers: {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise UsageError(f"--sweep needs positive values: {text!r}")
    if key == "concurrency" and any(v != int(v) for v in vals):
        raise UsageError(f"--sweep concurrency values must be integers: {text!r}")
    return key, vals


def loads_for_sweep(base: Load, key: str, values: Sequence[float]) -> list[Load]:
    """One :class:`Load` per sweep value, the rest of ``base`` kept."""
    out = []
    for v in values:
        if key == "concurrency":
            out.append(Load(**{**base.__dict__, "concurrency": int(v), "rate": None}))
        else:
            out.append(Load(**{**base.__dict__, "rate": v, "concurrency": None}))
    return out
