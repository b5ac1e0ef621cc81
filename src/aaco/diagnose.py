"""Diagnosis of a bundle: cost model, ceilings, roofline, bottleneck verdict, what to fix.

``aaco run`` and ``aaco import`` call :func:`diagnose_bundle` before they render the
reports; ``aaco analyze --session S`` calls it again on an existing bundle (after an
import, or with a new calibration). It writes::

    metrics/op_costs.parquet       work and traffic per original graph node
    metrics/roofline.parquet       per node (and kernel, with counters) against the ceilings
    metrics/roofline.json          ceilings used, time shares by bound, plottable points
    metrics/bottleneck.json        verdict, confidence, evidence, missing evidence, per op
    metrics/recommendations.json   ranked actions with estimated gains

A stage that fails is recorded (``failures[]`` in bottleneck.json and session.json) and the
others still run; what it would have provided shows up as missing evidence.

Example::

    result = diagnose_bundle(Path("sessions/latest"))
    result["bottleneck"]["bottleneck_class"]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from aaco.analysis.bottleneck import classify, classify_ops, gather_signals
from aaco.analysis.ceilings import published_ceilings, session_ceilings
from aaco.analysis.cost import cost_summary, executed_node_costs, node_costs, work_coverage
from aaco.analysis.critical_path import critical_path_recommendations, critical_path_summary
from aaco.analysis.names import OpNames, op_names
from aaco.analysis.recommend import recommend
from aaco.analysis.roofline import (
    kernel_roofline,
    node_instructions,
    node_roofline,
    roofline_summary,
)
from aaco.session.bundle import Session, atomic_write_json, write_table
from aaco.session.calibration import BACKEND_OF_PROVIDER
from aaco.session.devices import env_gpu, identify, trace_gpus
from aaco.session.paths import (
    BOTTLENECK_FILE,
    CRITICAL_PATH_FILE,
    DERIVED_METRICS_FILE,
    IMPORT_META_FILE,
    OPTIMIZED_MODEL,
    RECOMMENDATIONS_FILE,
    ROOFLINE_FILE,
)
from aaco.session.records import save_session
from aaco.session.schema import OP_COSTS, ROOFLINE
from aaco.stages import stage as timed_stage

__all__ = [
    "MODEL_RUN_KINDS",
    "Analysis",
    "Diagnosis",
    "default_analyses",
    "diagnose_bundle",
]


#: ``backend.provider`` values that name a device rather than an execution provider (a
#: runner without providers, such as PyTorch, records its device there): calibration backend
_DEVICE_BACKENDS = {"cpu": "cpu", "cuda": "cuda"}


def _backend(meta: dict[str, Any]) -> tuple[str | None, str | None]:
    """(execution provider, calibration backend) of a bundle. ``backend.provider`` is an ONNX
    Runtime execution provider, or the device a runner without providers ran on (``cpu``,
    ``cuda:N``): then there is no provider, and the device says the backend."""
    if meta.get("kind") == "import":
        return None, None  # not this machine's: the device is the one the trace names
    provider = (meta.get("backend") or {}).get("provider")
    if provider is None or provider in BACKEND_OF_PROVIDER or provider.endswith("Provider"):
        return provider, BACKEND_OF_PROVIDER.get(provider or "")
    return None, _DEVICE_BACKENDS.get(str(provider).split(":", 1)[0])


def _gpu_name(env: dict[str, Any] | None) -> str | None:
    devices = ((env or {}).get("gpus") or {}).get("devices") or []
    for d in devices:
        if isinstance(d, dict) and d.get("name"):
            return str(d["name"])
    return None


def _cpu_count(env: dict[str, Any] | None) -> int | None:
    cpu = (env or {}).get("cpu") or {}
    n = cpu.get("usable_cores") or cpu.get("logical_cores")
    return int(n) if isinstance(n, int) and n > 0 else None


class _Stages:
    def __init__(self) -> None:
        self.failures: list[dict[str, str]] = []

    def run(self, stage: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except Exception as exc:  # one analysis failing must not lose the others
            self.failures.append({"stage": stage, "error": f"{type(exc).__name__}: {exc}"[:400]})
            return None


@dataclass
class Diagnosis:
    """What the analyses of one bundle share while they run: the bundle, what each analysis
    found (None until an analysis provides it), and the stage failures so far."""

    path: Path
    session: Session
    ceilings: Any = None
    auto_calibrate: bool | None = None
    stages: _Stages = field(default_factory=lambda: _Stages())
    provider: str | None = None
    backend: str | None = None
    identity: Any = None
    ops: pa.Table | None = None
    costs: pa.Table | None = None
    ceilings_note: str | None = None
    #: the roofline rows (node and kernel level) and the node level alone
    rows: pa.Table | None = None
    node_rows: pa.Table | None = None
    roofline: dict[str, Any] | None = None
    signals: dict[str, Any] | None = None
    verdict: dict[str, Any] | None = None
    names: OpNames | None = None
    recommendations: list[dict[str, Any]] | None = None
    #: metrics/critical_path.json (None: no GPU trace, or not analysed)
    critical_path: dict[str, Any] | None = None
    #: user what-ifs for the critical path (``aaco analyze --what-if``)
    what_if: tuple[Any, ...] = ()


#: the bundle kinds (``session.json`` ``kind``; ``run`` when absent) of a model run, measured
#: or imported: what the roofline, bottleneck and recommendations analyses need. A serving
#: benchmark (``kind: "serving"``, aaco llm bench) has no model run to diagnose.
MODEL_RUN_KINDS: tuple[str, ...] = ("run", "import", "profile")


@dataclass(frozen=True)
class Analysis:
    """One analysis of the diagnosis: ``run`` reads the fields named in ``requires`` from
    the :class:`Diagnosis` (set by earlier analyses), sets those in ``provides`` and writes
    the bundle files in ``writes``; ``kinds``: the bundle kinds it applies to (a bundle of
    another kind skips it, which is no failure). Compose them in a list
    (:func:`default_analyses`)."""

    name: str
    requires: tuple[str, ...]
    provides: tuple[str, ...]
    writes: tuple[str, ...]
    run: Callable[[Diagnosis], None]
    kinds: tuple[str, ...] = MODEL_RUN_KINDS


def _roofline(d: Diagnosis) -> None:
    """Cost model, ceilings, the node (and kernel) roofline and its summary."""
    path, session, stages = d.path, d.session, d.stages
    meta, env = session.meta, session.env
    provider, backend = _backend(meta)
    identity = None
    if backend not in (None, "cpu"):
        identity = _run_device(meta, env)
    if backend is None:
        # an imported trace: the GPU it names (rocprofv3 agent info, Kineto deviceProperties)
        identity = stages.run("trace_device", _trace_device, session)
        backend = "gpu" if identity is not None else None
    d.provider, d.backend, d.identity = provider, backend, identity

    nodes = session.table("graph_nodes")
    edges = session.table("graph_edges")
    costs: pa.Table | None = None
    if nodes is not None and nodes.num_rows:
        costs = stages.run("op_costs", _costs, nodes, edges)
        if costs is not None:
            write_table(path / OP_COSTS.path, costs)
    d.costs = costs

    ops = d.ops = session.ops()
    ceilings = d.ceilings
    ceilings_note: str | None = None
    if ceilings is None and backend is not None:
        ceilings = stages.run("ceilings", _ceilings, env, backend, identity)
        has_work = costs is not None and costs.num_rows and ops is not None and ops.num_rows
        if ceilings is None and backend == "cpu" and has_work and _auto(d.auto_calibrate):
            # lazy: the calibration's imports (psutil, importlib.metadata) only when it runs
            from aaco.collectors.calibrate import first_run_calibration

            first = stages.run("calibration", first_run_calibration, env, backend)
            if first is not None:
                ceilings, ceilings_note = first.ceilings, first.note
    d.ceilings = ceilings
    gpu_time = _gpu_ns_per_iter(session, ops)
    executed = None
    if ops is not None and ops.num_rows:
        executed = stages.run("executed_costs", _executed_costs, path, ops, nodes, edges)
    # on a GPU the profile's node durations are host-side launches: the node roofline uses
    # the kernel time attributed to each node, and leaves a node without one unknown
    device_time = backend not in (None, "cpu")
    rows = stages.run(
        "roofline",
        node_roofline,
        ops,
        costs,
        nodes,
        edges,
        ceilings,
        gpu_time,
        executed,
        device_time=device_time,
        instruction=_instructions(session) if device_time else None,
    )
    if rows is None:
        rows = ROOFLINE.empty()
    kernels = session.table("kernels")
    counters = session.table("kernel_counters")
    kernel_details: list[dict[str, Any]] = []
    if kernels is not None and counters is not None and counters.num_rows:
        got = stages.run("kernel_roofline", kernel_roofline, kernels, counters, ceilings)
        if got is not None:
            krows, kernel_details = got
            rows = pa.concat_tables([rows, krows])
    write_table(path / ROOFLINE.path, rows)
    node_rows = rows.filter(pc.equal(rows.column("level"), "node"))
    if ceilings_note is None and ceilings is None and provider is None and not _ran_here(meta):
        ceilings_note = _import_note(identity)
    if ceilings_note is None:
        ceilings_note = _int8_note(ceilings, node_rows)
    d.ceilings_note = ceilings_note
    summary_json = roofline_summary(rows, ceilings)
    summary_json["ceilings_note"] = ceilings_note
    summary_json["time_basis"] = _time_basis(device_time, gpu_time, node_rows, rows)
    summary_json["time_note"] = _time_note(summary_json["time_basis"], node_rows)
    if identity is not None:
        summary_json["device_identity"] = identity.to_json()
    summary_json["kernel_counters"] = kernel_details
    if costs is not None:
        summary_json["model_cost"] = stages.run("cost_summary", cost_summary, costs)
    if ops is not None and ops.num_rows:
        summary_json["work_coverage"] = stages.run("work_coverage", work_coverage, ops, node_rows)
    atomic_write_json(path / ROOFLINE_FILE, summary_json)
    d.rows, d.node_rows, d.roofline = rows, node_rows, summary_json


def _critical_path(d: Diagnosis) -> None:
    """The causal CPU+GPU critical path and its what-ifs, when the bundle has a GPU trace."""
    session = d.session
    tables = {
        name: session.table(name) for name in ("kernels", "api_calls", "memcpy", "annotations")
    }
    kernels, memcpy = tables["kernels"], tables["memcpy"]
    if not ((kernels is not None and kernels.num_rows) or (memcpy is not None and memcpy.num_rows)):
        return
    tables["ops"] = session.ops()
    summary = d.stages.run("critical_path", critical_path_summary, tables, d.what_if)
    if summary is not None:
        atomic_write_json(d.path / CRITICAL_PATH_FILE, summary)
        d.critical_path = summary


def _verdict_rows(d: Diagnosis) -> pa.Table:
    assert d.rows is not None and d.node_rows is not None
    return d.node_rows if d.node_rows.num_rows else d.rows


def _bottleneck(d: Diagnosis) -> None:
    """The evidence (signals), the bottleneck verdict and the per-operator classes."""
    session, env = d.session, d.session.env
    signals = gather_signals(
        summary=session.summary,
        iters=session.iters(),
        ops=d.ops,
        roofline=d.roofline,
        derived=session.json_file(DERIVED_METRICS_FILE),
        rows=_verdict_rows(d),
        cpu_count=_cpu_count(env),
        cache_bytes=_cache_bytes(d.ceilings),
        kernels=session.table("kernels"),
        compute_units=_compute_units(env, d.ceilings),
    )
    verdict = classify(signals)
    verdict["signals"] = {k: s.to_json() for k, s in signals.items()}
    d.names = d.stages.run("op_names", op_names, d.ops, d.costs) or OpNames()
    verdict["per_op"] = classify_ops(_verdict_rows(d), names=d.names)
    d.signals, d.verdict = signals, verdict


def _recommendations(d: Diagnosis) -> None:
    """Ranked actions with estimated gains, from the verdict and its evidence."""
    ort_cfg = d.session.ort_config or {}
    level = (ort_cfg.get("session_options") or {}).get("graph_optimization_level")
    d.recommendations = d.stages.run(
        "recommendations",
        recommend,
        signals=d.signals,
        verdict=d.verdict,
        rows=_verdict_rows(d),
        ops=d.ops,
        summary=d.session.summary,
        provider=d.provider,
        graph_optimization_level=level,
        names=d.names,
    )
    if d.critical_path is not None:
        extra = d.stages.run(
            "critical_path_recommendations", critical_path_recommendations, d.critical_path
        )
        if extra:
            ranked = sorted(
                (d.recommendations or []) + extra, key=lambda r: -(r.get("gain_pct") or 0)
            )
            d.recommendations = [{**r, "rank": i + 1} for i, r in enumerate(ranked)]


ROOFLINE_ANALYSIS = Analysis(
    "roofline",
    requires=(),
    provides=("costs", "ceilings", "rows", "node_rows", "roofline"),
    writes=(OP_COSTS.path, ROOFLINE.path, ROOFLINE_FILE),
    run=_roofline,
)
BOTTLENECK_ANALYSIS = Analysis(
    "bottleneck",
    requires=("rows", "node_rows", "roofline"),
    provides=("signals", "verdict", "names"),
    writes=(BOTTLENECK_FILE,),
    run=_bottleneck,
)
RECOMMENDATIONS_ANALYSIS = Analysis(
    "recommendations",
    requires=("signals", "verdict", "rows", "node_rows"),
    provides=("recommendations",),
    writes=(RECOMMENDATIONS_FILE,),
    run=_recommendations,
)


CRITICAL_PATH_ANALYSIS = Analysis(
    "critical_path",
    requires=(),
    provides=("critical_path",),
    writes=(CRITICAL_PATH_FILE,),
    run=_critical_path,
    kinds=MODEL_RUN_KINDS,
)


def default_analyses() -> list[Analysis]:
    """The analyses ``aaco run``, ``aaco import`` and ``aaco analyze`` run, in order; a new
    list (edit it, pass it to :func:`diagnose_bundle`)."""
    return [
        ROOFLINE_ANALYSIS,
        CRITICAL_PATH_ANALYSIS,
        BOTTLENECK_ANALYSIS,
        RECOMMENDATIONS_ANALYSIS,
    ]


def diagnose_bundle(
    path: Path,
    ceilings: Any = None,
    auto_calibrate: bool | None = None,
    analyses: Sequence[Analysis] | None = None,
    what_if: Sequence[Any] = (),
) -> dict[str, Any]:
    """Run ``analyses`` (default: :func:`default_analyses`) over the bundle at ``path`` and
    write what they found; return the roofline summary, verdict and recommendations.

    ``ceilings``: an :class:`aaco.session.calibration.Ceilings` to use instead of the stored
    calibration / published table (tests, what-if). ``auto_calibrate``: when a CPU session
    with an operator profile finds no calibration, measure a quick one on this machine
    first (:func:`aaco.collectors.calibrate.first_run_calibration`); None follows
    ``AACO_AUTO_CALIBRATE`` (on unless 0). An analysis whose inputs no earlier one provided
    is skipped and recorded as a failure; one that does not apply to the bundle's kind
    (``Analysis.kinds``: a serving benchmark has no model run to diagnose) is skipped
    quietly and named in the result's ``skipped``.
    """
    with timed_stage("load bundle"):
        d = Diagnosis(path, Session.load(path), ceilings, auto_calibrate, what_if=tuple(what_if))
    kind = d.session.meta.get("kind") or "run"
    skipped: list[str] = []
    for analysis in default_analyses() if analyses is None else analyses:
        if kind not in analysis.kinds:
            skipped.append(analysis.name)
            continue
        missing = [name for name in analysis.requires if getattr(d, name) is None]
        if missing:
            d.stages.failures.append(
                {"stage": analysis.name, "error": f"needs {', '.join(missing)}: not provided"}
            )
            continue
        with timed_stage(f"analysis:{analysis.name}"):
            analysis.run(d)
    # bottleneck.json carries every stage's failures, so it is written after the last one
    if d.verdict is not None:
        d.verdict["failures"] = d.stages.failures
        atomic_write_json(path / BOTTLENECK_FILE, d.verdict)
    if d.signals is not None:
        atomic_write_json(path / RECOMMENDATIONS_FILE, d.recommendations or [])
    if d.stages.failures:
        meta = d.session.meta
        meta.setdefault("failures", [])
        known = {(f.get("stage"), f.get("error")) for f in meta["failures"]}
        meta["failures"] += [f for f in d.stages.failures if (f["stage"], f["error"]) not in known]
        save_session(path, meta)
    return {
        "roofline": d.roofline,
        "bottleneck": d.verdict,
        "recommendations": d.recommendations or [],
        "critical_path": d.critical_path,
        "skipped": skipped,
    }


def _auto(flag: bool | None) -> bool:
    if flag is not None:
        return flag
    from aaco.collectors.calibrate import auto_calibrate_enabled  # lazy, as above

    return auto_calibrate_enabled()


def _cache_bytes(ceilings: Any) -> int | None:
    """The last-level cache of a calibration without per-level roofs (written before the
    cache-aware roofline): its cache-resident operators have no roof of their own."""
    if ceilings is None or getattr(ceilings, "memory_levels", None):
        return None
    llc = (getattr(ceilings, "details", None) or {}).get("llc_bytes")
    return int(llc) if isinstance(llc, int) else None


def _gpu_ns_per_iter(session: Session, ops: pa.Table | None) -> dict[str, float] | None:
    """Attributed GPU time per iteration of each node, when the bundle has device-timed
    kernels attributed to its operators (kernel_groups) and the ops carry iterations."""
    groups = session.table("kernel_groups")
    kernels = session.table("kernels")
    if groups is None or not groups.num_rows or kernels is None or not kernels.num_rows:
        return None
    # every source's kernel durations are device time (ORT's Kernel events too: only their
    # start is the parent node's, see KERNELS.time_is_gpu), so gpu_time_ns is GPU time
    if ops is None or not ops.num_rows:
        return None
    iters = len(pc.unique(ops.column("iteration").drop_null()))
    if not iters:
        return None
    return {
        r["op_name"]: r["gpu_time_ns"] / iters
        for r in groups.select(["op_name", "gpu_time_ns"]).to_pylist()
        if r["gpu_time_ns"]
    }


def _compute_units(env: dict[str, Any] | None, ceilings: Any) -> int | None:
    """CUs / SMs of the session's GPU, from the published device table."""
    units = (getattr(ceilings, "details", None) or {}).get("compute_units")
    if units is None and _gpu_name(env):
        pub = published_ceilings(_gpu_name(env) or "")
        units = pub.details.get("compute_units") if pub is not None else None
    return int(units) if isinstance(units, int) else None


