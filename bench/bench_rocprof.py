"""rocprof importers at scale: rocpd SQLite, rocprofv3 JSON, legacy rocprof v1/v2 CSV (issue #20).

Inputs are **real recorded records replicated N×** (never invented ones), each copy shifted
past the previous one in time, with its ids (correlation, dispatch, event, row ids) offset:

* rocpd: a database with rocprofiler-sdk's own schema-3 DDL and views
  (``tests/importers/fixtures/rocprof/rocpd/schema3.sql``), filled with the real records of
  ROCm's documented rocprofv3 samples and ``5150_results.json`` (27 records per copy; see
  ``tests/importers/fixtures/rocprof/rocpd/build_db.py``);
* rocprofv3 JSON: ``tests/importers/fixtures/rocprof/json/5150_results.json`` with its
  dispatch, memory copy and HIP API record replicated (3 records per copy);
* legacy rocprof: ``tests/importers/fixtures/rocprof/legacy/results.csv`` (v1, 2 dispatches
  with 2 counters each) and ``results_v2.csv`` (v2, 2 dispatches), rows replicated.

Each read is timed in a fresh child process (imports before the clock; peak RSS and its growth
over the post-import baseline from the child's own ``VmHWM``), ``--repeat`` rounds, the
implementations alternating within a round. ``--old-src DIR`` adds the same reads with the
package found in DIR (a copy of ``src/`` from before a change), side by side, and compares
every table of the two (equal or not) once per input. ``--whole`` also times
``aaco import FILE -o DIR`` on the largest input of each format (the whole command: read,
attribution, analyses, reports). ``--input FORMAT:PATH`` times a given file too; for rocpd
inputs the time SQLite alone needs to run the views' queries is printed (the floor).

Records: rows in the file's event tables (rocpd: kernels + regions + memory copies + counter
rows; JSON: dispatches + copies + API records; CSV: data rows). Usage::

    python bench/bench_rocprof.py [--sizes 100000,1000000] [--formats rocpd,json,v1,v2]
        [--repeat 3] [--old-src /tmp/aaco_old_src] [--whole] [--dir /tmp/rocprof_bench]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FIX = ROOT / "tests" / "importers" / "fixtures" / "rocprof"
SRC = ROOT / "src"

#: records per replicated copy
PER_COPY = {"rocpd": 27, "json": 3, "v1": 2, "v2": 2}

_READ = r"""
import hashlib, json, resource, sys, time
from pathlib import Path
fmt, path, dump = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
if fmt == "rocpd":
    from aaco.importers.rocpd import read_rocpd as read
elif fmt == "json":
    from aaco.importers.rocprofv3_json import read_rocprofv3_json as read
elif fmt == "v1":
    from aaco.importers.rocprof_legacy import RocprofV1Importer
    read = RocprofV1Importer().read
else:
    from aaco.importers.rocprof_legacy import RocprofV2Importer
    read = RocprofV2Importer().read
