"""Speed of the analyses ``aaco import`` runs (``diagnose_bundle``) on real traces, and a
golden check that a faster version gives exactly the same results.

    python bench/bench_analyses_scale.py [BUNDLE ...] [--baseline-src DIR] [--repeat 3]
    python bench/bench_analyses_scale.py --golden-dump OUT.pkl BUNDLE ...
    python bench/bench_analyses_scale.py --golden-compare BEFORE.pkl AFTER.pkl

Bundles (default: the two real CUDA traces, when present): a 1.95 M-event torch.profiler
trace recorded on an H200 (``/work/golden_bundles/h200_2m``) and HTA's 109 k-event training
trace (``/work/golden_bundles/hta_109k``), both imported with ``aaco import``. They are
never written to: each run works on a copy in a temporary folder (``diagnose_bundle``
writes ``metrics/``).

Timing: for every bundle and implementation, ``--repeat`` fresh processes each copy the
bundle and run ``diagnose_bundle`` once (no calibration); the hot functions are wrapped so
that each call's wall time (inclusive) is recorded where the diagnosis calls them. The
median over the processes is printed, ``--baseline-src`` (a ``src`` folder of another
revision, e.g. ``git archive REV src | tar -x -C /tmp/base``, then ``/tmp/base/src``) side
by side with this tree's, runs alternating so that a change of machine load hits both.

Golden: ``--golden-dump`` records, for each bundle, every output of the wrapped functions
(arrays, dicts, tables, in call order) and the files ``diagnose_bundle`` wrote under
``metrics/`` (JSON, stage timings and timestamps left out; parquet as tables) to a pickle;
``--golden-compare`` compares two dumps: ints and strings with ``==``, floats bit for bit,
tables by schema and values. Exit status 1 when they differ.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_BUNDLES = [Path("/work/golden_bundles/hta_109k"), Path("/work/golden_bundles/h200_2m")]

#: (module, attribute): the functions timed and recorded, where the diagnosis looks them up
HOOKS = [
    ("aaco.analysis.cost", "exclusive_ns"),
    ("aaco.analysis.roofline", "per_iteration_medians"),
    ("aaco.analysis.bottleneck", "per_iteration_medians"),
    ("aaco.analysis.bottleneck", "group_medians"),
    ("aaco.analysis.bottleneck", "micro_op_time_share"),
    ("aaco.analysis.bottleneck", "small_grid_share"),
    ("aaco.diagnose", "node_roofline"),
    ("aaco.diagnose", "work_coverage"),
]


def _install_hooks(record: bool) -> dict[str, list[Any]]:
    """Wrap HOOKS; returns name -> [seconds per call] (and the outputs with ``record``)."""
    import importlib
    import time

    seen: dict[str, list[Any]] = {}
    for mod_name, attr in HOOKS:
        mod = importlib.import_module(mod_name)
        fn = getattr(mod, attr, None)
        if fn is None:
            continue
        key = f"{mod_name.rsplit('.', 1)[-1]}.{attr}"

        def wrapper(*a: Any, _fn: Any = fn, _key: str = key, **kw: Any) -> Any:
            t0 = time.perf_counter()
            out = _fn(*a, **kw)
            seen.setdefault(_key, []).append(out if record else time.perf_counter() - t0)
            return out

        setattr(mod, attr, wrapper)
    return seen


def _diagnose_copy(bundle: Path, work: Path) -> tuple[Path, float]:
    import time

    from aaco.diagnose import diagnose_bundle

    dst = work / "bundle"
    shutil.copytree(bundle, dst)
    t0 = time.perf_counter()
    diagnose_bundle(dst, auto_calibrate=False)
    return dst, time.perf_counter() - t0


#: keys of metrics JSON that change from run to run whatever the code
_VOLATILE = {"timings", "timestamp", "created", "created_at", "generated_at", "elapsed_s",
             "wall_s", "duration_s"}  # fmt: skip


def _strip(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _strip(x) for k, x in v.items() if k not in _VOLATILE}
    if isinstance(v, list):
        return [_strip(x) for x in v]
    return v


def _metrics(path: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    out: dict[str, Any] = {}
    for f in sorted((path / "metrics").iterdir()):
        if f.suffix == ".json":
            out[f.name] = _strip(json.loads(f.read_text()))
        elif f.suffix == ".parquet":
            out[f.name] = pq.read_table(f)
    return out


def golden_dump(bundles: list[Path], out: Path) -> None:
    seen = _install_hooks(record=True)
    dump: dict[str, Any] = {}
    for b in bundles:
        seen.clear()
        with tempfile.TemporaryDirectory() as tmp:
            dst, _ = _diagnose_copy(b, Path(tmp))
            dump[str(b)] = {"calls": dict(seen), "metrics": _metrics(dst)}
        print(f"{b}: {', '.join(f'{k} x{len(v)}' for k, v in seen.items())}", file=sys.stderr)
    out.write_bytes(pickle.dumps(dump))


def _same(a: Any, b: Any, where: str, diffs: list[str]) -> None:
    import numpy as np
    import pyarrow as pa

    if len(diffs) > 20:
        return
    if type(a) is not type(b):
        diffs.append(f"{where}: type {type(a).__name__} != {type(b).__name__}")
    elif isinstance(a, float):
        if struct.pack("<d", a) != struct.pack("<d", b) and not (math.isnan(a) and math.isnan(b)):
            diffs.append(f"{where}: {a!r} != {b!r}")
    elif isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
            diffs.append(f"{where}: arrays differ ({a.dtype}{a.shape} vs {b.dtype}{b.shape})")
    elif isinstance(a, pa.Table):
        if not a.schema.equals(b.schema, check_metadata=True):
            diffs.append(f"{where}: schemas differ")
        else:
            _same(a.to_pylist(), b.to_pylist(), where, diffs)
    elif isinstance(a, dict):
        if list(a) != list(b):
            diffs.append(f"{where}: keys differ: {sorted(set(a) ^ set(b), key=str)[:5]}")
        for k in a:
            if k in b:
                _same(a[k], b[k], f"{where}[{k!r}]", diffs)
    elif isinstance(a, list | tuple):
        if len(a) != len(b):
            diffs.append(f"{where}: length {len(a)} != {len(b)}")
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            _same(x, y, f"{where}[{i}]", diffs)
    elif hasattr(a, "__dict__") and not isinstance(a, type):
        _same(vars(a), vars(b), where, diffs)
    elif a != b:
        diffs.append(f"{where}: {a!r} != {b!r}")


def golden_compare(before: Path, after: Path) -> int:
    a, b = pickle.loads(before.read_bytes()), pickle.loads(after.read_bytes())
    diffs: list[str] = []
    _same(a, b, "", diffs)
    for d in diffs[:20]:
        print(d)
    n = sum(len(v["calls"].get(k, [])) for v in a.values() for k in v["calls"])
    print(f"{len(a)} bundles, {n} recorded calls: {'IDENTICAL' if not diffs else 'DIFFERENT'}")
    return 1 if diffs else 0


_CHILD = r"""
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[3])
import bench_analyses_scale as b
seen = b._install_hooks(record=False)
with tempfile.TemporaryDirectory() as tmp:
    _, total = b._diagnose_copy(Path(sys.argv[1]), Path(tmp))