def _costs(nodes: pa.Table, edges: pa.Table | None) -> pa.Table:
    return node_costs(nodes, edges, graph="original")


def _int8_note(ceilings: Any, node_rows: pa.Table) -> str | None:
    """Why quantized operators have no bound: a CPU calibration from before the int8 roof."""
    flops = getattr(ceilings, "flops_per_s", None)
    if ceilings is None or getattr(ceilings, "source", None) != "calibrated" or not flops:
        return None
    if "int8" in flops:
        return None
    quantized = [
        r
        for r in node_rows.select(["dtype", "flops"]).to_pylist()
        if r["dtype"] in ("int8", "uint8") and r["flops"]
    ]
    if not quantized:
        return None
    return (
        f"{len(quantized)} int8/uint8 operators have no compute roof: this calibration "
        "predates the int8 ceiling; run `aaco calibrate` to measure it"
    )


def _executed_costs(
    path: Path, ops: pa.Table, nodes: pa.Table | None, edges: pa.Table | None
) -> pa.Table:
    """Costs of the nodes ORT executed, with its optimized model's subgraphs when saved."""
    optimized = path / OPTIMIZED_MODEL
    model = None
    if optimized.is_file():
        # aaco.analysis.graph imports onnx (~0.1 s): only when the bundle has a model to read
        from aaco.analysis.graph import load_model_proto

        model = load_model_proto(optimized)
    return executed_node_costs(ops, nodes, model, edges)


