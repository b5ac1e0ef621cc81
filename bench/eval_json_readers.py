"""Which JSON reader should turn a Kineto trace into columns? The candidates the field uses,
each doing the same job on the same real trace, each in a fresh child process.

The job: read the file and produce the ``ts``, ``dur``, ``ph``, ``cat``, ``name`` of every
element of ``traceEvents`` as columns (numpy/Arrow/Python lists), plus ``args.correlation``.
That is the floor of what AACO's Kineto importer does per event (it reads a dozen fields and
builds several tables). Timed from the child's start of work to its end (imports excluded and
reported apart), with the child's peak RSS (``wait4``).

Candidates (each skipped with a note when its package is missing from the interpreter given
by ``--python``; they are evaluation-only, not AACO dependencies):

* ``aaco``: AACO's importer itself (``KinetoImporter(workers=1).read``: msgspec typed
  structs decoded piece by piece, columns built with C-level loops): the whole job and more.
* ``msgspec-typed``: ``msgspec.json.decode`` into Structs of the five fields, then columns.
* ``msgspec-untyped`` / ``orjson`` / ``json``: decode to dicts and lists, then columns.
* ``simdjson``: pysimdjson's parser, then columns by field access.
* ``duckdb``: ``read_json`` of the top-level object (one row whose ``traceEvents`` is a list
  of structs), ``unnest`` and the five columns fetched to Arrow.
* ``polars``: ``pl.read_json`` of the object, ``explode`` + ``unnest`` of ``traceEvents``.
* ``pyarrow-json``: ``pyarrow.json.read_json`` (multi-threaded C++) with an explicit schema,
  after cutting the ``traceEvents`` array out and dropping the commas between its events
  (it reads whitespace-separated objects only; the cut relies on PyTorch's indentation).
  ``pid``/``tid`` are left out: a Kineto trace has them as numbers in some events and
  strings in others, which pyarrow refuses for the whole file.

Usage::

    python bench/eval_json_readers.py TRACE.json [--python /path/to/python] [--repeat 3]

``--python`` defaults to this interpreter; an evaluation venv with the extra packages
(``pip install duckdb polars pysimdjson orjson``) is what BENCHMARKS.md's figures used.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_PRELUDE = r"""
import sys, time, json
path = sys.argv[1]
def cols_from_dicts(ev):
    ts = [e.get("ts") for e in ev]; dur = [e.get("dur") for e in ev]
    ph = [e.get("ph") for e in ev]; cat = [e.get("cat") for e in ev]
    name = [e.get("name") for e in ev]
    corr = [a.get("correlation") if isinstance(a, dict) else None
            for a in (e.get("args") for e in ev)]
    return len(ts)
"""

_JOBS = {
    "aaco": r"""
from pathlib import Path
from aaco.importers.kineto import KinetoImporter
t0 = time.perf_counter()
t = KinetoImporter(workers=1).read(Path(path))
n = t.event_count
""",
    "msgspec-typed": r"""
import msgspec
class A(msgspec.Struct):
    correlation: object = None
class E(msgspec.Struct):
    ph: object = None; cat: object = None; name: object = None
    ts: object = None; dur: object = None
    args: A | None = None
class T(msgspec.Struct):
    traceEvents: list[E]
t0 = time.perf_counter()
ev = msgspec.json.decode(open(path, "rb").read(), type=T).traceEvents
from operator import attrgetter
ts = list(map(attrgetter("ts"), ev)); dur = list(map(attrgetter("dur"), ev))
ph = list(map(attrgetter("ph"), ev)); cat = list(map(attrgetter("cat"), ev))
name = list(map(attrgetter("name"), ev))
corr = [a.correlation if isinstance(a, A) else None for a in map(attrgetter("args"), ev)]
n = len(ts)
""",
    "msgspec-untyped": r"""
import msgspec
t0 = time.perf_counter()
n = cols_from_dicts(msgspec.json.decode(open(path, "rb").read())["traceEvents"])
""",
    "orjson": r"""
import orjson
t0 = time.perf_counter()
n = cols_from_dicts(orjson.loads(open(path, "rb").read())["traceEvents"])
""",
    "json": r"""
t0 = time.perf_counter()
n = cols_from_dicts(json.loads(open(path, "rb").read())["traceEvents"])
""",
    "simdjson": r"""
import simdjson
t0 = time.perf_counter()
doc = simdjson.Parser().parse(open(path, "rb").read())
ev = doc["traceEvents"]
ts = []; dur = []; ph = []; cat = []; name = []; corr = []
for e in ev:
    ts.append(e.get("ts")); dur.append(e.get("dur")); ph.append(e.get("ph"))
    cat.append(e.get("cat")); name.append(e.get("name"))
    a = e.get("args")
    corr.append(a.get("correlation") if a is not None and hasattr(a, "get") else None)
