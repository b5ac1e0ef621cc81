"""What to fix first: ranked actions with their estimated gain, evidence and confidence.

Each finding becomes an item ``{rank, target, class, action, evidence, gain_ms, gain_pct,
gain_kind, confidence}``. Gains are per iteration, in ms of the measured median latency and
% of it, estimated from measured times only (docs/bottleneck_taxonomy.md, "What to fix
first"):

- micro-op chains (launch-bound): fusing a chain of L consecutive operators each shorter
  than ``MICRO_OP_NS`` into one saves L - 1 dispatches: min((L - 1) x dispatch floor,
  (L - 1) / L x chain time), the floor being the 10th percentile of micro-op times
  (durations divided by the profiler's inflation first, so they are the measured pass's);
- memory- or compute-bound operators: time x (1 - 1 / headroom), the time above the roof
  (an operator at its roof has nothing to gain there);
- host work in the iteration: its whole median time, if moved off the critical path;
- fixed per-call overhead: its whole time, an upper bound (``gain_kind`` = ``upper_bound``);
- warmup instability: the first measured iteration's excess over the median, for the first
  request only (``gain_kind`` = ``first_request``; not counted in the Amdahl total).

Operators are named by the original ONNX nodes they stand for (``label`` of
:mod:`aaco.analysis.names`) in ``target``; ``target_nodes`` lists those operators with their
profiled (ORT) ``name``, ``label`` and ``original_name``.

Gains are capped so that their sum never exceeds the latency (Amdahl): estimates are taken
in order of gain, then upper bounds, each clipped to what the previous ones left; the list
is then ranked by the capped gain (first-request gains last).

An item's ``confidence`` is the classifier's confidence for the item's ``class`` (the class
whose evidence motivates it), computed by the verdict's formula for every class whether or
not it won (``confidence_by_class`` of :func:`~aaco.analysis.bottleneck.classify`); None
(unknown) when the classifier gave that class no score. No default is filled in.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aaco.analysis.bottleneck import MICRO_OP_NS, Signal, profiler_scale
from aaco.analysis.names import OpNames
from aaco.session.paths import INFERENCE_SUMMARY_FILE
from aaco.session.schema import GPU_TELEMETRY, INFERENCE_ITERS, OPS, ROOFLINE, SCHED_THREADS

__all__ = ["micro_op_chains", "recommend"]

GPU_PROVIDERS = {
    "CUDAExecutionProvider",
    "ROCMExecutionProvider",
    "MIGraphXExecutionProvider",
    "TensorrtExecutionProvider",
}


def micro_op_chains(ops: pa.Table | None, scale: float = 1.0) -> dict[str, Any] | None:
    """Runs of consecutive operators shorter than MICRO_OP_NS, per profiled iteration.

    The recorded durations are divided by ``scale`` first (the profiler's inflation,
    :func:`~aaco.analysis.bottleneck.profiler_scale`), so that sizes, the floor and the
    saving are those of the measured pass.

    Fusing a chain of L operators saves L - 1 dispatches: min((L - 1) x the dispatch floor,
    (L - 1) / L x the chain's time), the floor being the 10th percentile of all micro-op
    times (the shortest operators are nearly pure dispatch). Returns the median over
    iterations of that saving (``fusable_ns``), the floor, the chains of the median
    iteration (first/last node, length, op types), and the operator types most often in
    chains; None without a profile with iterations.
    """
    if ops is None or not ops.num_rows:
        return None
    t = ops.filter(pc.is_valid(ops.column("iteration")))
    if not t.num_rows:
        return None
    t = t.sort_by([("iteration", "ascending"), ("start_ns", "ascending")])
    it = t.column("iteration").to_numpy()
    dur = t.column("dur_ns").to_numpy().astype(np.float64) / scale
    names = t.column("node_name").to_pylist()
    types = t.column("op_type").to_pylist()
    micro = dur[dur < MICRO_OP_NS]
    # the dispatch cost of one operator: the 10th percentile of the micro-ops' times (the
    # shortest operators are nearly pure dispatch)
    floor = float(np.percentile(micro, 10)) if micro.size else 0.0
    per_iter: dict[int, float] = {}
    chains_of: dict[int, list[dict[str, Any]]] = {}
    type_counts: Counter[str] = Counter()
    i, n = 0, len(dur)
    while i < n:
        j = i
        while j < n and it[j] == it[i] and dur[j] < MICRO_OP_NS:
            j += 1
        length = j - i
        iteration = int(it[i])
        per_iter.setdefault(iteration, 0.0)
        if length >= 2:
            chain_t = float(dur[i:j].sum())
            per_iter[iteration] += min(chain_t * (length - 1) / length, (length - 1) * floor)
            chains_of.setdefault(iteration, []).append(
                {
                    "first": names[i],
                    "last": names[j - 1],
                    "length": length,
                    "time_ns": chain_t,
                    "op_types": sorted(set(types[i:j])),
                }
            )
            type_counts.update(types[i:j])
        i = j if j > i else i + 1
    if not per_iter:
        return None
    values = np.array(list(per_iter.values()))
    med = float(np.median(values))
    # the iteration closest to the median, for its chains
    it_med = min(per_iter, key=lambda k: abs(per_iter[k] - med))
    chains = sorted(chains_of.get(it_med, []), key=lambda c: -c["time_ns"])
    return {
        "fusable_ns": med,
        "dispatch_floor_ns": floor,
        "chains": chains,
        "chain_count": len(chains),
        "ops_in_chains": sum(c["length"] for c in chains),
        "top_op_types": [k for k, _ in type_counts.most_common(5)],
    }


def _sig(signals: dict[str, Signal], name: str) -> float | None:
    s = signals.get(name)
    return s.value if s is not None else None


def _ev(signal: str, value: Any, source: str, unit: str = "") -> dict[str, Any]:
    return {"signal": signal, "value": value, "unit": unit, "source": source}


def _class_confidences(verdict: dict[str, Any]) -> dict[str, float | None]:
    """The classifier's confidence per class (docs/bottleneck_taxonomy.md, "What to fix
    first"): the verdict's ``confidence_by_class``; a verdict written before it had one
    knows only its own class's confidence."""
    by_class = verdict.get("confidence_by_class")
    if isinstance(by_class, dict):
        return {str(k): v for k, v in by_class.items()}
    cls = verdict.get("bottleneck_class")
    return {cls: verdict.get("confidence")} if isinstance(cls, str) else {}


def recommend(
    *,
    signals: dict[str, Signal],
    verdict: dict[str, Any],
    rows: pa.Table | None,
    ops: pa.Table | None,
    summary: dict[str, Any] | None,
    provider: str | None,
    graph_optimization_level: str | None = None,
    top_n: int = 10,
    names: OpNames | None = None,
) -> list[dict[str, Any]]:
    """The ranked list (see the module docstring for every gain formula and the
    confidence); ``names`` labels the operators (their profiled names without it)."""
    summary = summary or {}
    names = names or OpNames()

    def nodes(node_names: list[str]) -> list[dict[str, Any]]:
        unique = list(dict.fromkeys(node_names))
        return [{"name": n, **names.get(n).to_json()} for n in unique]

    p50_ms = (summary.get("latency_ms") or {}).get("p50")
    if not p50_ms:
        return []
    gpu = provider in GPU_PROVIDERS
    # each item's confidence is the classifier's for the item's class; None where it has none
    conf_of = _class_confidences(verdict)
    items: list[dict[str, Any]] = []

    chains = micro_op_chains(ops, profiler_scale(summary))
    if chains and chains["fusable_ns"] > 0:
        level = graph_optimization_level or "unknown"
        if gpu:
            action = (
                "fuse the chains of short kernels (graph optimization level ORT_ENABLE_ALL, "
                "a fused op at export) and capture the iteration in a CUDA/HIP graph "
                "(ORT provider option enable_cuda_graph / enable_hip_graph) to pay one launch"
            )
        elif level not in ("ORT_ENABLE_ALL", "99", "unknown"):
            action = (
                f"raise the graph optimization level from {level} to ORT_ENABLE_ALL so ORT "
                "fuses what it can, then fuse the remaining chains at export"
            )
        else:
            action = (
                "fuse the chains of tiny operators into one op at export (e.g. torch.compile "
                "or a fused custom op before ONNX export), or batch requests (--batch) so "
                "each dispatch does more work"
            )
        top = chains["chains"][:3]
        items.append(
            {
                "target": [
                    f"{names.label(c['first'])} .. {names.label(c['last'])} ({c['length']} ops)"
                    for c in top
                ],
                "target_nodes": nodes([n for c in top for n in (c["first"], c["last"])]),
                "class": "launch-bound",
                "action": action,
                "evidence": [
                    _ev("micro_op_chains", chains["chain_count"], OPS.path),
                    _ev("ops_in_chains", chains["ops_in_chains"], OPS.path),
                    _ev("ops_per_iter", _sig(signals, "ops_per_iter"), OPS.path),
                    _ev(
                        "micro_op_time_share",
                        _sig(signals, "micro_op_time_share"),
                        OPS.path,
                    ),
                    _ev("chain_op_types", chains["top_op_types"], OPS.path),
                ],
                "gain_ms": chains["fusable_ns"] / 1e6,
                "gain_kind": "estimate",
                "confidence": conf_of.get("launch-bound"),
            }
        )

    host = _sig(signals, "host_work_share")
    if host:
        items.append(
            {
                "target": ["preprocessing inside the iteration"],
                "class": "cpu-bound",
                "action": (
                    "take preprocessing off the critical path: pipeline it in another thread "
                    "or process so it overlaps inference, vectorise it, or move it into the "
                    "graph (ONNX Resize / normalisation ops) where the execution provider runs it"
                ),
                "evidence": [_ev("host_work_share", host, INFERENCE_ITERS.path)],
                "gain_ms": host * p50_ms,
                "gain_kind": "estimate",
                "confidence": conf_of.get("cpu-bound"),
            }
        )

    # operators above the micro-op size, grouped by (bound, op type)
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], float]]] = {}
    for r in rows.to_pylist() if rows is not None else []:
        if not r["headroom"] or not r["time_ns"] or r["bound"] not in ("memory", "compute"):
            continue
        per_call = r["time_ns"] / r["calls_per_iter"] if r["calls_per_iter"] else None
        if per_call is not None and per_call < MICRO_OP_NS:
            continue  # counted with the chains
        gain_ns = r["time_ns"] * (1.0 - 1.0 / r["headroom"])
        if gain_ns > 0:
            groups.setdefault((r["bound"], r["op_type"] or "?"), []).append((r, gain_ns))
    for (bound, op_type), members in groups.items():
        members.sort(key=lambda m: -m[1])
        gain_ns = sum(g for _, g in members)
        t_total = sum(r["time_ns"] for r, _ in members)
        eff = sum(r["efficiency"] * r["time_ns"] for r, _ in members) / t_total
        share = sum(r["time_share"] or 0.0 for r, _ in members)
        if bound == "memory":
            action = (
                f"cut the bytes these {op_type} nodes move: fuse them with their neighbours so "
                "intermediates stay in cache, store activations in a smaller type "
                + ("(fp16/bf16 in the execution provider)" if gpu else "(int8 / fp16)")
                + ", or pick a layout with contiguous access"
            )
        else:
            action = f"{op_type} runs below the compute roof: " + (
                "enable fp16/bf16 matrix math in the execution provider (e.g. MIGraphX "
                "fp16_enable, TensorRT fp16) and check the library picked a tuned kernel"
                if gpu
                else "quantize to int8 (onnxruntime.quantization) or use more intra-op "
                "threads; check ORT's NCHWc / MLAS path handles these shapes"
            )
        src = ROOFLINE.path
        targets = [names.label(r["name"]) for r, _ in members[:3]]
        if len(members) > 3:
            targets.append(f"+{len(members) - 3} more {op_type} nodes")
        items.append(
            {
                "target": targets,
                "target_nodes": nodes([r["name"] for r, _ in members[:3]]),
                "class": f"{bound}-bound",
                "action": action,
                "evidence": [
                    _ev("nodes", len(members), src),
                    _ev("time_share", share, src),
                    _ev("efficiency_time_weighted", eff, src),
                    _ev("headroom_top", members[0][0]["headroom"], src, "x"),
                    _ev("ridge_intensity", members[0][0]["ridge_intensity"], src, "FLOP/B"),
                    _ev("ceiling_source", members[0][0]["ceiling_source"], src),
                ],
                "gain_ms": gain_ns / 1e6,
                "gain_kind": "estimate",
                "confidence": conf_of.get(f"{bound}-bound"),
            }
        )

    fixed = _sig(signals, "fixed_overhead_share")
    if fixed and fixed > 0.05:
        items.append(
            {
                "target": ["per-call overhead outside the operators"],
                "class": "latency-bound",
                "action": (
                    "use IO binding (session.run_with_iobinding) so inputs and outputs are not "
                    "copied on every call, keep the session's inputs on the device, and batch "
                    "requests to amortise the fixed cost of a call"
                ),
                "evidence": [
                    _ev("fixed_overhead_share", fixed, INFERENCE_SUMMARY_FILE),
                ],
                "gain_ms": fixed * p50_ms,
                "gain_kind": "upper_bound",
                "confidence": conf_of.get("latency-bound"),
            }
        )

    wait = _sig(signals, "runqueue_wait_share")
    if wait is not None and wait >= 0.1:
        items.append(
            {
                "target": ["the worker's CPUs"],
                "class": "cpu-contention",
                "action": (
                    "other tasks held the worker's CPUs: measure on a quiet machine, or pin the "
                    "worker to CPUs nothing else uses (aaco run --isolate --cpus LIST; "
                    "aaco doctor lists what else to fix), then measure again before tuning"
                ),
                "evidence": [_ev("runqueue_wait_share", wait, SCHED_THREADS.path)],
                # at most the waiting itself: wait / (run + wait) of the latency
                "gain_ms": wait * p50_ms,
                "gain_kind": "upper_bound",
                "confidence": conf_of.get("cpu-contention"),
            }
        )
    throttle = _sig(signals, "gpu_throttle_share")
    drop = _sig(signals, "gpu_clock_drop")
    if throttle is not None and throttle >= 0.05:
        items.append(
            {
                "target": ["GPU clocks"],
                "class": "throttling",
                "action": (
                    "the GPU was held below its clocks by a power or thermal limit: check "
                    "cooling and the power cap (nvidia-smi -q -d PERFORMANCE,POWER or amd-smi "
                    "metric --power), and for benchmarking lock clocks below the throttle point "
                    "(nvidia-smi -lgc, amd-smi set --perf-determinism) so runs compare"
                ),
                "evidence": [_ev("gpu_throttle_share", throttle, GPU_TELEMETRY.path)],
                # the throttled share of the time, run at the highest clock seen instead of
                # the lowest, saves at most that share x the clock drop (all of it when the
                # drop is unknown)
                "gain_ms": throttle * (drop if drop is not None else 1.0) * p50_ms,
                "gain_kind": "upper_bound",
                "confidence": conf_of.get("throttling"),
            }
        )

    first = _sig(signals, "first_iter_vs_p50")
    if first and first >= 2.0:
        items.append(
            {
                "target": ["first measured iterations"],
                "class": "warmup-instability",
                "action": (
                    "warm the session up before serving or measuring (run a few inferences at "
                    "start-up; --warmup N), so one-time allocation and initialisation stay out "
                    "of the latency that matters"
                ),
                "evidence": [
                    _ev("first_iter_vs_p50", first, INFERENCE_ITERS.path, "x"),
                ],
                "gain_ms": (first - 1.0) * p50_ms,
                "gain_kind": "first_request",
                "confidence": conf_of.get("warmup-instability"),
            }
        )

    return _rank(items, p50_ms)[:top_n]


def _rank(items: list[dict[str, Any]], p50_ms: float) -> list[dict[str, Any]]:
    # estimates claim the latency first, biggest first; upper bounds get what is left
    steady = sorted(
        (i for i in items if i["gain_kind"] != "first_request"),
        key=lambda i: (i["gain_kind"] == "upper_bound", -i["gain_ms"]),
    )
    left = p50_ms
    for i in steady:
        raw = i["gain_ms"]
        i["gain_ms"] = max(0.0, min(raw, left))
        if i["gain_ms"] < raw:
            i["capped_by_amdahl"] = True
        left -= i["gain_ms"]
    steady.sort(key=lambda i: -i["gain_ms"])
    # below 0.1 % of the latency an item is noise, not advice
    steady = [i for i in steady if i["gain_ms"] >= 0.001 * p50_ms]
    ranked = steady + [i for i in items if i["gain_kind"] == "first_request"]
    for rank, i in enumerate(ranked, 1):
        i["rank"] = rank
        i["gain_ms"] = round(i["gain_ms"], 6)
        i["gain_pct"] = round(100.0 * i["gain_ms"] / p50_ms, 3)
        conf = i["confidence"]
        i["confidence"] = round(float(conf), 3) if conf is not None else None
    return ranked
