"""The bottleneck classifier: which resource limits this inference, with evidence.

Rules, thresholds and weights are documented in docs/bottleneck_taxonomy.md. The classifier
is pure: :func:`gather_signals` turns what a bundle holds (iteration timings, the operator
profile, the roofline, telemetry, GPU trace metrics) into named signals, each with a value
and its source or the reason it is missing; :func:`classify` scores every class from the
signals it needs and returns the verdict. A class whose required signals are missing
cannot win; when no class has enough evidence the verdict is ``unknown``, never a guess.

Example::

    signals = gather_signals(summary=s.summary, iters=s.iters(), ops=s.ops(),
                             roofline=roofline_json, derived=derived_metrics)
    verdict = classify(signals)
    verdict["bottleneck_class"], verdict["confidence"]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.analysis.names import OpNames
from aaco.analysis.ops import group_medians, per_iteration_medians
from aaco.analysis.sched import not_evidence
from aaco.analysis.telemetry import cpu_contention
from aaco.session.paths import DERIVED_METRICS_FILE, INFERENCE_SUMMARY_FILE, ROOFLINE_FILE
from aaco.session.schema import (
    GPU_TELEMETRY,
    INFERENCE_ITERS,
    KERNELS,
    OPS,
    SCHED_THREADS,
    SYSTEM_EVENTS,
)

__all__ = [
    "ABOVE_ROOF_AS_SATURATED",
    "CLASSES",
    "MICRO_OP_NS",
    "RULES",
    "Condition",
    "Rule",
    "Signal",
    "classify",
    "classify_ops",
    "gather_signals",
    "micro_op_time_share",
    "profiler_scale",
    "small_grid_share",
]

CLASSES = (
    "launch-bound",
    "cpu-bound",
    "memory-bound",
    "compute-bound",
    "under-occupied",
    "cpu-contention",
    "throttling",
    "frequency-scaling",
    "warmup-instability",
    "latency-bound",
    "balanced",
)

#: an operator execution shorter than this is dispatch-dominated ("micro-op")
MICRO_OP_NS = 10_000


@dataclass(frozen=True)
class Signal:
    """A measured quantity, or why it could not be measured."""

    name: str
    value: float | None
    unit: str
    source: str
    missing: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "signal": self.name,
            "value": self.value,
            "unit": self.unit,
            "source": self.source,
            "missing": self.missing,
        }


@dataclass(frozen=True)
class Condition:
    """``signal`` compared with ``threshold``; ``above`` says which side counts.

    Strength grows from 0 at the threshold to 1 at ``full`` (linear), so a value far past
    the threshold is stronger evidence than one just past it. ``required`` conditions must
    hold for the class to be a candidate at all.
    """

    signal: str
    threshold: float
    full: float
    weight: float
    above: bool = True
    required: bool = True

    def strength(self, value: float) -> float:
        span = abs(self.full - self.threshold)
        past = value - self.threshold if self.above else self.threshold - value
        x = past / span if span else (1.0 if past >= 0 else 0.0)
        return float(min(1.0, max(0.0, x)))

    def holds(self, value: float) -> bool:
        return value >= self.threshold if self.above else value <= self.threshold


@dataclass(frozen=True)
class Rule:
    cls: str
    conditions: tuple[Condition, ...]
    explains: str


def _c(signal: str, threshold: float, full: float, weight: float, **kw: Any) -> Condition:
    return Condition(signal, threshold, full, weight, **kw)


#: The rules, strongest evidence first within each; docs/bottleneck_taxonomy.md is their text.
RULES: tuple[Rule, ...] = (
    Rule(
        "launch-bound",
        (
            _c("ops_per_iter", 100, 300, 0.3),
            _c("micro_op_time_share", 0.5, 0.9, 0.5),
            _c("gpu_microkernel_pct", 50, 90, 0.2, required=False),
        ),
        "hundreds of operator/kernel launches per iteration, each too short to amortise its "
        "dispatch cost",
    ),
    Rule(
        "cpu-bound",
        (
            _c("host_work_share", 0.3, 0.7, 0.7),
            _c("cpu_contention", 0.2, 0.6, 0.3, required=False),
        ),
        "host-side work inside the iteration (preprocessing, Python) or CPU contention takes "
        "the time, not the model's operators",
    ),
    Rule(
        "memory-bound",
        (
            _c("memory_bound_time_share", 0.5, 0.9, 0.4),
            _c("bandwidth_utilization", 0.2, 0.7, 0.4),
            _c("op_share_of_latency", 0.5, 0.8, 0.2),
        ),
        "most operator time is in operators below the ridge point, running close to the "
        "bandwidth roof of the memory level their data fits in",
    ),
    Rule(
        "compute-bound",
        (
            _c("compute_bound_time_share", 0.5, 0.9, 0.4),
            _c("compute_utilization", 0.2, 0.7, 0.4),
            _c("op_share_of_latency", 0.5, 0.8, 0.2),
        ),
        "most operator time is in operators above the ridge point, running close to the "
        "compute roof",
    ),
    Rule(
        "under-occupied",
        (_c("gpu_small_grid_time_share", 0.5, 0.9, 1.0),),
        "most GPU time is in kernels with fewer workgroups than the device has compute units",
    ),
    Rule(
        "cpu-contention",
        (
            _c("runqueue_wait_share", 0.1, 0.4, 0.7),
            _c("cpu_contention", 0.2, 0.6, 0.3, required=False),
        ),
        "the worker's threads waited on a run queue for a CPU that other tasks held: the "
        "latency measures the machine's load as much as the model",
    ),
    Rule(
        "throttling",
        (
            _c("gpu_throttle_share", 0.05, 0.3, 0.6),
            _c("gpu_clock_drop", 0.1, 0.3, 0.4, required=False),
        ),
        "the GPU's clocks were held down by a power or thermal limit during the measured "
        "window (the driver's clock-event reasons or violation counters say so)",
    ),
    Rule(
        "frequency-scaling",
        (_c("cpu_freq_drop", 0.1, 0.3, 1.0),),
        "the CPU clock changed during the measured window",
    ),
    Rule(
        "warmup-instability",
        (
            _c("first_iter_vs_p50", 2.5, 5.0, 0.5),
            _c("first_iter_excess_ms", 0.5, 5.0, 0.3),
            _c("trend_shift", 0.1, 0.5, 0.2, required=False),
        ),
        "the first measured iterations are far slower than the steady state: warmup too short "
        "or one-time costs (allocation, compilation) inside the measured phase",
    ),
    Rule(
        "latency-bound",
        (
            _c("latency_p50_us", 500, 100, 0.5, above=False),
            _c("ops_per_iter", 50, 10, 0.2, above=False),
            _c("fixed_overhead_share", 0.2, 0.5, 0.3, required=False),
        ),
        "the work per call is too small to load either roof: the fixed cost of a call "
        "(binding, scheduling, a handful of small ops) is the latency",
    ),
)

#: a class needs at least this score to be the verdict
MIN_SCORE = 0.25
#: classes about the validity of the measurement: they take precedence when they hold
VALIDITY_CLASSES = ("cpu-contention", "warmup-instability", "throttling", "frequency-scaling")


def _measured(iters: pa.Table | None) -> pa.Table | None:
    if iters is None or not iters.num_rows:
        return None
    return iters.filter(pc.equal(iters.column("phase"), "measured"))


def profiler_scale(summary: dict[str, Any] | None) -> float:
    """How many times longer the profiled pass's recorded durations run than the measured
    pass: ``profiler_inflation`` (profiled wall p50 / measured p50) when it is above 1, else 1.

    ORT's profiler costs a few µs per node: a model of 400 sub-µs operators runs 20-40x
    slower profiled (zoo-launch on the 2-core machine), its nodes recorded at 5-10 µs. The
    operator-size judgements (micro-operators, fusable chains) divide the recorded
    durations by this scale so that they judge the operators of the measured pass; a
    pass that ran faster profiled (scale below 1: the machine changed speed) is not
    scaled up. Shares of operator time are unchanged by a common scale."""
    prof = (summary or {}).get("profile") or {}
    infl = prof.get("profiler_inflation")
    if isinstance(infl, int | float) and math.isfinite(infl) and infl > 1.0:
        return float(infl)
    return 1.0


def _ops_signals(ops: pa.Table | None, scale: float = 1.0) -> list[Signal]:
    src = OPS.path
    names = ("ops_per_iter", "micro_op_time_share", "op_median_us")
    if ops is None or not ops.num_rows:
        return [Signal(n, None, "", src, "no operator profile") for n in names]
    it = ops.column("iteration").drop_null()
    n_iter = len(pc.unique(it)) if len(it) else 0
    if not n_iter:
        return [Signal(n, None, "", src, "operators carry no iteration") for n in names]
    dur = ops.column("dur_ns").to_numpy(zero_copy_only=False).astype(np.float64)
    share = micro_op_time_share(ops, scale)
    return [
        Signal("ops_per_iter", ops.num_rows / n_iter, "ops", src),
        Signal(
            "micro_op_time_share",
            share,
            "",
            src,
            None if share is not None else "every operator's typical time is 0",
        ),
        Signal("op_median_us", float(np.median(dur)) / 1e3, "us", src),
    ]


def micro_op_time_share(ops: pa.Table, scale: float = 1.0) -> float | None:
    """Share of the typical operator time per iteration spent in micro-operators (0-1).

    Per node: its *typical time* is the median over the profiled iterations of its summed
    execution time in that iteration (0 in an iteration where it did not run), and it is a
    micro-operator when the median of its executions, divided by ``scale`` (the
    profiler's inflation, :func:`profiler_scale`), is shorter than ``MICRO_OP_NS``. The
    share is the micro-operators' typical time over all nodes' typical time; None when that
    total is 0. Medians, so that an execution stalled by a preemption or a page fault in one
    profiled iteration (milliseconds on a busy 2-core machine) neither turns a 2 µs node
    into a slow one nor lets its one stall outweigh hundreds of normal executions.
    Rows without an iteration are left out.
    """
    # only the columns read here: filtering the whole table copies every column
    ops = ops.select(["source", "iteration", "node_name", "dur_ns"])
    if ops.column("iteration").null_count:
        ops = ops.filter(pc.is_valid(ops.column("iteration")))
    if not ops.num_rows:
        return None
    # nameless rows are one node "" in both medians below
    names = pc.fill_null(ops.column("node_name"), "").combine_chunks()
    ops = ops.set_column(ops.schema.get_field_index("node_name"), "node_name", names)
    encoded = pc.dictionary_encode(names)
    node = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    dur = ops.column("dur_ns").to_numpy(zero_copy_only=False).astype(np.float64)
    per_call = group_medians(node, dur, len(encoded.dictionary))
    # each node's time in each iteration of its own pass, then its median over them
    medians = per_iteration_medians(ops, ("node_name",))
    typical = np.asarray([medians[(str(n),)][0] for n in encoded.dictionary.to_pylist()])
    total = float(typical.sum())
    if not total:
        return None
    return float(typical[per_call / scale < MICRO_OP_NS].sum()) / total


def gather_signals(
    *,
    summary: dict[str, Any] | None,
    iters: pa.Table | None,
    ops: pa.Table | None,
    roofline: dict[str, Any] | None = None,
    derived: dict[str, Any] | None = None,
    rows: pa.Table | None = None,
    cpu_count: int | None = None,
    cache_bytes: int | None = None,
    kernels: pa.Table | None = None,
    compute_units: int | None = None,
) -> dict[str, Signal]:
    """Every signal the rules use, from what the bundle holds (missing ones say why).

    ``summary``: metrics/inference_summary.json; ``iters``: inference_iters; ``ops``: the
    operator profile; ``roofline``: metrics/roofline.json; ``rows``: the roofline table;
    ``derived``: the derived metrics of an imported or captured GPU trace;
    ``cpu_count``: logical CPUs of the machine (env.json), for the contention signal;
    ``cache_bytes``: the last-level cache of a calibration without per-level roofs, so
    that memory-bound operators whose data fits in it are not judged against DRAM's roof
    (rows with a ``memory_level`` are judged against that level's); ``kernels`` and
    ``compute_units`` (the GPU's, from the device table): for the under-occupied signal.
    """
    out: list[Signal] = []
    summary = summary or {}
    lat = summary.get("latency_ms") or {}
    p50_ms = lat.get("p50")
    it_src = INFERENCE_ITERS.path
    out.append(
        Signal(
            "latency_p50_us",
            p50_ms * 1e3 if p50_ms is not None else None,
            "us",
            it_src,
            None if p50_ms is not None else "no measured iterations",
        )
    )
    out += _ops_signals(ops, profiler_scale(summary))

    # host work inside the iteration: the preprocessing step the runner timed
    meas = _measured(iters)
    host_share = None
    host_missing: str | None = "no measured iterations"
    if meas is not None and meas.num_rows:
        pre = meas.column("preprocess_ns") if "preprocess_ns" in meas.column_names else None
        lat_ns = meas.column("latency_ns").to_numpy().astype(np.float64)
        if pre is not None and pre.null_count < meas.num_rows:
            pre_ns = pc.fill_null(pre, 0).to_numpy().astype(np.float64)
            host_share = float(np.median(pre_ns / np.maximum(lat_ns, 1.0)))
            host_missing = None
        else:
            host_share = 0.0
            host_missing = None
    out.append(Signal("host_work_share", host_share, "", it_src, host_missing))

    prof = summary.get("profile") or {}
    cov = prof.get("coverage")
    inflation = prof.get("profiler_inflation")
    fixed = None
    fixed_missing: str | None = "no operator profile"
    if cov is not None:
        if inflation is not None and not 0.5 <= inflation <= 2.0:
            fixed_missing = f"profiled pass ran {inflation:.2f}x the measured one"
        else:
            fixed = max(0.0, 1.0 - cov - (host_share or 0.0))
            fixed_missing = None
    out.append(Signal("fixed_overhead_share", fixed, "", INFERENCE_SUMMARY_FILE, fixed_missing))
    # the same pass's share when the runner timed the profiled runs: immune to the machine
    # changing speed between the measured and the profiled pass; else the cross-pass one
    same = prof.get("coverage_same_pass")
    share_of = same if same is not None else cov
    op_share = None if share_of is None else min(1.0, float(share_of))
    out.append(
        Signal(
            "op_share_of_latency",
            op_share,
            "",
            INFERENCE_SUMMARY_FILE,
            None if op_share is not None else "no operator profile with measured latency",
        )
    )

    tel = summary.get("telemetry") or {}
    t_src = SYSTEM_EVENTS.path
    sys_cpu, proc_cpu = tel.get("sys_cpu_pct_mean"), tel.get("proc_cpu_pct_mean")
    cores = cpu_count
    contention = None
    cont_missing: str | None = "no telemetry"
    if sys_cpu is not None and proc_cpu is not None and cores:
        contention = cpu_contention(sys_cpu, proc_cpu, cores)
        cont_missing = None
    elif sys_cpu is not None:
        cont_missing = "CPU count unknown"
    out.append(Signal("cpu_contention", contention, "", t_src, cont_missing))
    fmin, fmax = tel.get("cpu_freq_mhz_min"), tel.get("cpu_freq_mhz_max")
    out.append(
        Signal(
            "cpu_freq_drop",
            1.0 - fmin / fmax if fmin and fmax else None,
            "",
            t_src,
            None if fmin and fmax else "CPU frequency not sampled",
        )
    )
    out += machine_signals(summary)

    warm = summary.get("warmup") or {}
    first_ratio = None
    first_missing: str | None = "no measured iterations"
    if meas is not None and meas.num_rows >= 5 and p50_ms:
        lat_ms = meas.column("latency_ns").to_numpy().astype(np.float64) / 1e6
        first_ratio = float(np.median(lat_ms[:3]) / p50_ms)
        first_missing = None
    out.append(Signal("first_iter_vs_p50", first_ratio, "x", it_src, first_missing))
    out.append(
        Signal(
            "first_iter_excess_ms",
            (first_ratio - 1.0) * p50_ms if first_ratio is not None and p50_ms else None,
            "ms",
            it_src,
            first_missing,
        )
    )
    trend = (summary.get("noise") or {}).get("trend") or {}
    shift = trend.get("first_to_last_quarter_shift")
    out.append(
        Signal(
            "trend_shift",
            abs(shift)
            if shift is not None and trend.get("detected")
            else (0.0 if shift is not None else None),
            "",
            it_src,
            None if shift is not None else "too few iterations for a trend",
        )
    )
    out.append(
        Signal(
            "warmup_first_vs_p50",
            warm.get("first_iteration_vs_p50"),
            "x",
            it_src,
            None if warm.get("first_iteration_vs_p50") is not None else "no warmup",
        )
    )

    r_src = ROOFLINE_FILE
    if roofline is None or not roofline.get("ceilings"):
        why = "no roofline"
        if roofline is not None:
            why = roofline.get("ceilings_note") or "no ceilings: run `aaco calibrate`"
        for n in (
            "memory_bound_time_share",
            "compute_bound_time_share",
            "bandwidth_utilization",
            "compute_utilization",
        ):
            out.append(Signal(n, None, "", r_src, why))
    else:
        unknown = roofline.get("time_share_unknown")
        mem = roofline.get("time_share_memory_bound")
        comp = roofline.get("time_share_compute_bound")
        gap = None
        if unknown is None or unknown >= 0.5:
            gap = roofline.get("time_note") or "work unknown for most op time"
        elif (roofline.get("rows_untimed") or 0) > (roofline.get("rows_timed") or 0):
            # a GPU session where most operators have no attributed kernel time: the shares
            # of the few that have cannot stand for the whole
            gap = roofline.get("time_note") or "GPU time unknown for most operators"
        out.append(Signal("memory_bound_time_share", mem if gap is None else None, "", r_src, gap))
        out.append(
            Signal("compute_bound_time_share", comp if gap is None else None, "", r_src, gap)
        )
        # the drift allowance rests on quiet calibrations of this machine: not on published
        # datasheet peaks (no cache roofs, no TF32 entry) nor on one of unknown quality
        ceil = roofline.get("ceilings") or {}
        quiet = ceil.get("source") == "calibrated" and ceil.get("contention") == "quiet"
        bw, fl, cached, above = _utilization(rows, cache_bytes, quiet)
        bw_missing = "no memory-bound operator with traffic"
        fl_missing = "no compute-bound operator with work"
        if cached:
            bw_missing = (
                f"the memory-bound operators' data fits in the last-level cache "
                f"({(cache_bytes or 0) / 2**20:.0f} MiB) and this calibration has no cache "
                "roofs: run `aaco calibrate --force`"
            )
        elif "memory" in above:
            bw_missing = (
                "every memory-bound operator ran above its bandwidth roof"
                + (f" by over {ABOVE_ROOF_AS_SATURATED:g}x" if quiet else "")
                + ": the ceilings are too low"
                + ("" if quiet else " (and not a quiet calibration of this machine)")
            )
        if "compute" in above:
            fl_missing = (
                "every compute-bound operator ran above its compute roof"
                + (f" by over {ABOVE_ROOF_AS_SATURATED:g}x" if quiet else "")
                + ": the ceilings are too low"
                + ("" if quiet else " (and not a quiet calibration of this machine)")
            )
        out.append(
            Signal(
                "bandwidth_utilization",
                bw,
                "",
                r_src,
                None if bw is not None else bw_missing,
            )
        )
        out.append(
            Signal(
                "compute_utilization",
                fl,
                "",
                r_src,
                None if fl is not None else fl_missing,
            )
        )

    d_src = DERIVED_METRICS_FILE
    dm = derived or {}
    mk = dm.get("microkernel_pct")
    out.append(
        Signal("gpu_microkernel_pct", mk, "%", d_src, None if mk is not None else "no GPU kernels")
    )
    gar = (
        (dm.get("gpu_active_ratio") or {}).get("overall")
        if isinstance(dm.get("gpu_active_ratio"), dict)
        else dm.get("gpu_active_ratio")
    )
    out.append(
        Signal(
            "gpu_active_ratio",
            gar,
            "",
            d_src,
            None if gar is not None else "no GPU kernels in the measured window",
        )
    )
    small, small_missing = small_grid_share(kernels, compute_units)
    out.append(Signal("gpu_small_grid_time_share", small, "", KERNELS.path, small_missing))
    return {s.name: s for s in out}


#: trace sources whose grid sizes are in work-items (rocprof); the others (Kineto/CUPTI,
#: ORT) give them in blocks
_GRID_IN_WORK_ITEMS = ("rocprofv3", "rocpd", "rocprof")


def small_grid_share(
    kernels: pa.Table | None, compute_units: int | None
) -> tuple[float | None, str | None]:
    """Share of GPU time in kernels launching fewer workgroups than ``compute_units``.

    Workgroups = product over x, y, z of grid (CUDA/Kineto: already in blocks) or of
    ceil(grid / block) (rocprof: grid in work-items). Kernels without grid sizes are left
    out; (None, reason) when nothing can be computed.
    """
    if kernels is None or not kernels.num_rows:
        return None, "no GPU kernels"
    if not compute_units:
        return None, "the GPU's compute-unit count is unknown (not in configs/devices.yaml)"
    cols = ["source", "dur_ns", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    kernels = kernels.select(cols)

    def ints(c: str) -> np.ndarray[Any, Any]:
        col = pc.fill_null(kernels.column(c), 0)  # a null size is left out as a 0 is
        return np.asarray(col.to_numpy(zero_copy_only=False), dtype=np.int64)

    in_items = np.asarray(
        pc.fill_null(pc.is_in(kernels.column("source"), pa.array(_GRID_IN_WORK_ITEMS)), False)
        .to_numpy(zero_copy_only=False),
        dtype=bool,
    )  # fmt: skip
    # workgroups per dimension, each capped at the compute units: a product of factors >= 1
    # is below them exactly when the uncapped product is, and the capped one cannot overflow
    cap = math.ceil(compute_units)
    dtype: Any = np.int64 if cap < 1 << 21 else object  # cap**3 fits int64, else Python ints
    keep = np.ones(kernels.num_rows, dtype=bool)
    groups = np.ones(kernels.num_rows, dtype=dtype)
    for g_col, b_col in (("grid_x", "block_x"), ("grid_y", "block_y"), ("grid_z", "block_z")):
        grid = ints(g_col)
        keep &= grid > 0
        per_dim = grid
        if in_items.any():
            block = ints(b_col)
            keep &= ~in_items | (block > 0)
            per_dim = np.where(in_items, -(-grid // np.maximum(block, 1)), grid)
        groups = groups * np.minimum(np.maximum(per_dim, 1), cap).astype(dtype)
    dur = kernels.column("dur_ns").to_numpy(zero_copy_only=False)
    # summed in row order from 0.0, as a running float total adds them
    kept = dur[keep].astype(np.float64)
    total = float(np.add.accumulate(kept)[-1]) if len(kept) else 0.0
    smalls = dur[keep & (groups < compute_units)].astype(np.float64)
    small = float(np.add.accumulate(smalls)[-1]) if len(smalls) else 0.0
    if not total:
        return None, "no kernel carries its grid size"
    return small / total, None


#: a row above its roof by at most this factor counts as running *at* the roof (utilization
#: 1) when the ceilings were measured quietly: on a shared VM, quiet calibrations minutes
#: apart differ by up to 1.4x (DRAM) and 2.1x (L1) although each figure's CV is < 5 %
#: (BENCHMARKS.md §15), so a model's streaming op may outrun the roof of a calibration
#: taken in a slower minute. A roof wrong by more than 2.5x is a calibration problem, not
#: drift; those rows, and every above-roof row of a disturbed calibration, are left out.
ABOVE_ROOF_AS_SATURATED = 2.5


def _utilization(
    rows: pa.Table | None, cache_bytes: int | None = None, quiet_ceilings: bool = True
) -> tuple[float | None, float | None, bool, set[str]]:
    """Time-weighted achieved / peak bandwidth over memory-bound rows, and achieved / peak
    FLOP/s over compute-bound rows (0-1 each).

    A memory-bound row is judged against the bandwidth of its ``memory_level`` (the
    row's ``peak_bytes_per_s``). Rows without a level whose bytes per call fit in
    ``cache_bytes`` (a calibration without cache roofs) are left out: DRAM's roof says
    nothing of them. A row ``above_roof`` ran at least as fast as the roof says is
    possible: with ``quiet_ceilings`` and at most :data:`ABOVE_ROOF_AS_SATURATED` x its
    roof it counts as saturating it (1); otherwise it is left out, its roof being wrong,
    not its speed. Also returns whether rows were left out for the cache, and the bounds
    (``memory``, ``compute``) that had rows left out for being above their roof.
    """
    if rows is None or not rows.num_rows:
        return None, None, False, set()
    bw_num = bw_den = fl_num = fl_den = 0.0
    cached = False
    above: set[str] = set()
    for r in rows.to_pylist():
        t = r["time_ns"] or 0.0
        if r["bound"] == "memory" and r["achieved_bytes_per_s"] and r["peak_bytes_per_s"]:
            ratio = r["achieved_bytes_per_s"] / r["peak_bytes_per_s"]
        elif r["bound"] == "compute" and r["achieved_flops_per_s"] and r["peak_flops_per_s"]:
            ratio = r["achieved_flops_per_s"] / r["peak_flops_per_s"]
        else:
            continue
        if r.get("above_roof"):
            if not quiet_ceilings or ratio > ABOVE_ROOF_AS_SATURATED:
                above.add(r["bound"])
                continue
            ratio = 1.0
        ratio = min(ratio, 1.0)  # within the flagging tolerance: at the roof
        if r["bound"] == "memory":
            per_call = (r["bytes"] or 0.0) / (r["calls_per_iter"] or 1.0)
            if r.get("memory_level") is None and cache_bytes and per_call <= cache_bytes:
                cached = True
                continue
            bw_num += t * ratio
            bw_den += t
        else:
            fl_num += t * ratio
            fl_den += t
    return (
        bw_num / bw_den if bw_den else None,
        fl_num / fl_den if fl_den else None,
        cached and not bw_den,
        {b for b in above if not (bw_den if b == "memory" else fl_den)},
    )


def _score(
    rule: Rule, signals: dict[str, Signal]
) -> tuple[float | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """(score or None when a required signal is missing or fails, evidence, missing)."""
    evidence: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    num = den = 0.0
    possible = True
    ruled_out = False  # a required condition had data and failed: missing data is moot
    for c in rule.conditions:
        s = signals.get(c.signal)
        if s is None or s.value is None or not math.isfinite(s.value):
            missing.append(
                {
                    "signal": c.signal,
                    "reason": s.missing if s else "not computed",
                    "class": rule.cls,
                    "required": c.required,
                }
            )
            if c.required:
                possible = False
            continue
        st = c.strength(s.value)
        if c.required and not c.holds(s.value):
            possible = False
            ruled_out = True
        evidence.append(
            {
                "signal": c.signal,
                "value": s.value,
                "unit": s.unit,
                "threshold": c.threshold,
                "comparison": ">=" if c.above else "<=",
                "weight": c.weight,
                "strength": st,
                "holds": c.holds(s.value),
                "required": c.required,
                "source": s.source,
            }
        )
        num += c.weight * st
        den += c.weight
    if ruled_out:
        for m in missing:
            m["moot"] = True
    if not possible or not den:
        return None, evidence, missing
    return num / den, evidence, missing


def classify(signals: dict[str, Signal]) -> dict[str, Any]:
    """The verdict: ``bottleneck_class``, ``confidence``, ``secondary``, evidence, missing.

    Each class's score is the weighted mean strength of its conditions (0-1) when all its
    required conditions hold, else it is not a candidate. The verdict is the best candidate
    scoring at least ``MIN_SCORE``, a class of ``VALIDITY_CLASSES`` before any other;
    ``confidence`` = its score x (1 - the runner-up's score
    / 2) x the share of its rule's weight that had data (docs/bottleneck_taxonomy.md).
    With no candidate: ``balanced`` when the signals of the main classes (launch, memory,
    compute, cpu) were all available, else ``unknown`` with confidence None.

    ``confidence_by_class`` gives every class of ``RULES`` its confidence by the same
    formula, whether or not it is the verdict: its score x (1 - the score of the first
    *other* candidate in verdict order / 2) x its completeness (the verdict's entry is
    ``confidence``); None for a class whose rule does not hold or lacks a required signal.
    """
    scored: list[tuple[str, float, list[dict[str, Any]]]] = []
    all_missing: list[dict[str, Any]] = []
    all_evidence: dict[str, list[dict[str, Any]]] = {}
    completeness: dict[str, float] = {}
    score_of: dict[str, float | None] = {}
    for rule in RULES:
        score, evidence, missing = _score(rule, signals)
        score_of[rule.cls] = score
        all_missing += missing
        all_evidence[rule.cls] = evidence
        total_w = sum(c.weight for c in rule.conditions)
        have_w = sum(
            c.weight for c in rule.conditions if c.signal not in {m["signal"] for m in missing}
        )
        completeness[rule.cls] = have_w / total_w if total_w else 0.0
        if score is not None and score >= MIN_SCORE:
            scored.append((rule.cls, score, evidence))
    # a verdict about the measurement itself comes first: steady-state classes are not to be
    # trusted while one-time costs or clock changes are inside the measured phase
    scored.sort(key=lambda x: (x[0] not in VALIDITY_CLASSES, -x[1]))
    by_class = _confidence_by_class(score_of, completeness, [(c, s) for c, s, _ in scored])
    main = ("launch-bound", "memory-bound", "compute-bound", "cpu-bound")
    # only missing signals that could have changed the answer: those of a main class that a
    # failing condition has not already ruled out
    main_missing = sorted(
        {
            m["signal"]
            for m in all_missing
            if m["class"] in main and m["required"] and not m.get("moot")
        }
    )
    if not scored:
        cls = "balanced" if not main_missing else "unknown"
        return {
            "bottleneck_class": cls,
            "confidence": None,
            "score": None,
            "confidence_by_class": by_class,
            "secondary": [],
            "top_evidence": [],
            "evidence_by_class": all_evidence,
            "missing_evidence": _dedupe(all_missing),
            "explanation": (
                "no class's rule holds; every main signal was available"
                if cls == "balanced"
                else "no class's rule holds, and some signals are missing: "
                + ", ".join(main_missing)
            ),
        }
    top_cls, top_score, top_ev = scored[0]
    rule = next(r for r in RULES if r.cls == top_cls)
    ranked_ev = sorted(top_ev, key=lambda e: -(e["weight"] * e["strength"]))
    return {
        "bottleneck_class": top_cls,
        # score x (1 - runner-up's score / 2) x completeness, as for every class
        "confidence": by_class[top_cls],
        "score": round(top_score, 3),
        "confidence_by_class": by_class,
        "secondary": [{"class": c, "score": round(s, 3)} for c, s, _ in scored[1:]],
        "top_evidence": ranked_ev,
        "evidence_by_class": all_evidence,
        "missing_evidence": _dedupe(all_missing),
        "explanation": rule.explains,
    }


def _confidence_by_class(
    score_of: dict[str, float | None],
    completeness: dict[str, float],
    candidates: list[tuple[str, float]],
) -> dict[str, float | None]:
    """Each class's confidence: score x (1 - runner_up_score / 2) x completeness, the
    runner-up being the first candidate other than the class itself in verdict order
    (``candidates``, sorted as for the verdict; 0 without one), rounded to 3 places. For
    the verdict that is the second candidate, so its entry is the verdict's confidence;
    for any other class it is the verdict. None for a class without a score (a required
    condition failed or lacked data): the classifier has no confidence for it."""
    out: dict[str, float | None] = {}
    for cls, score in score_of.items():
        if score is None:
            out[cls] = None
            continue
        runner = next((s for c, s in candidates if c != cls), 0.0)
        out[cls] = round(score * (1.0 - runner / 2.0) * completeness[cls], 3)
    return out


def _dedupe(missing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for m in missing:
        cur = out.setdefault(
            m["signal"], {"signal": m["signal"], "reason": m["reason"], "needed_by": []}
        )
        if m["class"] not in cur["needed_by"]:
            cur["needed_by"].append(m["class"])
    return list(out.values())


def classify_ops(
    rows: pa.Table | None, top_n: int = 10, names: OpNames | None = None
) -> list[dict[str, Any]]:
    """Per-operator verdicts for the ``top_n`` roofline rows by time.

    Each names its node (``name``, as profiled) and, from ``names``, the ``label`` and
    ``original_name`` users know it by (:mod:`aaco.analysis.names`).

    ``launch-bound`` when a call takes under ``MICRO_OP_NS`` (its dispatch dominates), else
    the roofline's bound (``memory-bound`` / ``compute-bound``) with confidence = the
    efficiency against that roof (capped at 1) — an operator far below its roof is bound
    by something else, which the confidence says; ``unknown`` without work or ceilings.

    A row whose time per iteration is zero or unknown has no time per call (unknown, not
    0 us: a median of implicit zeros over iterations the node missed, or a zero-length
    profile event, is no measurement of its calls), and no roofline bound either.
    """
    if rows is None or not rows.num_rows:
        return []
    out = []
    for r in rows.to_pylist()[:top_n]:
        t, calls = r["time_ns"], r["calls_per_iter"]
        per_call = t / calls if t is not None and t > 0 and calls else None
        ev = [
            {"signal": "time_per_call_us", "value": per_call / 1e3 if per_call else None},
            {"signal": "intensity", "value": r["intensity"], "threshold": r["ridge_intensity"]},
            {"signal": "efficiency", "value": r["efficiency"]},
            {"signal": "memory_level", "value": r.get("memory_level")},
            {"signal": "above_roof", "value": r.get("above_roof")},
        ]
        if per_call is not None and per_call < MICRO_OP_NS:
            cls, conf = "launch-bound", min(1.0, MICRO_OP_NS / per_call / 4.0)
        elif r["bound"] is not None:
            cls = f"{r['bound']}-bound"
            # above its roof, the efficiency measures the ceiling, not the operator
            eff = None if r.get("above_roof") else r["efficiency"]
            conf = min(1.0, eff) if eff is not None else None
        else:
            cls, conf = "unknown", None
        out.append(
            {
                "name": r["name"],
                **(names or OpNames()).get(r["name"]).to_json(),
                "op_type": r["op_type"],
                "time_share": r["time_share"],
                "bottleneck_class": cls,
                "confidence": round(conf, 3) if conf is not None else None,
                "evidence": ev,
            }
        )
    return out


def machine_signals(summary: dict[str, Any]) -> list[Signal]:
    """The GPU collectors' and the scheduler collector's signals (``summary["gpu"]``,
    ``summary["sched"]``: docs/metrics.md), missing with the reason when they did not run."""
    gpu = summary.get("gpu") or {}
    g_src = GPU_TELEMETRY.path
    no_gpu = "no GPU telemetry (no NVML/amdsmi source, or no GPU)"
    drop = _finite(gpu.get("clock_drop"))
    shares = [
        v
        for v in (_finite(gpu.get("throttled_share")), _finite(gpu.get("violation_share")))
        if v is not None
    ]
    sched = summary.get("sched") or {}
    unusable = not_evidence(sched)
    wait = None if unusable else _finite(sched.get("wait_share"))
    return [
        Signal(
            "gpu_clock_drop",
            drop,
            "",
            g_src,
            None if drop is not None else (no_gpu if not gpu else "GPU clocks not reported"),
        ),
        Signal(
            "gpu_throttle_share",
            max(shares) if shares else None,
            "",
            g_src,
            None
            if shares
            else (no_gpu if not gpu else "no clock-event reasons or violation counters"),
        ),
        Signal(
            "runqueue_wait_share",
            wait,
            "",
            SCHED_THREADS.path,
            None
            if wait is not None
            else unusable or "the worker's threads neither ran nor waited in the window",
        ),
    ]


def _finite(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)
