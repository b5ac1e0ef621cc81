"""Kineto trace import: the whole ``aaco import`` command against Holistic Trace Analysis (HTA),
side by side on the same traces.

For each trace, in alternating order within each round (AACO first in even rounds, HTA first
in odd ones), and each in its own fresh process timed from launch to exit (interpreter start
and imports included; peak RSS from ``wait4``, the process and the children it waited for):

* AACO: ``python -m aaco import TRACE -o ROOT --format none``, the whole command: the trace
  decoded (two processes), the bundle's Parquet tables written, kernel classification,
  op->kernel attribution, derived metrics, the diagnosis (roofline, bottleneck,
  recommendations) and the reports (``report/report.{html,json,txt}``) rendered. The script
  checks after each run that the bundle is ``completed`` and holds the report and the
  diagnosis, and deletes it (untimed).
* HTA: ``TraceAnalysis(trace_dir=...)`` + ``get_temporal_breakdown(visualize=False)`` under
  ``--hta-python`` (HTA 0.5 in its own venv; skipped with a message when it is missing), in a
  ``python -c`` child. HTA writes nothing and computes one breakdown, so the comparison
  favours HTA.
* Startup of each tool alone (``python -m aaco --version``; ``import hta.trace_analysis``),
  also timed once per round, so that the per-trace figures can be read with and without it.

Traces: the real ones given with ``--trace`` (default: the largest real Kineto trace in
``reference-data/kineto``, 108 936 events of a CUDA training run recorded by others, HTA's
test data) are the headline; ``--generated-events N`` adds a seeded trace generated in
Kineto's layout (``bench/gen_kineto_trace.py``), reported as generated (``0`` skips it).

Scale: ``--scale 1,10,20`` adds, for each factor N, the headline real trace concatenated with
itself N times (each copy's timestamps shifted past the previous copy's end, its correlation,
External id and flow ids offset so that links stay within the copy), written uncompressed;
``--hta-max-events`` skips HTA on traces above that size (HTA needs minutes and GBs there).
AACO's own stage breakdown (``aaco import --timings``) of the median run is printed per
trace.

Agreement: HTA is run once more per trace with ``HTA_DISABLE_NS_ROUNDING=1`` (untimed) and its
breakdown printed beside AACO's two figures from the bundle's ``metrics/derived_metrics.json``
(``temporal_breakdown``: every kernel at Kineto's ns resolution; ``temporal_breakdown_hta``:
HTA's selection of kernels and its microsecond rounding, which should equal HTA's default).

AACO's bytecode is compiled first (as ``pip install`` does), so that a checkout run with
``PYTHONDONTWRITEBYTECODE=1`` does not pay for compiling its modules in every timed run.

Usage::

    python bench/bench_kineto.py [--trace PATH ...] [--generated-events 216000] [--repeat 3]
        [--scale 1,10,20] [--hta-max-events N] [--hta-python PY] [--no-hta] [--json out.json]
"""

from __future__ import annotations

import argparse
import compileall
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
REPO = HERE.parent
HTA_PYTHON_CANDIDATES = (
    os.environ.get("AACO_HTA_PYTHON", ""),
    "/work/hta-work/venv/bin/python",
    "/tmp/hta-venv/bin/python",
)
REFERENCE_DIRS = (
    REPO.parent / "shared" / "reference-data" / "kineto",
    Path("/work/shared/reference-data/kineto"),
)
HEADLINE = "hta__negative_queue_length_values_check__rank0.json.gz"

_COUNT_CHILD = """
import gzip, json, sys
p = sys.argv[1]
with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
    print(len(json.load(f)["traceEvents"]))
"""

_HTA_STARTUP = "import hta.trace_analysis"

_HTA_CHILD = """
import json, sys, time, warnings, logging
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
tb = analyzer.get_temporal_breakdown(visualize=False)
t2 = time.perf_counter()
print(json.dumps({"load_s": t1 - t0, "breakdown_s": t2 - t1,
                  "out": json.loads(tb.to_json(orient="records"))}))
"""


def _timed(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``cmd`` to completion: wall seconds from launch to exit, peak RSS (``wait4``'s
    ``ru_maxrss``: the process and the children it waited for), stdout."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=err, cwd=REPO, env={**os.environ, **(env or {})}
        )
        _, status, usage = os.wait4(proc.pid, 0)
        dt = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} failed ({proc.returncode}): {stderr[-2000:]}")
    return {
        "seconds": dt,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
        "stdout": stdout,
        "stderr": stderr,
    }


