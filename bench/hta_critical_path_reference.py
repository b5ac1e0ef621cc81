"""Reference results of Holistic Trace Analysis (HTA) 0.5 critical-path analysis.

Not part of the ``aaco`` package nor of the test suite: it runs under a separate venv that
has HTA installed (HTA pins its own pandas/networkx, and needs ``pandas<3``)::

    python3 -m venv /work/hta-venv
    /work/hta-venv/bin/pip install "HolisticTraceAnalysis>=0.5,<0.6" "pandas<3"
    /work/hta-venv/bin/python bench/hta_critical_path_reference.py

It writes ``tests/analysis/fixtures/hta/hta_critical_path.json``: for every trace and every
analysed window (the whole trace, each CPU ``ProfilerStep`` instance, a ``record_function``
annotation where HTA's own tests use one) HTA's window, critical-path length, its breakdown by
HTA's ``bound_by`` and edge-type categories, the path's segments (edges) and the edge counts of
the whole graph, or the error when HTA fails.

Times are integer microseconds on HTA's clock: HTA rounds nanosecond-resolution traces
(``ts = ceil(ts)``, ``end = floor(ts + dur)``) and then subtracts the trace's smallest rounded
``ts`` (``hta_min_ts_us`` per trace); add ``hta_min_ts_us`` to get the raw trace clock.
``ev`` numbers are HTA's event index: the position of the event in the trace's ``traceEvents``
list (HTA's JSON parser numbers the events before dropping any).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import importlib.metadata as md
import itertools
import json
import logging
import os
import shutil
import sys
import tempfile
import traceback
import warnings
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "analysis" / "fixtures"
OUT = FIX / "hta" / "hta_critical_path.json"
SEGMENT_CAP = (
    200  # keep the top-N path edges by weight (whole trace, HTA-test window); totals stay exact
)
STEP_SEGMENT_CAP = 50  # the same for the other windows (ProfilerStep instances ...)
SYNC_EDGE_CAP = 40
NAME_CAP = 70  # event names are cut to this length in the events table
EVENT_FIELDS = ["name", "cat", "stream", "ts_us", "dur_us"]
SEGMENT_FIELDS = [
    "pos",
    "type",
    "bound_by",
    "weight_us",
    "start_us",
    "end_us",
    "ev",
    "src_ev",
    "src_node",
    "dst_ev",
    "dst_node",
]
SYNC_FIELDS = ["src_ev", "src_node", "src_ts_us", "dst_ev", "dst_node", "dst_ts_us", "on_path"]

# (id, path relative to the repo, extra (annotation, instance_id) windows HTA's tests use)
TRACES: list[tuple[str, str, list[tuple[str, Any]]]] = [
    (
        "hta_event_sync_multi_stream",
        "tests/analysis/fixtures/hta/hta__critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
        [],
    ),
    (
        "cuda_alexnet",
        "tests/analysis/fixtures/hta/cuda_alexnet.json.gz",
        [
            # HTA's tests (test_critical_path_analysis, test_critical_path_breakdown): instance 1
            ("[param|pytorch.model.alex_net|0|0|0|measure|forward]", 1),
            ("[param|pytorch.model.alex_net|0|0|0|measure|forward]", 0),
        ],
    ),
    (
        "hta_sampled_rank1",
        "tests/analysis/fixtures/hta/hta__trace_filter__sampled_rank-1.json.gz",
        [],
    ),
    ("cuda_sync_streams", "tests/analysis/fixtures/cuda/cuda_sync_streams.json.gz", []),
    ("cuda_transformer_infer", "tests/analysis/fixtures/cuda/cuda_transformer_infer.json.gz", []),
    ("mi250_rocm6.2_train", "tests/analysis/fixtures/hta/mi250_rocm6.2_train.json.gz", []),
]


class _Collect(logging.Handler):
    """Collects HTA's warnings/errors (the ``hta`` logger) while one window is analysed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.levelname}: {record.getMessage()}")