def _ceilings(env: dict[str, Any] | None, backend: str, identity: Any = None) -> Any:
    return session_ceilings(env, backend, _gpu_name(env), identity)


def _run_device(meta: dict[str, Any], env: dict[str, Any] | None) -> Any:
    """The GPU a run used: the env's (vendor tools), else the one torch named (a container
    without nvidia-smi / amd-smi on PATH), else None."""
    found = env_gpu(env)
    if found is not None:
        return found
    torch = (meta.get("run") or {}).get("torch") or {}
    if not torch.get("device_name"):
        return None
    return identify(
        torch["device_name"],
        vendor="amd" if torch.get("hip_version") else "nvidia",
        arch=torch.get("device_arch"),
        compute_units=torch.get("device_compute_units"),
        memory_bytes=torch.get("device_memory_bytes"),
    )


def _trace_device(session: Session) -> Any:
    """The GPU an imported trace names (the one most kernel time ran on), else None."""
    record = session.json_file(IMPORT_META_FILE) or {}
    sources = [m for m in record.get("sources") or [] if isinstance(m, dict)]
    gpus = trace_gpus(sources)
    if not gpus:
        return None
    kernels = session.table("kernels")
    if kernels is not None and kernels.num_rows and len(gpus) > 1:
        per = kernels.group_by("device").aggregate([("dur_ns", "sum")]).to_pylist()
        per.sort(key=lambda r: -(r["dur_ns_sum"] or 0))
        for r in per:
            if r["device"] in gpus:
                return gpus[r["device"]]
    return next(iter(gpus.values()))