def hwm():
    # this process's own peak RSS (kB): ru_maxrss would carry the parent's over exec
    try:
        with open("/proc/self/status") as f:
            return next(int(x.split()[1]) for x in f if x.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
base = hwm()
t0 = time.perf_counter()
t = read(path)
dt = time.perf_counter() - t0
peak = hwm()
rows = {n: getattr(t, n).num_rows for n in
        ("kernels", "memcpy", "api_calls", "annotations", "kernel_counters")}
if dump != "-":
    import pyarrow as pa, pyarrow.ipc as ipc
    with open(dump, "wb") as f:
        for n in ("kernels", "memcpy", "api_calls", "annotations", "kernel_counters"):
            tab = getattr(t, n)
            w = ipc.new_file(f"{dump}.{n}", tab.schema); w.write_table(tab); w.close()
        meta = {k: v for k, v in t.meta.items() if k != "files"}
        f.write(json.dumps(meta, sort_keys=True, default=str).encode())
print(json.dumps({"seconds": dt, "peak_kb": peak, "grow_kb": peak - base, "rows": rows}))
"""


# --------------------------------------------------------------------------- inputs


def make_json(path: Path, copies: int) -> None:
    """5150_results.json with its dispatch, copy and HIP record replicated ``copies`` times."""
    doc = json.loads((FIX / "json" / "5150_results.json").read_text())
    proc = doc["rocprofiler-sdk-tool"][0]
    buf = proc["buffer_records"]
    recs = {k: buf[k] for k in ("kernel_dispatch", "memory_copy", "hip_api")}
    starts = [r["start_timestamp"] for v in recs.values() for r in v]
    ends = [r["end_timestamp"] for v in recs.values() for r in v]
    span = max(ends) - min(starts) + 1000
    corr = 1 + max(r["correlation_id"]["internal"] for v in recs.values() for r in v)
    disp = 1 + max(r["dispatch_info"]["dispatch_id"] for r in recs["kernel_dispatch"])
    proc["buffer_records"] = {k: [] for k in recs}
    head = json.dumps(doc)
    # the document up to the three (empty) record lists, which are written out streaming
    with path.open("w") as f:
        cut = head.index('"buffer_records"')
        f.write(head[:cut] + '"buffer_records": {')
        for i, (key, rows) in enumerate(recs.items()):
            f.write(("," if i else "") + f'"{key}": [')
            first = True
            for c in range(copies):
                for r in rows:
                    r = json.loads(json.dumps(r))
                    r["start_timestamp"] += c * span
                    r["end_timestamp"] += c * span
                    r["correlation_id"]["internal"] += c * corr
                    if "dispatch_info" in r:
                        r["dispatch_info"]["dispatch_id"] += c * disp
                    f.write(("" if first else ",\n") + json.dumps(r, separators=(",", ":")))
                    first = False
            f.write("]")
        f.write("}" + head[head.index('"buffer_records"') + len('"buffer_records": {')
                      + len(", ".join(f'"{k}": []' for k in recs)) + 1:])  # fmt: skip


def make_csv(path: Path, fixture: Path, copies: int, time_cols: tuple[str, ...],
             id_cols: tuple[str, ...]) -> None:  # fmt: skip
    """A legacy CSV fixture's rows replicated, times shifted, ids offset (``csv`` module)."""
    import csv

    with fixture.open(newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    ti = [header.index(c) for c in time_cols]
    ii = [header.index(c) for c in id_cols]
    times = [int(r[i]) for r in body for i in ti]
    span = max(times) - min(times) + 1000
    step = 1 + max(int(r[i]) for r in body for i in ii)
    with path.open("w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
        w.writerow(header)
        for c in range(copies):
            for r in body:
                r = list(r)
                for i in ti:
                    r[i] = str(int(r[i]) + c * span)
                for i in ii:
                    r[i] = str(int(r[i]) + c * step)
                w.writerow(r)


def make_input(fmt: str, records: int, out_dir: Path) -> Path:
    copies = max(1, records // PER_COPY[fmt])
    suffix = {"rocpd": "db", "json": "json", "v1": "csv", "v2": "csv"}[fmt]
    name = f"{fmt}_{copies * PER_COPY[fmt]}.{suffix}"
    if fmt == "v1":
        name = f"v1_{copies * PER_COPY[fmt]}_results.csv"
    path = out_dir / name
    if path.exists():
        return path
    tmp = path.with_name(path.name + ".part")
    if fmt == "rocpd":
        sys.path.insert(0, str(FIX / "rocpd"))
        import build_db

        build_db.build(tmp, copies)
    elif fmt == "json":
        make_json(tmp, copies)
    elif fmt == "v1":
        make_csv(tmp, FIX / "legacy" / "results.csv", copies,
                 ("DispatchNs", "BeginNs", "EndNs", "CompleteNs"), ("Index",))  # fmt: skip
    else:
        make_csv(tmp, FIX / "legacy" / "results_v2.csv", copies,
                 ("Start_Timestamp", "End_Timestamp"),
                 ("Dispatch_ID", "Correlation_ID"))  # fmt: skip
    tmp.rename(path)
    return path


# --------------------------------------------------------------------------- runs


def _child(src: Path, fmt: str, path: Path, dump: str = "-") -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", _READ, fmt, str(path), dump], env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"{fmt} {path.name} ({src}): {out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _same_tables(a: str, b: str) -> str:
    import pyarrow.ipc as ipc

    diffs = []
    for n in ("kernels", "memcpy", "api_calls", "annotations", "kernel_counters"):
        ta = ipc.open_file(f"{a}.{n}").read_all()
        tb = ipc.open_file(f"{b}.{n}").read_all()
        if not ta.equals(tb):
            diffs.append(n)
    if Path(a).read_bytes() != Path(b).read_bytes():
        diffs.append("meta")
    return "identical" if not diffs else "DIFFER: " + ", ".join(diffs)


def _whole(path: Path) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="aaco_bench_rocprof_"))
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "aaco", "import", str(path), "-o",
                                 str(root), "--format", "none"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, cwd=ROOT)  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
        dt = time.perf_counter() - t0
        err = proc.stderr.read().decode() if proc.stderr else ""
        if os.waitstatus_to_exitcode(status):
            raise RuntimeError(f"aaco import {path.name}: {err[-2000:]}")
        return {"seconds": dt, "peak_mb": usage.ru_maxrss / 1024}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _sqlite_floor(path: Path) -> float:
    """Seconds SQLite needs to run each view's query the reader runs (all view columns it
    has of those read), counting rows without fetching them: the floor of any reader."""
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    t0 = time.perf_counter()
    views = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    for view in ("kernels", "memory_copies", "regions", "kernel_pmc_events",
                 "counters_collection"):  # fmt: skip
        if view in views:
            if view == "counters_collection" and "kernel_pmc_events" in views:
                continue
            con.execute(f"SELECT COUNT(*) FROM (SELECT * FROM `{view}`)").fetchone()
    con.close()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000,1000000", help="records per input")
    ap.add_argument("--formats", default="rocpd,json,v1,v2")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--old-src", type=Path, help="the package before a change, side by side")
    ap.add_argument("--whole", action="store_true", help="also time `aaco import` (largest)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "rocprof_bench")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--input", action="append", default=[], metavar="FORMAT:PATH",
                    help="also time this file (records: the rows read)")  # fmt: skip
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    impls = [("after", SRC)] + ([("before", args.old_src)] if args.old_src else [])
    results: list[dict[str, Any]] = []
    print(f"inputs: real records replicated N× (in {args.dir}); {args.repeat} rounds, "
          "fresh process per read, medians", flush=True)  # fmt: skip
    jobs: list[tuple[str, Path | None, int]] = [
        (fmt, None, size) for fmt in args.formats.split(",") if fmt for size in sizes
    ]
    jobs += [(x.split(":", 1)[0], Path(x.split(":", 1)[1]), 0) for x in args.input]
    for k, (fmt, given, size) in enumerate(jobs):
        path = given if given is not None else make_input(fmt, size, args.dir)
        records = (max(1, size // PER_COPY[fmt])) * PER_COPY[fmt]
        if given is not None:
            records = sum(_child(SRC, fmt, path)["rows"].values())
        if fmt == "rocpd":
            print(f"{'':6s} SQLite alone (the views' queries, rows counted): "
                  f"{_sqlite_floor(path):.2f} s", flush=True)  # fmt: skip
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in impls}
        for r in range(args.repeat):
            for name, src in impls if r % 2 == 0 else impls[::-1]:
                runs[name].append(_child(src, fmt, path))
        same = ""
        if args.old_src:
            with tempfile.TemporaryDirectory() as td:
                a, b = f"{td}/a", f"{td}/b"
                _child(SRC, fmt, path, a)
                _child(args.old_src, fmt, path, b)
                same = _same_tables(a, b)
        row: dict[str, Any] = {"format": fmt, "records": records, "file_mb":
                               round(path.stat().st_size / 1e6, 1), "same": same}  # fmt: skip
        for name, rs in runs.items():
            sec = statistics.median(x["seconds"] for x in rs)
            row[name] = {
                "seconds": round(sec, 3),
                "best": round(min(x["seconds"] for x in rs), 3),
                "records_per_s": round(records / sec),
                "peak_mb": round(max(x["peak_kb"] for x in rs) / 1024),
                "grow_mb": round(max(x["grow_kb"] for x in rs) / 1024),
                "rows": rs[0]["rows"],
            }
        results.append(row)
        line = f"{fmt:6s} {records:>9,} rec {row['file_mb']:>7} MB"
        for name in runs:
            x = row[name]
            line += (f" | {name}: {x['seconds']:.2f} s ({x['records_per_s'] / 1e6:.2f} M/s)"
                     f" peak {x['peak_mb']} MB (+{x['grow_mb']})")  # fmt: skip
        if args.old_src:
            ratio = row["before"]["seconds"] / row["after"]["seconds"]
            line += f" | {ratio:.1f}x faster, tables {same}"
        print(line, flush=True)
        last = k + 1 == len(jobs) or jobs[k + 1][0] != fmt or jobs[k + 1][1] is not None
        if args.whole and given is None and last:
            path = make_input(fmt, sizes[-1], args.dir)
            w = _whole(path)
            results.append({"format": fmt, "whole_command": str(path.name), **w})
            print(f"{fmt:6s} aaco import {path.name}: {w['seconds']:.2f} s, "
                  f"peak {w['peak_mb']:.0f} MB", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