@contextlib.contextmanager
def _env(name: str, value: str | None):
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _i(x: Any) -> Any:
    """numpy/pandas scalar -> int (or float when not integral) for JSON."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return x
    if f != f:  # NaN
        return None
    return int(f) if f.is_integer() else round(f, 3)


def _dedupe(msgs: list[str], cap: int = 6) -> list[str]:
    seen: dict[str, int] = {}
    for m in msgs:
        key = m if len(m) < 200 else m[:200] + "..."
        seen[key] = seen.get(key, 0) + 1
    out = [f"{m} (x{n})" if n > 1 else m for m, n in seen.items()]
    return out[:cap] + ([f"... {len(out) - cap} more distinct messages"] if len(out) > cap else [])


def _load(path: Path, include_last_profiler_step: bool) -> tuple[Any, int, str]:
    from hta.trace_analysis import TraceAnalysis

    tmp = tempfile.mkdtemp(prefix="hta_ref_")
    shutil.copy(path, tmp)  # HTA reads every trace of a directory; one file per dir
    with contextlib.redirect_stdout(sys.stderr):
        ta = TraceAnalysis(trace_dir=tmp, include_last_profiler_step=include_last_profiler_step)
    ranks = ta.t.get_ranks()
    return ta, ranks[0], tmp


def _window_bounds(ta: Any, rank: int, annotation: str, instance_id: Any) -> tuple[Any, Any]:
    """The (start, end) HTA uses, replicated from CriticalPathAnalysis.critical_path_analysis."""
    df = ta.t.get_trace(rank)
    if annotation == "":
        return _i(df.ts.min()), _i(df.end.max())
    ids = [v for k, v in ta.t.symbol_table.get_sym_id_map().items() if annotation in k]
    ann = df[df.name.isin(ids)].copy()
    ann["end_ts"] = ann["ts"] + ann["dur"]
    lo, hi = (instance_id, instance_id) if isinstance(instance_id, int) else (instance_id or (0, 0))
    return _i(ann.ts.iloc[lo : hi + 1].min()), _i(ann.end_ts.iloc[lo : hi + 1].max())


def _annotation_rows(ta: Any, rank: int, annotation: str) -> list[dict[str, Any]]:
    """Rows HTA counts as instances of ``annotation`` (substring match on every symbol).

    In HTA's order: instance_id is the position in this list."""
    df = ta.t.get_trace(rank)
    sym = ta.t.symbol_table.get_sym_table()
    ids = [v for k, v in ta.t.symbol_table.get_sym_id_map().items() if annotation in k]
    rows = []
    for pos, r in enumerate(df[df.name.isin(ids)].itertuples()):
        rows.append(
            {
                "instance_id": pos,
                "ev": _i(r.index),
                "name": sym[r.name],
                "cat": sym[r.cat],
                "ts": _i(r.ts),
                "dur": _i(r.dur),
            }
        )
    return rows


class _Names:
    def __init__(self, ta: Any, rank: int) -> None:
        self.df = ta.t.get_trace(rank)
        self.sym = ta.t.symbol_table.get_sym_table()
        self.info: dict[int, list[Any]] = {}  # every event looked up
        self.full_names: dict[int, str] = {}
        self.used: set[int] = set()  # the events the JSON refers to

    def ev(self, idx: Any) -> int | None:
        if idx is None or idx != idx or int(idx) < 0:
            return None
        idx = int(idx)
        if idx not in self.info and idx in self.df.index:
            r = self.df.loc[idx]
            name = self.sym[int(r["name"])]
            self.info[idx] = [
                name if len(name) <= NAME_CAP else name[: NAME_CAP - 3] + "...",
                self.sym[int(r["cat"])],
                _i(r["stream"]),
                _i(r["ts"]),
                _i(r["dur"]),
            ]
            self.full_names[idx] = name
        return idx

    def use(self, *idxs: Any) -> None:
        self.used.update(i for i in idxs if isinstance(i, int) and i in self.info)

    def table(self) -> dict[str, list[Any]]:
        return {str(k): self.info[k] for k in sorted(self.used)}

    def name(self, idx: int | None) -> str | None:
        return None if idx is None else self.full_names.get(idx)

    def stream(self, idx: int | None) -> Any:
        return None if idx is None or idx not in self.info else self.info[idx][2]


def _bound_by(etype: str, stream: Any, name: str | None) -> str:
    """Same rule as hta.analyzers.critical_path_analysis.bound_by (empty string -> 'none')."""
    from hta.utils.utils import is_comm_kernel

    if etype == "critical_path_kernel_kernel_delay":
        return "gpu_kernel_kernel_overhead"
    if etype == "critical_path_kernel_launch_delay":
        return "gpu_kernel_launch_overhead"
    if etype in ("critical_path_dependency", "critical_path_sync_dependency"):
        return "none"
    if stream is None or stream < 0:
        return "cpu_bound"
    if name is not None and is_comm_kernel(name):
        return "gpu_communication_bound"
    return "gpu_compute_bound"


