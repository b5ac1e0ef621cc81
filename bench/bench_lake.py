"""The lake at fleet scale: ``aaco lake export`` of 1 000 sessions and ``aaco query`` over
them, whole commands, side by side with DuckDB used by hand (the anchor).

The sessions are copies of two real bundles, labelled as such: a real ``aaco run`` of the
built-in ``bert-tiny`` on this machine (operator profile, telemetry: 210 iterations, ~300
operator events) and the real H100 bundle recorded on a lent GPU
(tests/fixtures/bundles/h100_torch_cuda: 450 kernels, 3 750 operator events, NVML
telemetry). Of ``--sessions`` copies, 70 % are the CPU bundle and 30 % the GPU one, spread
over 60 days and 10 host names; each copy gets its own id, dates, host and measured
latencies (the source's, scaled by a per-host factor, so the p99 of each group is known),
the other files hard-linked.

Measured, each a whole command in a fresh process (median of ``--repeat`` for queries):

* ``aaco lake export`` into a new lake; again with nothing changed; again after 10 new
  sessions; its peak RSS (``/usr/bin/time``);
* the anchor: DuckDB ``COPY`` of the same six bundle tables by hand, one Parquet file
  per table (no sessions table, no partitions, no idempotence, no crash safety: a lower
  bound);
* ``aaco query``: a filtered p99 group-by over the lake's iterations joined to sessions,
  the same over the sessions folder (no lake), a group-by over the sessions table; and the
  anchor: the same SQL in a bare ``python -c "import duckdb ..."`` over the lake's files.

Usage::

    python bench/bench_lake.py [--sessions 1000] [--repeat 5] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "tests" / "fixtures" / "bundles" / "h100_torch_cuda"
HOSTS = [f"node-{i:02d}" for i in range(10)]

P99_SQL = (
    "SELECT s.model, s.hostname, quantile_cont(i.latency_ns, 0.99) / 1e6 AS p99_ms, "
    "count(*) AS n FROM iterations i JOIN sessions s USING (session_id) "
    "WHERE s.vendor = 'cpu' AND s.date >= DATE '{since}' AND i.phase = 'measured' "
    "GROUP BY ALL ORDER BY ALL"
)
SESSIONS_SQL = (
    "SELECT model, arch, hostname, count(*) AS n, median(p99_ms) AS p99_ms FROM sessions "
    "WHERE vendor = 'nvidia' GROUP BY ALL ORDER BY ALL"
)


def timed(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB) and stdout of one whole command."""
    t = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "%M", *cmd],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    rss_kib = int(proc.stderr.strip().splitlines()[-1])
    return wall, rss_kib / 1024, proc.stdout


def aaco(*args: str) -> list[str]:
    return [sys.executable, "-m", "aaco", *args]


def make_sources(work: Path) -> list[Path]:
    """The two real bundles the copies are made of."""
    src = work / "sources"
    cpu = next(src.glob("run/2*/*/session.json"), None)
    if cpu is None:
        subprocess.run(
            aaco(
                "run",
                "--model",
                "bert-tiny",
                "--iterations",
                "200",
                "--output",
                str(src / "run"),
                "--report",
                "none",
                "--no-calibrate",
            ),
            check=True,
            capture_output=True,
        )
        cpu = next(src.glob("run/2*/*/session.json"))
    return [cpu.parent, H100]


def _link_tree(source: Path, dst: Path) -> None:
    for f in source.rglob("*"):
        target = dst / f.relative_to(source)
        if f.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(f, target)


def make_sessions(sources: list[Path], root: Path, n: int, first: int = 0) -> None:
    """``n`` copies (numbered from ``first``) of the sources under ``root``."""
    rng = np.random.default_rng(first)
    start = datetime(2026, 9, 1, tzinfo=timezone.utc)
    tables = {s: pq.read_table(s / "metrics" / "inference_iters.parquet") for s in sources}
    for k in range(first, first + n):
        source = sources[0] if k % 10 < 7 else sources[1]
        host = HOSTS[k % len(HOSTS)]
        when = start + timedelta(minutes=int(k * 60 * 24 * 60 / max(n, 1000)))
        sid = when.strftime("%Y%m%d_%H%M%S") + f"_{k:06x}"
        dst = root / when.strftime("%Y-%m-%d") / sid
        _link_tree(source, dst)
        for name in ("session.json", "env.json", "metrics/inference_iters.parquet",
                     "metrics/inference_summary.json"):  # fmt: skip
            (dst / name).unlink()
        meta = json.loads((source / "session.json").read_text())
        meta["session_id"] = sid
        meta["created_utc"] = when.isoformat().replace("+00:00", "Z")
        (dst / "session.json").write_text(json.dumps(meta))
        env = json.loads((source / "env.json").read_text())
        env["hostname"] = host
        (dst / "env.json").write_text(json.dumps(env))
        t = tables[source]
        factor = 1.0 + 0.05 * HOSTS.index(host)
        lat = pa.compute.multiply(
            t["latency_ns"].cast(pa.float64()), factor * rng.uniform(0.98, 1.02)
        )
        t = t.set_column(
            t.schema.get_field_index("latency_ns"),
            "latency_ns",
            pa.compute.round(lat).cast(pa.int64()),
        )
        pq.write_table(t, dst / "metrics" / "inference_iters.parquet")
        summary = json.loads((source / "metrics" / "inference_summary.json").read_text())
        measured = np.asarray(t.filter(pa.compute.equal(t["phase"], "measured"))["latency_ns"])
        summary["latency_ms"]["p99"] = float(np.percentile(measured, 99) / 1e6)
        (dst / "metrics" / "inference_summary.json").write_text(json.dumps(summary))