n = len(ts)
""",
    "duckdb": r"""
import duckdb
t0 = time.perf_counter()
con = duckdb.connect()
q = (f"select e.ts, e.dur, e.ph, e.cat, e.name from (select unnest(traceEvents) as e "
     f"from read_json('{path}', maximum_object_size=4000000000, records=true))")
tab = con.execute(q).to_arrow_table()
n = tab.num_rows
""",
    "pyarrow-json": r"""
import io
import pyarrow as pa, pyarrow.json as pj
t0 = time.perf_counter()
data = open(path, "rb").read()
# pyarrow reads whitespace-separated objects, not an array: cut the array out of the object
# and drop the commas between events (PyTorch's layout: "  {" ... "  }," at 2 spaces)
i = data.index(b"[", data.index(b'"traceEvents"')) + 1
body = data[i : data.index(b"\n  ]", i)].replace(b"\n  },\n  {", b"\n  }\n  {")
schema = pa.schema([
    ("ph", pa.string()), ("cat", pa.string()), ("name", pa.string()),
    ("ts", pa.float64()), ("dur", pa.float64()),
    ("args", pa.struct([("correlation", pa.int64())])),
])  # pid/tid left out: they are numbers in some events and strings in others
tab = pj.read_json(io.BytesIO(body), parse_options=pj.ParseOptions(
    explicit_schema=schema, newlines_in_values=True, unexpected_field_behavior="ignore"))
n = tab.num_rows
""",
    "polars": r"""
import polars as pl
t0 = time.perf_counter()
df = pl.read_json(path).select("traceEvents").explode("traceEvents").unnest("traceEvents")
df = df.select([c for c in ("ts", "dur", "ph", "cat", "name") if c in df.columns])
n = df.height
""",
}

_COUNT = "import json, sys; print(len(json.load(open(sys.argv[1]))['traceEvents']))"

_EPILOGUE = r"""
print(json.dumps({"n": n, "work_s": time.perf_counter() - t0}))
"""

_IMPORTS = {
    "msgspec-typed": "msgspec",
    "msgspec-untyped": "msgspec",
    "orjson": "orjson",
    "simdjson": "simdjson",
    "duckdb": "duckdb",
    "polars": "polars",
}


def _run(python: str, code: str, path: Path) -> dict[str, float] | str:
    import json

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        p = subprocess.Popen([python, "-c", code, str(path)], stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            return err.read().decode().strip().splitlines()[-1][:200]
        r = json.loads(out.read().decode().strip().splitlines()[-1])
    return {"n": r["n"], "work_s": r["work_s"], "wall_s": wall, "peak_mb": usage.ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", action="append", help="candidate name (repeatable)")
    a = ap.parse_args()
    size = a.trace.stat().st_size / 1e6
    count = subprocess.run(
        [sys.executable, "-c", _COUNT, str(a.trace)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    events = int(count.stdout)
    print(
        f"trace {a.trace} ({events} events, {size:.0f} MB); python {a.python}; median of {a.repeat}"
    )
    print(f"  {'reader':<16} {'rows':>9} {'work s':>8} {'M ev/s':>7} {'wall s':>7} {'peak MB':>8}")
    for name, job in _JOBS.items():
        if a.only and name not in a.only:
            continue
        mod = _IMPORTS.get(name)
        if mod is not None:
            probe = subprocess.run([a.python, "-c", f"import {mod}"], capture_output=True)
            if probe.returncode != 0:
                print(f"  {name:<16} skipped: {mod} is not installed for {a.python}")
                continue
        runs = [_run(a.python, _PRELUDE + job + _EPILOGUE, a.trace) for _ in range(a.repeat)]
        bad = [r for r in runs if isinstance(r, str)]
        if bad:
            print(f"  {name:<16} failed: {bad[0]}")
            continue
        ok = [r for r in runs if not isinstance(r, str)]
        work = statistics.median(r["work_s"] for r in ok)
        wall = statistics.median(r["wall_s"] for r in ok)
        peak = statistics.median(r["peak_mb"] for r in ok)
        n = int(ok[0]["n"])  # rows the reader produced (AACO's: the events it tables)
        rate = events / work / 1e6  # every reader read all the file's events
        print(f"  {name:<16} {n:>9} {work:8.2f} {rate:7.2f} {wall:7.2f} {peak:8.0f}")


if __name__ == "__main__":
    main()
