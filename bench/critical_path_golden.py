"""Golden outputs of the critical-path analysis on real traces: proof that a change to
``aaco.analysis.critical_path`` keeps every number and every path segment identical.

    python bench/critical_path_golden.py dump OUT_DIR [INPUT ...]
    python bench/critical_path_golden.py compare BEFORE_DIR AFTER_DIR

An INPUT is a trace file (imported as ``aaco analyze critical-path TRACE`` does: the
importers, then the kernel classifier, so what-if patterns see the families a bundle has) or
a bundle folder (its tables read as ``aaco import`` reads them, ``diagnose._critical_path``).
Without inputs: the recorded H100 traces of tests/analysis/fixtures/cuda, HTA's test traces
of tests/analysis/fixtures/hta and HTA's real 108,936-event training trace from
../shared/reference-data/kineto. Big traces are best given as a bundle made once with
``aaco import TRACE -o DIR --format none`` (importing a 2-million-event trace takes a minute).

For every input, ``dump`` writes ``NAME.json.gz`` with

* ``summary``: ``critical_path_summary(tables, EXTRA)``, what ``aaco import`` writes to
  ``metrics/critical_path.json`` (auto what-ifs, 200 longest segments) plus a what-if per
  target, with and without a pattern (operators, runtime calls, kernel families ...);
* ``paths``: ``critical_paths(tables, what_if=auto + EXTRA)``, each ``to_dict()`` with every
  segment (the ``segments`` sequence in its own order, as rows of ``SEGMENT_FIELDS``, the form
  Perfetto export and ``_meanwhile`` see);
* ``step``: the summary of the first ``ProfilerStep`` when the trace has steps (the window
  code path);

and ``compare`` checks the two folders for exact equality (floats included), printing the
first differences of each file. Exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_INPUTS = [
    *sorted((ROOT / "tests/analysis/fixtures/cuda").glob("*.json.gz")),
    *sorted((ROOT / "tests/analysis/fixtures/hta").glob("*.json.gz")),
    ROOT.parent
    / "shared/reference-data/kineto/hta__negative_queue_length_values_check__rank0.json.gz",
]
TABLES = ("kernels", "api_calls", "memcpy", "ops", "annotations")
#: one what-if per target, with and without patterns: every branch of the re-timing
EXTRA_WHAT_IFS = (
    "kernel:0.5", "gpu_compute:0", "gpu:2", "copy:0.5", "memcpy:0", "cpu_op:0.5", "cpu:0.25",
    "op:0.5", "operator:0", "runtime:0.5", "launch:0", "sync:0", "idle:0.5",
    "kernel~gemm|sgemm|cutlass:0.5", "kernel~elementwise:0", "copy~HtoD|Memcpy:0.5",
    "cpu_op~aten::(mm|addmm|linear|conv):0.5", "cpu~.:0.5", "op~aten::(linear|addmm|mm):0.5",
    "operator~backward|conv:0", "runtime~Launch:0.5", "launch~cudaLaunchKernel:0",
    "sync~Synchronize:0.5", "idle~.:0.5", "gpu~nothing_matches_this:0.5",
)  # fmt: skip
SEGMENT_FIELDS = ("kind", "category", "start_ns", "end_ns", "name", "operator", "where",
                  "unexplained", "meanwhile")  # fmt: skip


def _tables(src: Path) -> dict[str, Any]:
    if src.is_dir():
        from aaco.session.bundle import Session

        s = Session.load(src)
        tables = {name: s.table(name) for name in ("kernels", "api_calls", "memcpy", "annotations")}
        tables["ops"] = s.ops()
        return tables
    from aaco.analysis.kernels import classify_table
    from aaco.importers.registry import import_paths

    tt = import_paths([src])
    tt.kernels = classify_table(tt.kernels)
    return {name: getattr(tt, name) for name in TABLES}


def _first_step(tables: dict[str, Any]) -> int | None:
    ann = tables.get("annotations")
    if ann is None or not ann.num_rows or "kind" not in ann.column_names:
        return None
    steps = [
        s
        for k, s in zip(ann.column("kind").to_pylist(), ann.column("step").to_pylist(), strict=True)
        if k == "step" and s is not None
    ]
    return min(steps) if steps else None


def dump_one(src: Path) -> dict[str, Any]:
    from aaco.analysis.critical_path import (
        auto_what_ifs,
        critical_path_summary,
        critical_paths,
        parse_what_if,
    )

    tables = _tables(src)
    extra = [parse_what_if(t) for t in EXTRA_WHAT_IFS]
    t0 = time.perf_counter()
    summary = critical_path_summary(tables, extra)
    t1 = time.perf_counter()
    paths = []
    for cp in critical_paths(tables, what_if=auto_what_ifs(tables) + extra):
        d = cp.to_dict(max_segments=0)
        d["segments"] = {
            "fields": list(SEGMENT_FIELDS),
            "rows": [[getattr(sg, f) for f in SEGMENT_FIELDS] for sg in cp.segments],
        }
        paths.append(d)
    t2 = time.perf_counter()
    step = _first_step(tables)
    step_summary = critical_path_summary(tables, step=step) if step is not None else None
    print(f"  {src.name}: summary {t1 - t0:.2f} s, paths {t2 - t1:.2f} s", flush=True)
    return {"input": str(src), "summary": summary, "paths": paths, "step": step_summary}


def _name(src: Path) -> str:
    return src.name.removesuffix(".gz").removesuffix(".json") if src.is_file() else src.name


def dump(out: Path, inputs: list[Path]) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for src in inputs:
        if not src.exists():
            print(f"  {src}: missing, skipped")
            continue
        data = dump_one(src)
        with gzip.open(out / f"{_name(src)}.json.gz", "wt") as f:
            json.dump(data, f)
    return 0


def _diffs(a: Any, b: Any, where: str = "") -> Iterator[str]:
    if type(a) is not type(b):
        yield f"{where}: {a!r} != {b!r}"
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                yield f"{where}.{k}: only in {'after' if k in b else 'before'}"
            else:
                yield from _diffs(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        if len(a) != len(b):
            yield f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            yield from _diffs(x, y, f"{where}[{i}]")
    elif a != b:
        yield f"{where}: {a!r} != {b!r}"


def compare(before: Path, after: Path) -> int:
    bad = 0
    names = sorted(
        {p.name for p in before.glob("*.json.gz")} | {p.name for p in after.glob("*.json.gz")}
    )
    for name in names:
        if not (before / name).exists() or not (after / name).exists():
            print(f"{name}: only in {'after' if (after / name).exists() else 'before'}")
            bad += 1
            continue
        with gzip.open(before / name, "rt") as f:
            a = json.load(f)
        with gzip.open(after / name, "rt") as f:
            b = json.load(f)
        if a == b:
            segs = sum(len(p["segments"]["rows"]) for p in a["paths"])
            print(f"{name}: identical ({len(a['paths'])} paths, {segs:,} segments)")
            continue
        bad += 1
        print(f"{name}: DIFFERS")
        for i, d in enumerate(_diffs(a, b)):
            if i == 20:
                print("  ...")
                break
            print(f"  {d}")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    d.add_argument("inputs", nargs="*", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = p.parse_args(argv)
    if args.cmd == "dump":
        return dump(args.out, args.inputs or DEFAULT_INPUTS)
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