#: the bundle tables the lake copies (aaco.lake.layout.LAKE_TABLES' sources)
ANCHOR_TABLES = (
    "metrics/inference_iters.parquet",
    "profiler/ops.parquet",
    "profiler/kernels.parquet",
    "profiler/memcpy.parquet",
    "telemetry/gpu.parquet",
    "telemetry/system_events.parquet",
)


def anchor_copy(root: Path, out: Path) -> list[str]:
    """DuckDB by hand: each table of every bundle copied into one Parquet folder per table
    (partitioned by nothing the bundles' files hold: no sessions table, no vendor)."""
    statements = []
    for rel in ANCHOR_TABLES:
        if not any(root.glob(f"2*/*/{rel}")):
            continue
        listing = f"'{root}/2*/*/{rel}'"  # DuckDB globs it
        name = rel.rsplit("/", 1)[-1].removesuffix(".parquet")
        statements.append(
            "COPY (SELECT regexp_extract(filename, '/([0-9]{8}_[0-9]{6}_[0-9a-f]+)/', 1) "
            f"AS session_id, * EXCLUDE (filename) FROM read_parquet({listing}, filename = true, "
            f"union_by_name = true)) TO '{out / name}.parquet' (FORMAT parquet)"
        )
    code = "import duckdb\n" + "".join(f"duckdb.sql({st!r})\n" for st in statements)
    return [sys.executable, "-c", code]


def anchor_query(lake: Path, sql: str) -> list[str]:
    views = "".join(
        f"con.sql(\"CREATE VIEW {t} AS SELECT * FROM read_parquet('{lake}/{t}/**/*.parquet', "
        'hive_partitioning = true)"); '
        for t in ("iterations", "sessions")
    )
    # the anchor's views keep the partition columns in both: the SQL qualifies every column
    return [sys.executable, "-c", f"import duckdb; con = duckdb.connect(); {views}"
            f"print(con.sql({sql!r}).fetchall())"]  # fmt: skip


def median_of(cmd: list[str], repeat: int) -> tuple[float, float, str]:
    runs = [timed(cmd) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/tmp/aaco-bench-lake"))
    args = ap.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    sources = make_sources(work)
    root = work / f"sessions-{args.sessions}"
    shutil.rmtree(root, ignore_errors=True)
    t = time.perf_counter()
    make_sessions(sources, root, args.sessions)
    print(f"made {args.sessions} sessions in {time.perf_counter() - t:.1f} s (not timed)")
    lake = work / "lake"
    shutil.rmtree(lake, ignore_errors=True)
    shutil.rmtree(work / "more", ignore_errors=True)
    print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}")

    wall, rss, out = timed(aaco("lake", "export", "--sessions", str(root), "--to", str(lake),
                                "--json"))  # fmt: skip
    rows = json.loads(out)["rows"]
    print(f"aaco lake export, new lake:     {wall:6.2f} s  peak RSS {rss:5.0f} MiB  rows {rows}")
    wall, rss, _ = timed(aaco("lake", "export", "--sessions", str(root), "--to", str(lake)))
    print(f"aaco lake export, unchanged:    {wall:6.2f} s  peak RSS {rss:5.0f} MiB")
    make_sessions(sources, root, 10, first=args.sessions)
    wall, rss, out = timed(aaco("lake", "export", "--sessions", str(root), "--to", str(lake),
                                "--json"))  # fmt: skip
    print(f"aaco lake export, +10 sessions: {wall:6.2f} s  peak RSS {rss:5.0f} MiB  "
          f"added {json.loads(out)['added']}")  # fmt: skip
    anchor = work / "anchor"
    shutil.rmtree(anchor, ignore_errors=True)
    anchor.mkdir()
    wall, rss, _ = timed(anchor_copy(root, anchor))
    print(f"anchor: DuckDB COPY of the same tables by hand:  {wall:6.2f} s  "
          f"peak RSS {rss:5.0f} MiB")  # fmt: skip

    since = "2026-10-01"
    p99 = P99_SQL.format(since=since)
    for label, cmd in (
        ("aaco query, filtered p99 group-by, lake", aaco("query", p99, "--lake", str(lake),
                                                           "-f", "json")),
        ("aaco query, same, sessions folder", aaco("query", p99, "--sessions", str(root),
                                                     "-f", "json")),
        ("aaco query, sessions-table group-by, lake", aaco("query", SESSIONS_SQL, "--lake",
                                                             str(lake), "-f", "json")),
        ("anchor: python -c duckdb, p99 group-by, lake", anchor_query(lake, p99)),
    ):  # fmt: skip
        wall, rss, out = median_of(cmd, args.repeat)
        n = len(out.splitlines()) if out.lstrip().startswith("{") else out.count("(")
        print(f"{label:<48} {wall:6.3f} s  peak RSS {rss:5.0f} MiB  ({n} groups)")
    # the lake's p99 per group is the bundles' own figures, pooled: show the first group
    first = json.loads(timed(aaco("query", p99, "--lake", str(lake), "-f", "json"))[2]
                       .splitlines()[0])  # fmt: skip
    print("first group:", first)


if __name__ == "__main__":
    main()