_CONCAT_CHILD = r"""
import gzip, json, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with (gzip.open(src, "rb") if src.endswith(".gz") else open(src, "rb")) as f:
    doc = json.load(f)
events = doc.pop("traceEvents")
def num(e, k):
    v = e.get(k)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
ends = [num(e, "ts") + (num(e, "dur") or 0) for e in events if num(e, "ts") is not None]
starts = [num(e, "ts") for e in events if num(e, "ts") is not None]
span = int(max(ends) - min(starts)) + 1000
ids = [0]
for e in events:
    a = e.get("args") or {}
    for k in ("correlation", "External id"):
        if isinstance(a.get(k), int):
            ids.append(a[k])
    if isinstance(e.get("id"), int):
        ids.append(e["id"])
off = max(ids) + 1
with open(dst, "w") as out:
    head = json.dumps(doc)[:-1]
    out.write(head + (", " if doc else "") + '"traceEvents": [\n')
    first = True
    for c in range(n):
        for e in events:
            if c:
                e = dict(e)
                if num(e, "ts") is not None and e.get("ph") != "M":
                    e["ts"] = e["ts"] + c * span
                if isinstance(e.get("id"), int):
                    e["id"] = e["id"] + c * off
                a = e.get("args")
                if isinstance(a, dict):
                    a = dict(a)
                    for k in ("correlation", "External id"):
                        if isinstance(a.get(k), int) and a[k] > 0:
                            a[k] = a[k] + c * off
                    e["args"] = a
            out.write(("" if first else ",\n") + json.dumps(e))
            first = False
    out.write("\n]}\n")
"""


def _parse_timings(stderr: str) -> list[tuple[str, float, float]]:
    """``aaco import --timings`` lines: (indented label, seconds, peak RSS MiB)."""
    out: list[tuple[str, float, float]] = []
    if "timings (wall s" not in stderr:
        return out
    for line in stderr[stderr.index("timings (wall s") :].splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 5 and parts[-1] == "MiB" and parts[-3] == "s":
            label = line[: line.rindex(parts[-4])].rstrip()
            out.append((label, float(parts[-4]), float(parts[-2])))
        elif parts[:1] == ["total"]:
            out.append(("total (after start-up)", float(parts[-2]), 0.0))
    return out


def _aaco_import(trace: Path, root: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "aaco", "import", str(trace), "-o", str(root)]
    r = _timed([*cmd, "--format", "none", "--timings"])
    r["stages"] = _parse_timings(r.pop("stderr", ""))
    bundle = (root / "latest").resolve()
    session = json.loads((bundle / "session.json").read_text())
    needed = [
        "report/report.html",
        "report/report.json",
        "metrics/bottleneck.json",
        "metrics/derived_metrics.json",
        "profiler/kernels.parquet",
    ]
    missing = [n for n in needed if not (bundle / n).is_file()]
    if session.get("status") != "completed" or missing:
        raise RuntimeError(f"aaco import: status {session.get('status')}, missing {missing}")
    files = [p for p in bundle.rglob("*") if p.is_file()]
    r["bundle_files"] = len(files)
    r["bundle_mb"] = sum(p.stat().st_size for p in files) / 1e6
    r["derived"] = json.loads((bundle / "metrics/derived_metrics.json").read_text())
    shutil.rmtree(root)
    return r


def _hta(python: Path, trace_dir: Path, exact: bool = False) -> dict[str, Any]:
    env = {"HTA_DISABLE_NS_ROUNDING": "1"} if exact else None
    r = _timed([str(python), "-c", _HTA_CHILD, str(trace_dir)], env)
    r.pop("stderr", None)
    r.update(json.loads(r.pop("stdout").strip().splitlines()[-1]))
    return r


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def _find_hta(arg: Path | None) -> Path | None:
    if arg is not None:
        return arg if arg.exists() else None
    for c in HTA_PYTHON_CANDIDATES:
        if c and Path(c).exists():
            return Path(c)
    return None


def _default_traces() -> list[Path]:
    for d in REFERENCE_DIRS:
        if (d / HEADLINE).is_file():
            return [d / HEADLINE]
    return []