def _instructions(session: Session) -> dict[str, str]:
    return node_instructions(session.table("op_kernel_map"))


def _ran_here(meta: dict[str, Any]) -> bool:
    """Whether the bundle is an `aaco run` (its device is this env's), not an import."""
    return meta.get("kind") != "import"


def _import_note(identity: Any) -> str:
    """Why an imported trace has no ceilings (`aaco calibrate` here cannot help)."""
    if identity is None:
        return (
            "no ceilings: the trace names no GPU this table knows (an imported trace is "
            "not from this machine, so a calibration here does not apply)"
        )
    mem = f", {identity.memory_bytes / 1e9:.0f} GB" if identity.memory_bytes else ""
    return (
        f"no ceilings: the trace's GPU ({identity.name}{mem}) matches no published entry; "
        "run `aaco calibrate --backend cuda|rocm` on that GPU and copy the stored file "
        f"({identity.key}.json) into this machine's calibration folder"
    )


def _time_basis(
    device_time: bool, gpu_time: dict[str, float] | None, rows: pa.Table, every: pa.Table
) -> str:
    """What the roofline's times are: ``host`` (a CPU session's operator times), ``gpu``
    (kernel time attributed to every node, or kernel rows alone: an imported trace),
    ``partial_gpu`` (attributed to some nodes; the others are unknown) or ``unknown`` (a GPU
    session without kernel times)."""
    if not device_time:
        return "host"
    if not rows.num_rows:
        return "gpu" if every.num_rows else "unknown"
    timed = sum(1 for t in rows.column("time_ns").to_pylist() if t) if rows.num_rows else 0
    if not gpu_time or not timed:
        return "unknown"
    return "gpu" if timed == rows.num_rows else "partial_gpu"


def _time_note(basis: str, rows: pa.Table) -> str | None:
    if basis == "unknown" and rows.num_rows:
        return (
            "GPU time per operator unknown: the profile has no kernel times (ONNX Runtime "
            "records them only in CUDA/ROCm builds with GPU profiling); host launch times "
            "are not set against the GPU's roofs. Capture kernels with --profile kernels "
            "(rocprofv3, ROCm) or import a rocprofv3 / Kineto trace of the run"
        )
    if basis == "partial_gpu":
        untimed = sum(1 for t in rows.column("time_ns").to_pylist() if not t)
        return (
            f"GPU time unknown for {untimed} operator{'s' if untimed != 1 else ''} without an "
            "attributed kernel (copies, host-side or unattributed work): the shares are of "
            "the attributed GPU time"
        )
    return None