def _analyse(
    ta: Any,
    rank: int,
    annotation: str,
    instance_id: Any,
    names: _Names | None,
    full: bool,
    cap: int = SEGMENT_CAP,
) -> dict[str, Any]:
    from hta.analyzers.critical_path_analysis import CPEdgeType

    res: dict[str, Any] = {"annotation": annotation, "instance_id": instance_id}
    try:
        res["window_start_us"], res["window_end_us"] = _window_bounds(
            ta, rank, annotation, instance_id
        )
    except Exception as exc:
        res["window_error"] = repr(exc)
    if annotation == "":
        # HTA takes end = trace_df.end.max(), but its "end" column was computed before the
        # timestamps were shifted by hta_min_ts_us: the whole-trace window is in effect unbounded.
        res["window_end_note"] = (
            "HTA bug: end column on the raw clock, window effectively [start, +inf)"
        )
    handler = _Collect()
    hlog = logging.getLogger("hta")
    hlog.addHandler(handler)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            out = ta.critical_path_analysis(
                rank=rank, annotation=annotation, instance_id=instance_id
            )
    except Exception as exc:
        res["success"] = False
        res["error"] = f"{type(exc).__name__}: {exc}"
        res["error_where"] = traceback.extract_tb(exc.__traceback__)[-1].filename.split(
            "site-packages/"
        )[-1] + (f":{traceback.extract_tb(exc.__traceback__)[-1].lineno}")
        res["hta_log"] = _dedupe(handler.records)
        return res
    finally:
        hlog.removeHandler(handler)
    res["hta_log"] = _dedupe(handler.records)
    if out is None:
        res["success"] = False
        res["error"] = "critical_path_analysis returned None (annotation not found)"
        return res
    g, ok = out
    res["success"] = bool(ok)
    if not ok:
        res["error"] = "CPGraph.critical_path() returned False (networkx: graph not a DAG)"
        return res

    path = g.critical_path_nodes
    edges = [g.edges[u, v] for u, v in itertools.pairwise(path)]
    length = sum(int(e["weight"]) for e in edges)  # the weights networkx maximised
    breakdown = g.get_critical_path_breakdown()  # uses CPEdge.weight (see README: -1 edges)
    by_bound = {
        ("none" if k == "" else k): _i(v)
        for k, v in breakdown.groupby("bound_by").duration.sum().items()
    }
    by_type = {
        k.replace("critical_path_", ""): _i(v)
        for k, v in breakdown.groupby("type").duration.sum().items()
    }
    n_by_type = {
        k.replace("critical_path_", ""): int(v) for k, v in breakdown.groupby("type").size().items()
    }
    first, last = g.node_list[path[0]], g.node_list[path[-1]]
    res.update(
        {
            "critical_path_length_us": length,
            "breakdown_duration_sum_us": _i(breakdown.duration.sum()),
            "path_first_node_ts_us": _i(first.ts),
            "path_last_node_ts_us": _i(last.ts),
            "path_span_us": _i(last.ts - first.ts),
            "n_path_nodes": len(path),
            "n_path_edges": len(edges),
            "by_bound_by_us": dict(sorted(by_bound.items())),
            "by_edge_type_us": dict(sorted(by_type.items())),
            "n_edges_by_type": dict(sorted(n_by_type.items())),
        }
    )
    # whole-graph statistics
    gcount: dict[str, list[int]] = {}
    for u, v in g.edges:
        e = g.edges[u, v]["object"]
        c = gcount.setdefault(e.type.value.replace("critical_path_", ""), [0, 0])
        c[0] += 1
        c[1] += int(g.edges[u, v]["weight"])
    res["graph"] = {
        "n_nodes": g.number_of_nodes(),
        "n_edges": g.number_of_edges(),
        "edges_by_type": {
            k: {"count": c, "weight_sum_us": w} for k, (c, w) in sorted(gcount.items())
        },
    }
    if not full or names is None:
        return res

    sync_edges = []
    for u, v in g.edges:
        e = g.edges[u, v]["object"]
        if e.type != CPEdgeType.SYNC_DEPENDENCY:
            continue
        su, sv = g.node_list[u], g.node_list[v]
        sync_edges.append(
            [
                names.ev(su.ev_idx),
                "start" if su.is_start else "end",
                _i(su.ts),
                names.ev(sv.ev_idx),
                "start" if sv.is_start else "end",
                _i(sv.ts),
                bool(e in g.critical_path_edges_set),
            ]
        )
    sync_edges.sort(key=lambda s: (s[2], s[5]))
    res["graph"]["sync_edges"] = sync_edges[:SYNC_EDGE_CAP]
    for se in sync_edges[:SYNC_EDGE_CAP]:
        names.use(se[0], se[3])
    if len(sync_edges) > SYNC_EDGE_CAP:
        res["graph"]["sync_edges_truncated_from"] = len(sync_edges)

    segs = []
    for pos, (u, v) in enumerate(itertools.pairwise(path)):
        obj = g.edges[u, v]["object"]
        su, sv = g.node_list[u], g.node_list[v]
        attr = names.ev(g.get_event_attribution_for_edge(obj))
        src, dst = names.ev(su.ev_idx), names.ev(sv.ev_idx)
        etype = obj.type.value
        # the event an edge is charged to: HTA's attribution for operator/kernel-kernel edges,
        # the kernel (destination) for launch delays, none for dependency/sync edges
        ev = (
            attr
            if attr is not None
            else (dst if obj.type == CPEdgeType.KERNEL_LAUNCH_DELAY else None)
        )
        weight = int(g.edges[u, v]["weight"])
        if int(obj.weight) != weight:  # negative edges HTA zeroed in the graph only (not in CPEdge)
            res.setdefault("path_edges_with_negative_weight_zeroed", []).append(
                [pos, int(obj.weight)]
            )
        segs.append(
            [
                pos,
                etype.replace("critical_path_", ""),
                _bound_by(etype, names.stream(ev), names.name(ev)),
                weight,
                _i(su.ts),
                _i(sv.ts),
                ev,
                src,
                "start" if su.is_start else "end",
                dst,
                "start" if sv.is_start else "end",
            ]
        )
    res["n_segments"] = len(segs)
    if len(segs) > cap:
        keep = sorted(segs, key=lambda s: (-s[3], s[0]))[:cap]
        segs = sorted(keep, key=lambda s: s[0])
        res["segments_truncated_to_top_by_weight"] = cap
        res["segments_kept_weight_sum_us"] = sum(s[3] for s in segs)
    for sg in segs:
        names.use(sg[6], sg[7], sg[9])
    res["segments"] = segs
    return res