out = {k: sum(v) for k, v in seen.items()}
out["diagnose_bundle"] = total
print(json.dumps(out))
"""


def _child(bundle: Path, src: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(src), AACO_AUTO_CALIBRATE="0")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    got = subprocess.run(
        [sys.executable, "-c", _CHILD, str(bundle), str(src), str(ROOT / "bench")],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(json.loads(got.stdout.strip().splitlines()[-1]))


def bench(bundles: list[Path], baseline: Path | None, repeat: int) -> None:
    impls = {"after": ROOT / "src"}
    if baseline is not None:
        impls = {"before": baseline, **impls}
    for b in bundles:
        if not b.exists():
            print(f"{b}: missing, skipped")
            continue
        runs: dict[str, list[dict[str, float]]] = {k: [] for k in impls}
        for _ in range(repeat):
            for name, src in impls.items():
                runs[name].append(_child(b, src))
        names = {k for rs in runs.values() for r in rs for k in r}
        keys = sorted(names, key=lambda k: (k == "diagnose_bundle", k))
        print(f"\n{b} (median of {repeat} fresh processes, seconds; inclusive, summed per run)")
        head = f"{'function':40}" + "".join(f"{n:>10}" for n in impls)
        print(head + ("    ratio" if baseline is not None else ""))
        for k in keys:
            med = {n: statistics.median(r.get(k, 0.0) for r in rs) for n, rs in runs.items()}
            line = f"{k:40}" + "".join(f"{med[n]:10.3f}" for n in impls)
            if baseline is not None and med["after"]:
                line += f"  {med['before'] / med['after']:6.1f}x"
            print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundles", nargs="*", type=Path)
    ap.add_argument("--golden-dump", type=Path, metavar="OUT")
    ap.add_argument("--golden-compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--baseline-src", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if args.golden_compare:
        return golden_compare(*args.golden_compare)
    bundles = args.bundles or DEFAULT_BUNDLES
    if args.golden_dump:
        golden_dump(bundles, args.golden_dump)
        return 0
    bench(bundles, args.baseline_src, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