def _print_breakdowns(
    name: str, aaco: dict[str, Any], hta: dict[str, Any] | None, exact: dict[str, Any] | None
) -> None:
    def pct(rows: list[dict[str, Any]]) -> str:
        return "; ".join(
            f"{r['idle_pct']:.2f} / {r['compute_pct']:.2f} / {r['non_compute_pct']:.2f} % "
            f"(window {r['total_ns'] / 1e3:.0f} us)"
            for r in rows
        )

    def hta_pct(rows: list[dict[str, Any]]) -> str:
        return "; ".join(
            f"rank {r['rank']}: {r['idle_time_pctg']:.2f} / {r['compute_time_pctg']:.2f} / "
            f"{r['non_compute_time_pctg']:.2f} % (window {r['kernel_time(us)']:.0f} us)"
            for r in rows
        )

    print(f"  temporal breakdown of {name}, idle / compute / non-compute:")
    print(f"    AACO temporal_breakdown          {pct(aaco['temporal_breakdown'])}")
    print(f"    AACO temporal_breakdown_hta      {pct(aaco['temporal_breakdown_hta'])}")
    if exact is not None:
        print(f"    HTA, HTA_DISABLE_NS_ROUNDING=1   {hta_pct(exact['out'])}")
    if hta is not None:
        print(f"    HTA default (us rounding)        {hta_pct(hta['out'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, action="append", help="a real trace (repeatable)")
    ap.add_argument("--generated-events", type=int, default=216_000, help="0: none")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hta-python", type=Path)
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument(
        "--scale", default="", help="factors N: the headline trace concatenated N times"
    )
    ap.add_argument(
        "--hta-max-events", type=int, default=0, help="skip HTA above this many events (0: never)"
    )
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()

    # as installed (pip writes the bytecode): an editable checkout under
    # PYTHONDONTWRITEBYTECODE=1 would otherwise recompile every changed module per run
    compileall.compile_dir(REPO / "src" / "aaco", quiet=1)
    hta_py = None if a.no_hta else _find_hta(a.hta_python)
    if hta_py is None:
        print("HTA: skipped (--no-hta, or no HTA interpreter: --hta-python / AACO_HTA_PYTHON)")
    result: dict[str, Any] = {"traces": {}, "startup": {}}
    with tempfile.TemporaryDirectory() as tmp:
        cases: list[tuple[str, str, Path]] = []
        for t in a.trace or _default_traces():
            cases.append((t.name, "real", t))
        heads = _default_traces()
        for factor in [int(x) for x in a.scale.split(",") if x.strip()]:
            if not heads:
                sys.exit("--scale needs the headline trace (reference-data/kineto)")
            path = Path(tmp) / f"concat{factor}" / f"rank-0-x{factor}.json"
            path.parent.mkdir()
            concat = [sys.executable, "-c", _CONCAT_CHILD, str(heads[0]), str(path), str(factor)]
            subprocess.run(concat, capture_output=True, text=True, check=True)
            cases.append((f"{heads[0].name} x{factor}", f"real x{factor} (concatenated)", path))
        if a.generated_events:
            # generated in a child: ru_maxrss survives fork+exec, so this process stays small
            path = Path(tmp) / "generated" / "rank-0.json"
            path.parent.mkdir()
            gen = [sys.executable, str(HERE / "gen_kineto_trace.py"), str(path)]
            gen += ["--events", str(a.generated_events), "--seed", str(a.seed)]
            subprocess.run(gen, capture_output=True, text=True, check=True)
            cases.append(
                (f"generated {a.generated_events} events (seed {a.seed})", "generated", path)
            )
        if not cases:
            sys.exit("no trace: pass --trace, or --generated-events N")
        # HTA reads every trace file of a directory: one folder per trace
        dirs: dict[str, Path] = {}
        events: dict[str, int] = {}
        for i, (name, _, path) in enumerate(cases):
            d = Path(tmp) / f"hta{i}"
            d.mkdir()
            os.symlink(path.resolve(), d / path.name)
            dirs[name] = d
            count = [sys.executable, "-c", _COUNT_CHILD, str(path)]
            events[name] = int(
                subprocess.run(count, capture_output=True, text=True, check=True).stdout
            )
            size = path.stat().st_size / 1e6
            gz = " gzip" if path.suffix == ".gz" else ""
            print(f"trace {name}: {events[name]} events, {size:.1f} MB{gz}, {path}")

        runs: dict[str, dict[str, list[dict[str, Any]]]] = {
            n: {"aaco": [], "hta": []} for n, _, _ in cases
        }
        startup: dict[str, list[float]] = {"aaco": [], "hta": []}
        for r in range(a.repeat):
            order = ["aaco", "hta"] if r % 2 == 0 else ["hta", "aaco"]
            for tool in order:
                if tool == "hta" and hta_py is None:
                    continue
                if tool == "aaco":
                    cmd = [sys.executable, "-m", "aaco", "--version"]
                else:
                    cmd = [str(hta_py), "-c", _HTA_STARTUP]
                startup[tool].append(_timed(cmd)["seconds"])
            for name, _, path in cases:
                for tool in order:
                    if tool == "aaco":
                        runs[name]["aaco"].append(_aaco_import(path, Path(tmp) / "sessions"))
                    elif a.hta_max_events and events[name] > a.hta_max_events:
                        continue
                    elif hta_py is not None:
                        runs[name]["hta"].append(_hta(hta_py, dirs[name]))
            print(f"round {r + 1}/{a.repeat} done", file=sys.stderr)

        print(
            f"\nstartup alone (median of {a.repeat}): AACO `python -m aaco --version` "
            f"{statistics.median(startup['aaco']):.2f} s"
            + (
                f"; HTA `import hta.trace_analysis` {statistics.median(startup['hta']):.2f} s"
                if startup["hta"]
                else ""
            )
        )
        result["startup"] = startup
        for name, kind, _ in cases:
            ra, rh = runs[name]["aaco"], runs[name]["hta"]
            n = events[name]
            print(f"\n== {name} ({kind}, {n} events), {a.repeat} rounds, alternating")
            sa = [x["seconds"] for x in ra]
            print(
                f"  aaco import (whole command): {' '.join(f'{s:.2f}' for s in sa)} s; "
                f"median {statistics.median(sa):.2f} s = {n / statistics.median(sa):,.0f} "
                f"events/s; CPU {_median(ra, 'cpu_s'):.2f} s; peak RSS "
                f"{_median(ra, 'peak_mb'):.0f} MB; bundle "
                f"{ra[0]['bundle_files']} files, {ra[0]['bundle_mb']:.1f} MB"
            )
            mid = sorted(ra, key=lambda x: x["seconds"])[len(ra) // 2]
            if mid["stages"]:
                print("  aaco stages of the median run (wall s, peak RSS MiB so far):")
                for label, sec, mib in mid["stages"]:
                    print(f"    {label:<44} {sec:7.3f} {mib:7.0f}")
            entry: dict[str, Any] = {
                "kind": kind,
                "events": n,
                "aaco_seconds": sa,
                "aaco_peak_mb": [x["peak_mb"] for x in ra],
                "aaco_bundle_mb": ra[0]["bundle_mb"],
                "aaco_cpu_s": [x["cpu_s"] for x in ra],
                "aaco_stages_median_run": mid["stages"],
            }
            exact = None
            if rh:
                sh = [x["seconds"] for x in rh]
                print(
                    f"  HTA load + temporal breakdown (whole process): "
                    f"{' '.join(f'{s:.2f}' for s in sh)} s; median "
                    f"{statistics.median(sh):.2f} s = {n / statistics.median(sh):,.0f} "
                    f"events/s; CPU {_median(rh, 'cpu_s'):.2f} s; peak RSS "
                    f"{_median(rh, 'peak_mb'):.0f} MB; in-process load "
                    f"{_median(rh, 'load_s'):.2f} s + breakdown "
                    f"{_median(rh, 'breakdown_s'):.2f} s"
                )
                ratios = [h / x for h, x in zip(sh, sa, strict=True)]
                print(
                    f"  HTA / AACO time, per round: {' '.join(f'{q:.2f}' for q in ratios)}; "
                    f"peak RSS AACO / HTA {_median(ra, 'peak_mb') / _median(rh, 'peak_mb'):.2f}"
                )
                entry |= {
                    "hta_seconds": sh,
                    "hta_peak_mb": [x["peak_mb"] for x in rh],
                    "hta_load_s": [x["load_s"] for x in rh],
                    "hta_breakdown_s": [x["breakdown_s"] for x in rh],
                    "ratio_hta_over_aaco": ratios,
                }
                exact = _hta(hta_py, dirs[name], exact=True) if hta_py else None
            _print_breakdowns(name, ra[-1]["derived"], rh[-1] if rh else None, exact)
            entry["aaco_breakdowns"] = {
                k: ra[-1]["derived"][k] for k in ("temporal_breakdown", "temporal_breakdown_hta")
            }
            entry["hta_breakdown"] = rh[-1]["out"] if rh else None
            entry["hta_exact_breakdown"] = exact["out"] if exact else None
            result["traces"][name] = entry
    if a.json:
        a.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