def _cpu_step_instances(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # HTA counts every event whose name contains "ProfilerStep" (CPU user_annotation and, in
    # newer traces, the GPU-side gpu_user_annotation copies) in dataframe order; only the CPU
    # ones are iteration windows.
    return [r for r in rows if r["cat"] == "user_annotation"]


def run_trace(tid: str, rel: str, extra: list[tuple[str, Any]]) -> dict[str, Any]:
    path = REPO / rel
    with gzip.open(path) as fh:
        n_raw = len(json.load(fh)["traceEvents"])
    out: dict[str, Any] = {"file": rel, "raw_trace_events": n_raw, "loads": []}
    for include_last in (False, True):
        ta, rank, tmp = _load(path, include_last)
        try:
            df = ta.t.get_trace(rank)
            syms = ta.t.symbol_table.get_sym_id_map()
            steps = _annotation_rows(ta, rank, "ProfilerStep")
            full = not include_last
            load: dict[str, Any] = {
                "include_last_profiler_step": include_last,
                "rank": rank,
                "hta_min_ts_us": _i(ta.t.min_ts),
                "hta_rows_after_load": len(df),
                "has_cuda_sync_events": "cuda_sync" in syms,
                "has_cudaEventRecord_symbol": "cudaEventRecord" in syms,
                "profiler_step_rows": steps,
                "windows": [],
            }
            if include_last:  # the same rows as the default load, plus the last step's
                load["profiler_step_rows"] = f"{len(steps)} rows (see the default load)"
            if include_last and not steps:
                continue  # identical to the default load: HTA only filters when ProfilerStep exists
            names = _Names(ta, rank) if full else None
            windows: list[tuple[str, Any]] = [("", None)]
            windows += [("ProfilerStep", r["instance_id"]) for r in _cpu_step_instances(steps)]
            if full:
                windows += extra
            else:
                cpu = [r["instance_id"] for r in _cpu_step_instances(steps)]
                if len(cpu) >= 2:  # a range of instances, as in HTA's docs (iterations 551 and 552)
                    windows.append(("ProfilerStep", (cpu[0], cpu[-1])))
            labels = {r["instance_id"]: r["name"] for r in steps}
            for ann, inst in windows:
                print(
                    f"[{tid}] last_step={include_last} annotation={ann!r} instance={inst}",
                    file=sys.stderr,
                )
                cap = (
                    SEGMENT_CAP
                    if ann == "" or (ann, inst) == (extra[:1] or [None])[0]
                    else STEP_SEGMENT_CAP
                )
                with _env("CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE", None):
                    w = _analyse(ta, rank, ann, inst, names, full, cap)
                label = "whole trace" if ann == "" else f"{ann}[{inst}]"
                if ann == "ProfilerStep" and inst in labels:
                    label = labels[inst]
                if isinstance(inst, tuple):
                    label = f"{labels[inst[0]]} .. {labels[inst[1]]}"
                w = {"label": label, **w}
                for k, prev in enumerate(load["windows"]):
                    same = (
                        "segments" in w
                        and prev.get("segments") == w["segments"]
                        and prev.get("critical_path_length_us") == w.get("critical_path_length_us")
                    )
                    if same:  # e.g. the whole trace is one step: keep the JSON small
                        w["segments_same_as_window"] = k
                        del w["segments"]
                        w["graph"].pop("sync_edges", None)
                        break
                if full:
                    # HTA's own unit tests set CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE=1
                    with _env("CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE", "1"):
                        z = _analyse(ta, rank, ann, inst, None, False)
                    keys = (
                        "success",
                        "error",
                        "critical_path_length_us",
                        "n_path_nodes",
                        "by_bound_by_us",
                        "by_edge_type_us",
                    )
                    zv = {k: z[k] for k in keys if k in z}
                    if zv == {k: w[k] for k in keys if k in w}:
                        zv = {"identical_to_default": True}
                    zv["graph_edges_by_type"] = z.get("graph", {}).get("edges_by_type")
                    w["with_zero_weight_launch_edges"] = zv
                if not full:
                    w.pop("hta_log", None)
                load["windows"].append(w)
            if names is not None:
                load["event_fields"] = EVENT_FIELDS
                load["events"] = names.table()
            out["loads"].append(load)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _dumps(obj: Any, indent: int = 0) -> str:
    """JSON with one line per list of scalars (segments, events, sync edges): small and diffable."""
    pad, pad1 = " " * indent, " " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        if (
            all(
                not isinstance(v, (dict, list))
                or (isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v))
                for v in obj.values()
            )
            and len(json.dumps(obj)) < 110
        ):
            return json.dumps(obj, ensure_ascii=False)
        items = [f"{pad1}{json.dumps(k)}: {_dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if all(not isinstance(x, (dict, list)) for x in obj):
            return json.dumps(obj, ensure_ascii=False)
        items = [f"{pad1}{_dumps(x, indent + 1)}" for x in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj, ensure_ascii=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", help="comma-separated trace ids")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    logging.getLogger("hta").setLevel(logging.WARNING)

    import hta.configs.env_options as hta_options

    result: dict[str, Any] = {
        "generator": "bench/hta_critical_path_reference.py",
        "hta_version": md.version("HolisticTraceAnalysis"),
        "pandas_version": md.version("pandas"),
        "networkx_version": md.version("networkx"),
        "numpy_version": md.version("numpy"),
        "python_version": sys.version.split()[0],
        "hta_options_default": hta_options.get_options().strip().splitlines(),
        "units": "integer µs on HTA's clock (raw ts rounded by HTA, minus hta_min_ts_us)",
        "segments_cap": SEGMENT_CAP,
        "step_segments_cap": STEP_SEGMENT_CAP,
        "segment_fields": SEGMENT_FIELDS,
        "sync_edge_fields": SYNC_FIELDS,
        "traces": {},
    }
    only = set(args.only.split(",")) if args.only else None
    for tid, rel, extra in TRACES:
        if only and tid not in only:
            continue
        result["traces"][tid] = run_trace(tid, rel, extra)
    text = _dumps(result)
    args.out.write_text(text + "\n")
    print(f"wrote {args.out} ({len(text) / 1024:.0f} kB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
