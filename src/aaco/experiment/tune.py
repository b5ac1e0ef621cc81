"""``aaco tune``: a guarded search over what a user can change without touching the model's
meaning, each candidate verified and accepted only by an interleaved A/B.

1. **Candidates** (:func:`search_space`): ONNX Runtime's intra-op threads, execution mode
   (and inter-op threads), graph optimisation level, memory pattern, CPU arena, IO binding,
   and for the throughput objective the batch size; opt-in variants that change numerics
   (dynamic int8 quantisation; fp16 needs a GPU and is refused on CPU backends).
2. **Verification** (:func:`verify`): each candidate's outputs on the reference's seeded
   inputs against the reference configuration's, with per-dtype tolerances
   (:data:`TOLERANCES`); numerics-changing variants are gated by ``max_error`` (the largest
   absolute difference over the largest reference magnitude) and a cosine similarity of at
   least :data:`MIN_COSINE`. A candidate that fails is never timed again.
3. **Screening** by successive halving: every verified candidate runs briefly in a fresh
   worker, the best third goes on with three times the iterations, until
   :data:`FINALISTS` remain. Screening figures only rank candidates: they are never
   reported as gains.
4. **The judge**: each finalist against the current best in an interleaved A/B
   (:func:`aaco.experiment.ab.run_ab`); only an IMPROVEMENT makes it the new best. The
   result states the gain with the A/B's interval, or that none beats the default.

The result is ``tune.json`` (every trial: configuration, verification, screening, verdict,
gain) and a ``backends.yaml`` entry; :func:`apply_entry` writes it into the user's config
(keeping the previous file).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from aaco import __version__
from aaco.analysis.compare import IMPROVEMENT, QUANTILES
from aaco.config import BackendEntry
from aaco.errors import BundleError, RunError, UsageError
from aaco.experiment.ab import ABSettings, new_ab_id, run_ab, run_invalid_reason
from aaco.pipeline import RunOptions, run_model
from aaco.regress.diff import measured_latencies
from aaco.runners.inputs import InputSpec, feed_value, make_array
from aaco.session.bundle import Session, atomic_write_bytes, atomic_write_json, utc_now_iso

__all__ = [
    "Candidate",
    "TuneSettings",
    "apply_entry",
    "parse_slo",
    "search_space",
    "tune",
    "verify",
]

#: per-dtype tolerances of candidates that keep the numerics: ``|got - ref| <= atol * scale +
#: rtol * |ref|`` (``scale`` the largest reference magnitude); other dtypes must be equal.
#: Changing optimisation level or threads reorders float sums and fuses operators, which
#: moves float32 results by ~1e-6 relative; these bounds leave room for that and nothing
#: that changes a result's meaning.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-9, 1e-7),
    "float32": (1e-4, 1e-3),
    "float16": (1e-3, 1e-2),
}
MIN_COSINE = 0.99
DEFAULT_MAX_ERROR = 0.01
FINALISTS = 3
HALVING = 3
#: candidates a screening rung starts with at most (a random sample beyond it)
MAX_CANDIDATES = 24
OBJECTIVES = ("latency", "throughput")
#: execution-provider options searched on GPU providers (each a dimension of the grid);
#: they change how kernels are chosen, not what they compute
PROVIDER_OPTIONS: dict[str, list[dict[str, str]]] = {
    "CUDAExecutionProvider": [
        {"cudnn_conv_algo_search": "EXHAUSTIVE"},
        {"cudnn_conv_algo_search": "HEURISTIC"},
        {"cudnn_conv_algo_search": "DEFAULT"},
    ],
    "ROCMExecutionProvider": [
        {},
        {"tunable_op_enable": "1", "tunable_op_tuning_enable": "1"},
    ],
}
#: provider options that switch a GPU provider to fp16 (numerics change: opt-in)
FP16_OPTIONS: dict[str, dict[str, str]] = {
    "MIGraphXExecutionProvider": {"migraphx_fp16_enable": "1"},
    "TensorrtExecutionProvider": {"trt_fp16_enable": "1"},
}


@dataclass(frozen=True)
class Candidate:
    """A configuration: backend-entry settings (and ``batch``), or a model variant."""

    name: str
    settings: dict[str, Any]
    batch: int | None = None
    #: a variant model (int8) whose numerics differ; None: the user's model
    model_path: str | None = None
    numerics: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "settings": dict(self.settings),
            "batch": self.batch,
            "model_path": self.model_path,
            "numerics": self.numerics,
        }


@dataclass(frozen=True)
class TuneSettings:
    objective: str = "latency"
    #: (quantile name, ms): the latency the throughput objective must keep
    slo: tuple[str, float] | None = None
    budget_s: float = 600.0
    max_error: float = DEFAULT_MAX_ERROR
    numerics: tuple[str, ...] = ()
    batches: tuple[int, ...] = (1, 2, 4, 8, 16)
    screen_iterations: int = 10
    #: measured iterations of each A/B run (warmup a fifth of it, at least 2)
    ab_iterations: int = 30
    seed: int = 0
    ab: ABSettings = field(default_factory=ABSettings)

    def check(self) -> None:
        if self.objective not in OBJECTIVES:
            raise UsageError(f"--objective must be one of {', '.join(OBJECTIVES)}")
        if not self.budget_s > 0:
            raise UsageError("--budget must be positive")
        if not 0 < self.max_error < 1:
            raise UsageError("--max-error must lie in (0, 1)")
        for n in self.numerics:
            if n not in ("int8", "fp16"):
                raise UsageError(f"--allow-numerics {n!r}: choose int8 or fp16")
        self.ab.check()


def parse_slo(text: str) -> tuple[str, float]:
    """``p99=20ms`` -> ("p99", 20.0)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    value = value.strip().removesuffix("ms").strip()
    try:
        ms = float(value)
    except ValueError:
        ms = math.nan
    if not sep or name not in QUANTILES or not (math.isfinite(ms) and ms > 0):
        raise UsageError(
            f"--slo {text!r}: expected QUANTILE=MS such as p99=20ms ({', '.join(QUANTILES)})"
        )
    return name, ms


# -- the search space ----------------------------------------------------------------------
def search_space(
    base: BackendEntry,
    *,
    cores: int,
    objective: str,
    batches: Sequence[int] = (),
    seed: int = 0,
    limit: int = MAX_CANDIDATES,
) -> list[Candidate]:
    """Configurations of ``base`` that keep the model's meaning, the reference first; a
    random sample when the grid is larger than ``limit``."""
    gpu = base.provider not in ("CPUExecutionProvider",)
    threads = sorted({1, cores} | ({cores // 2} if cores >= 4 else set()))
    modes: list[tuple[str, int | None]] = [("sequential", None), ("parallel", 2)]
    levels = ["basic", "extended", "all"]
    bools: list[bool] = [True, False]
    grid = []
    for t, (mode, inter), level, pattern, arena, bind in itertools.product(
        threads, modes, levels, bools, bools, bools if gpu else [False, True]
    ):
        grid.append(
            {
                "intra_op_threads": t,
                "execution_mode": mode,
                "inter_op_threads": inter,
                "graph_optimization_level": level,
                "enable_mem_pattern": pattern,
                "enable_cpu_mem_arena": arena,
                "io_binding": bind,
            }
        )
    options = PROVIDER_OPTIONS.get(base.provider)
    if options:
        grid = [{**g, "provider_options": o} for g in grid for o in options]
    rng = np.random.default_rng(seed)
    if len(grid) > limit - 1:
        pick = sorted(rng.choice(len(grid), size=limit - 1, replace=False).tolist())
        grid = [grid[i] for i in pick]
    out = [Candidate("reference", {})]
    sizes: list[int | None] = list(batches) if objective == "throughput" and batches else [None]
    for i, s in enumerate(grid):
        b = sizes[i % len(sizes)]
        out.append(Candidate(f"c{i + 1:02d}", s, batch=b))
    if objective == "throughput":
        out += [Candidate(f"batch{b}", {}, batch=b) for b in sizes if b is not None]
    return out


def _entry(base: BackendEntry, c: Candidate, name: str) -> BackendEntry:
    keys = {f.name for f in dataclasses.fields(BackendEntry)} - {"provider_options"}
    provider_options = {**base.provider_options, **(c.settings.get("provider_options") or {})}
    return dataclasses.replace(
        base,
        name=name,
        **{k: v for k, v in c.settings.items() if k in keys},
        provider_options=provider_options,
        origin="aaco tune",
    )


def entry_yaml(entry: BackendEntry) -> dict[str, Any]:
    """A backend entry as ``backends.yaml`` holds it (defaults left out)."""
    out: dict[str, Any] = {"provider": entry.provider}
    default = BackendEntry(name=entry.name, provider=entry.provider)
    for f in dataclasses.fields(BackendEntry):
        if f.name in ("name", "provider", "origin"):
            continue
        v = getattr(entry, f.name)
        if v != getattr(default, f.name):
            out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


# -- verification --------------------------------------------------------------------------
def run_outputs(
    model_path: str, inputs: Sequence[InputSpec], backend: BackendEntry, seed: int
) -> list[np.ndarray[Any, Any]]:
    """The model's outputs on the seeded inputs the worker feeds (:func:`make_array`), with
    ``backend``'s session options (no IO binding: the values, not the speed)."""
    import onnxruntime as ort

    from aaco.runners.ort_worker import _providers, _session_options
    from aaco.runners.spec import RunSpec

    spec = RunSpec(
        model_path=model_path, inputs=tuple(inputs), backend=backend, warmup=0, iterations=1,
        duration_s=None, threads=None, seed=seed, profile=False, profile_warmup=0,
        profile_iterations=0, bundle_dir="",
    )  # fmt: skip
    names, options = _providers(spec)
    sess = ort.InferenceSession(
        model_path, sess_options=_session_options(spec, ort), providers=names,
        provider_options=options,
    )  # fmt: skip
    rng = np.random.default_rng(seed)
    feeds = {i.name: feed_value(i, make_array(i, rng)) for i in inputs}
    return [np.asarray(x) for x in sess.run(None, feeds)]


def verify(
    ref: Sequence[np.ndarray[Any, Any]],
    got: Sequence[np.ndarray[Any, Any]],
    *,
    numerics: str | None = None,
    max_error: float = DEFAULT_MAX_ERROR,
) -> dict[str, Any]:
    """Compare a candidate's outputs with the reference's: ``passed`` and, per output, the
    largest absolute and relative (to the largest reference magnitude) error and the cosine
    similarity. Exact candidates (``numerics`` None) must meet :data:`TOLERANCES` (equality
    for non-float dtypes); variants must keep the relative error within ``max_error`` and
    the cosine at or above :data:`MIN_COSINE`."""
    outputs: list[dict[str, Any]] = []
    reasons: list[str] = []
    if len(ref) != len(got):
        return {"passed": False, "reason": f"{len(got)} outputs instead of {len(ref)}"}
    for i, (r, g) in enumerate(zip(ref, got, strict=True)):
        row: dict[str, Any] = {"index": i, "dtype": str(r.dtype), "shape": list(r.shape)}
        outputs.append(row)
        if r.shape != g.shape:
            reasons.append(f"output {i}: shape {list(g.shape)} instead of {list(r.shape)}")
            continue
        if r.dtype.kind not in "fc":
            same = bool(np.array_equal(r, g))
            row["equal"] = same
            if not same:
                reasons.append(f"output {i} ({r.dtype}): values differ")
            continue
        rf, gf = r.astype(np.float64), g.astype(np.float64)
        # non-finite values (NaN, +-inf: masks, log-probabilities) must sit at the same
        # places with the same values; the errors are measured on the finite ones
        odd_r, odd_g = ~np.isfinite(rf), ~np.isfinite(gf)
        same_odd = np.array_equal(odd_r, odd_g) and np.array_equal(
            rf[odd_r], gf[odd_g], equal_nan=True
        )
        if not same_odd:
            reasons.append(f"output {i}: NaN or infinities differ from the reference's")
            continue
        rf, gf = rf[~odd_r], gf[~odd_g]
        scale = float(np.max(np.abs(rf))) if rf.size else 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            diff = np.abs(gf - rf)
            max_abs = float(diff.max()) if diff.size else 0.0
            rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
            nr, ng = float(np.linalg.norm(rf)), float(np.linalg.norm(gf))
            cosine = float(np.dot(rf, gf) / (nr * ng)) if nr and ng else (1.0 if nr == ng else 0.0)
        # an all-zero reference makes any difference infinitely large: null in the JSON, as
        # any figure that is not finite
        row.update(
            {
                "max_abs_error": max_abs if math.isfinite(max_abs) else None,
                "max_rel_error": rel if math.isfinite(rel) else None,
                "cosine": cosine if math.isfinite(cosine) else None,
            }
        )
        if numerics is None:
            atol, rtol = TOLERANCES.get(str(r.dtype), TOLERANCES["float32"])
            with np.errstate(over="ignore", invalid="ignore"):
                ok = bool(np.all(diff <= atol * max(scale, 1e-30) + rtol * np.abs(rf)))
            row["tolerance"] = {"atol_of_scale": atol, "rtol": rtol}
            if not ok:
                reasons.append(
                    f"output {i}: max error {max_abs:.3g} ({rel:.3g} of the largest value) "
                    f"beyond the {r.dtype} tolerance"
                )
        elif not (rel <= max_error and cosine >= MIN_COSINE):  # NaN fails too
            reasons.append(
                f"output {i}: {numerics} error {rel:.3g} of the largest value (at most "
                f"{max_error:g}), cosine {cosine:.4f} (at least {MIN_COSINE})"
            )
    return {"passed": not reasons, "reason": "; ".join(reasons) or None, "outputs": outputs}


# -- the tuner -------------------------------------------------------------------------------
@dataclass
class _Trial:
    candidate: Candidate
    entry: BackendEntry
    verification: dict[str, Any] | None = None
    screening: list[dict[str, Any]] = field(default_factory=list)
    stage: str = "pending"
    ab: dict[str, Any] | None = None
    accepted: bool = False

    def score(self) -> float:
        # a failed screening run has no score (null in tune.json): it ranks last
        score = self.screening[-1].get("score_ms") if self.screening else None
        return math.inf if score is None else float(score)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.candidate.to_json(),
            "backend_entry": entry_yaml(self.entry),
            "verification": self.verification,
            "screening": self.screening,
            "stage": self.stage,
            "ab": self.ab,
            "accepted": self.accepted,
        }


def _quantize_int8(model_path: str, folder: Path) -> str:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    out = folder / (Path(model_path).stem + ".int8.onnx")
    quantize_dynamic(model_path, str(out), weight_type=QuantType.QInt8)
    return str(out)


def tune(
    base_opts: RunOptions,
    settings: TuneSettings,
    *,
    output: Path,
    run: Callable[[RunOptions], Session] = run_model,
    extra_candidates: Sequence[Candidate] = (),
    clock: Callable[[], float] = time.monotonic,
    on_event: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Tune ``base_opts``'s model on its backend; returns ``tune.json``'s content (also
    written under ``output/tune/<id>/``). ``extra_candidates`` join the search (a test
    plants one here); ``run`` is the seam every timed run goes through."""
    from aaco.config import load_registry
    from aaco.runners.base import RUNNERS

    settings.check()
    say = on_event or (lambda _m: None)
    t0 = clock()
    tune_id = new_ab_id().replace("ab_", "tune_", 1)
    folder = output / "tune" / tune_id
    folder.mkdir(parents=True, exist_ok=True)
    sessions = folder / "sessions"
    registry = load_registry(base_opts.config_dir)
    base = registry.backend(base_opts.backend or "cpu")
    runner = RUNNERS.get(base_opts.framework)()
    if base_opts.framework != "onnxruntime":
        raise UsageError("aaco tune searches ONNX Runtime's options: --framework onnxruntime")
    plan = runner.plan(dataclasses.replace(base_opts, output=sessions))
    model_path = str(plan.spec["model_path"])
    inputs = [InputSpec.from_json(i) for i in plan.spec["inputs"]]
    gpu = base.provider != "CPUExecutionProvider"
    batches = settings.batches if _batch_is_open(runner, base_opts, sessions) else ()
    if settings.objective == "throughput" and not batches:
        say("note: the model's batch is fixed: the throughput objective tunes options only")
    candidates = search_space(
        base, cores=_usable_cores(), objective=settings.objective, batches=batches,
        seed=settings.seed,
    )  # fmt: skip
    notes: list[str] = []
    if "int8" in settings.numerics:
        q = _quantize_int8(model_path, folder)
        candidates.append(Candidate("int8", {}, model_path=q, numerics="int8"))
    if "fp16" in settings.numerics:
        fp16 = FP16_OPTIONS.get(base.provider)
        if fp16 is not None:
            candidates.append(Candidate("fp16", {"provider_options": fp16}, numerics="fp16"))
        else:
            notes.append(
                "fp16 variant skipped: it is offered on GPU backends only"
                if not gpu
                else f"fp16 variant skipped: {base.provider} has no fp16 switch and this "
                "project ships no fp16 model converter"
            )
    candidates += list(extra_candidates)
    trials = [_Trial(c, _entry(base, c, f"tune-{c.name}")) for c in candidates]
    # 1. verification, against the reference configuration's outputs at batch 1
    ref = run_outputs(model_path, inputs, base, base_opts.seed)
    for t in trials:
        if t.candidate.name == "reference" or t.candidate.batch not in (None, plan.batch):
            # another batch size changes the inputs' shapes: verified with the same options
            # at the reference batch (what batching changes is the data, not the numerics)
            t.verification = {"passed": True, "reason": None, "outputs": [], "note": "reference"
                              if t.candidate.name == "reference" else "batch: options verified "
                              "at the reference batch"}  # fmt: skip
            if t.candidate.name != "reference":
                got = run_outputs(t.candidate.model_path or model_path, inputs, t.entry,
                                  base_opts.seed)  # fmt: skip
                t.verification = {**verify(ref, got), "note": t.verification["note"]}
        else:
            got = run_outputs(t.candidate.model_path or model_path, inputs, t.entry, base_opts.seed)
            t.verification = verify(
                ref, got, numerics=t.candidate.numerics, max_error=settings.max_error
            )
        if not t.verification["passed"]:
            t.stage = "rejected: verification"
            say(f"{t.candidate.name}: rejected, {t.verification['reason']}")
    # 2. screening by successive halving (half the budget at most)
    config_dir = folder / "config"
    _write_backends(config_dir, [t.entry for t in trials], base_opts.config_dir)
    # the reference is the incumbent: it is not screened, and never takes a finalist's place
    alive = [
        t
        for t in trials
        if t.verification and t.verification["passed"] and t.candidate.name != "reference"
    ]
    iterations = settings.screen_iterations
    rung = 0
    screen_deadline = t0 + settings.budget_s * 0.5
    while len(alive) > FINALISTS and clock() < screen_deadline:
        for t in alive:
            if clock() >= screen_deadline:
                break
            _screen(t, base_opts, config_dir, sessions, iterations, rung, settings, run)
        ranked = sorted(alive, key=lambda t: t.score())
        keep = max(FINALISTS, math.ceil(len(ranked) / HALVING))
        for t in ranked[keep:]:
            if t.candidate.name != "reference":  # the incumbent is never eliminated
                t.stage = f"eliminated at screening rung {rung}"
        alive = ranked[:keep]
        say(f"screening rung {rung}: {len(alive)} candidates left")
        iterations *= HALVING
        rung += 1
    finalists = [
        t for t in sorted(alive, key=lambda t: t.score()) if t.candidate.name != "reference"
    ]
    finalists = [t for t in finalists if _meets_slo(t, settings)]
    # 3. the A/B judge, against the current best
    reference = next(t for t in trials if t.candidate.name == "reference")
    best = reference
    for t in finalists:
        left = settings.budget_s - (clock() - t0)
        if left <= 0:
            t.stage = "not judged: budget spent"
            continue
        ab_settings = dataclasses.replace(
            settings.ab, max_time_s=left / max(1, len(finalists) - finalists.index(t)),
            per_item=settings.objective == "throughput" and bool(batches),
        )  # fmt: skip
        say(f"A/B: {best.candidate.name} (A) vs {t.candidate.name} (B)")
        n, w = settings.ab_iterations, max(2, settings.ab_iterations // 5)
        a_opts = _run_opts(best, base_opts, config_dir, sessions)
        b_opts = _run_opts(t, base_opts, config_dir, sessions)
        try:
            result = run_ab(
                dataclasses.replace(a_opts, iterations=n, warmup=w),
                dataclasses.replace(b_opts, iterations=n, warmup=w),
                ab_settings, output=sessions, run=run, clock=clock,
            )  # fmt: skip
        except (RunError, UsageError) as exc:
            # one finalist that cannot run ends its own trial, not the search
            t.stage = f"not accepted: its A/B failed ({exc})"
            say(f"  {t.stage}")
            continue
        t.ab = {
            "ab_id": result["ab_id"],
            "against": best.candidate.name,
            "verdict": result["verdict"],
            "stopped": result["stopped_reason"],
            "effect": result["effect"],
            "slo": _slo_check(result, settings),
        }
        slo_ok = t.ab["slo"] is None or t.ab["slo"]["met"]
        if result["verdict"] == IMPROVEMENT and slo_ok:
            t.accepted, t.stage = True, "accepted: A/B improvement"
            best = t
        else:
            t.stage = f"not accepted: A/B {result['verdict']}" + ("" if slo_ok else ", SLO missed")
        say(f"  {t.stage}")
    for t in trials:
        if t.stage == "pending":
            t.stage = "reference" if t is reference else "screened, not a finalist"
    out = _result(tune_id, base_opts, base, settings, trials, best, reference, notes, t0, clock)
    out["path"] = str(folder)
    atomic_write_json(folder / "tune.json", out)
    if out["backend_entry"] is not None:
        text = yaml.safe_dump(
            {"backends": {out["entry_name"]: out["backend_entry"]}}, sort_keys=False
        )
        atomic_write_bytes(folder / "backends.yaml", text.encode())
    return out


def _usable_cores() -> int:
    """CPUs this process may run on (its affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _batch_is_open(runner: Any, opts: RunOptions, sessions: Path) -> bool:
    """Whether ``--batch`` applies to the model (a symbolic leading dimension): the runner's
    own planning says so, refusing a batch that has no effect."""
    try:
        runner.plan(dataclasses.replace(opts, batch=2, output=sessions))
    except UsageError:
        return False
    return True


def _write_backends(config_dir: Path, entries: Sequence[BackendEntry], user: Path | None) -> None:
    """A config folder holding every candidate's backend entry, and the user's models.yaml
    (``user``, else ./configs as the registry reads it) with relative model paths made
    absolute, so that the user's model names resolve for the candidates as for the user."""
    config_dir.mkdir(parents=True, exist_ok=True)
    source = user if user is not None else Path.cwd() / "configs"
    models_file = source / "models.yaml"
    if models_file.is_file():
        doc = yaml.safe_load(models_file.read_text()) or {}
        for entry in (doc.get("models") or {}).values() if isinstance(doc, dict) else ():
            path = entry.get("path") if isinstance(entry, dict) else None
            if isinstance(path, str) and not Path(path).expanduser().is_absolute():
                entry["path"] = str((source / path).resolve())
        atomic_write_bytes(config_dir / "models.yaml", yaml.safe_dump(doc).encode())
    doc = {"backends": {e.name: entry_yaml(e) for e in entries}}
    atomic_write_bytes(config_dir / "backends.yaml", yaml.safe_dump(doc).encode())


def _run_opts(t: _Trial, base: RunOptions, config_dir: Path, sessions: Path) -> RunOptions:
    return dataclasses.replace(
        base,
        model=t.candidate.model_path or base.model,
        backend=t.entry.name,
        batch=t.candidate.batch if t.candidate.batch is not None else base.batch,
        config_dir=config_dir,
        output=sessions,
        profile=False,
        auto_calibrate=False,
        tag=f"aaco tune: {t.candidate.name}",
        threads=None,
    )


def _screen(
    t: _Trial, base: RunOptions, config_dir: Path, sessions: Path, iterations: int, rung: int,
    settings: TuneSettings, run: Callable[[RunOptions], Session],
) -> None:  # fmt: skip
    opts = dataclasses.replace(
        _run_opts(t, base, config_dir, sessions), iterations=iterations,
        warmup=max(2, iterations // 5),
    )  # fmt: skip
    # a run whose measurement was not valid (other processes held the CPUs) is redone once,
    # as the A/B redoes a pair: a contended reference would promote a slower candidate
    s = run(opts)
    invalid = run_invalid_reason(s) if s.status == "completed" else None
    if invalid is not None:
        s = run(opts)
        invalid = run_invalid_reason(s) if s.status == "completed" else None
    row: dict[str, Any] = {"rung": rung, "iterations": iterations, "session_id": s.session_id}
    if invalid is not None:
        row["invalid"] = invalid
    if s.status != "completed":
        row["error"] = (s.meta.get("error") or {}).get("message") or s.status
        row["score_ms"] = None
        t.screening.append(row)
        return
    try:
        x = measured_latencies(s)
    except BundleError:
        row["score_ms"] = None
        t.screening.append(row)
        return
    batch = _batch(s)
    per_item = settings.objective == "throughput" and batch
    row["p50_ms"] = float(np.median(x))
    row["score_ms"] = row["p50_ms"] / batch if per_item and batch else row["p50_ms"]
    if settings.slo is not None:
        row[f"{settings.slo[0]}_ms"] = float(np.quantile(x, QUANTILES[settings.slo[0]]))
    row["label"] = "screening (ranks candidates; not a result)"
    t.screening.append(row)


def _batch(s: Session) -> int | None:
    b = (s.meta.get("run") or {}).get("batch")
    return int(b) if isinstance(b, int) and b > 0 else None


def _meets_slo(t: _Trial, settings: TuneSettings) -> bool:
    if settings.slo is None or not t.screening:
        return True
    q, ms = settings.slo
    v = t.screening[-1].get(f"{q}_ms")
    if v is not None and v > ms:
        t.stage = f"excluded: screening {q} {v:.3g} ms above the SLO {ms:g} ms"
        return False
    return True


def _slo_check(result: dict[str, Any], settings: TuneSettings) -> dict[str, Any] | None:
    """The SLO on the B side's runs of the A/B, all iterations pooled."""
    if settings.slo is None:
        return None
    q, ms = settings.slo
    values: list[float] = []
    for p in result["pairs"]:
        if p["valid"]:
            try:
                values += measured_latencies(Session.load(Path(p["b"]["path"]))).tolist()
            except BundleError:
                continue
    if not values:
        return {"quantile": q, "limit_ms": ms, "value_ms": None, "met": False}
    v = float(np.quantile(values, QUANTILES[q]))
    return {"quantile": q, "limit_ms": ms, "value_ms": v, "met": v <= ms}


def _result(
    tune_id: str, base_opts: RunOptions, base: BackendEntry, settings: TuneSettings,
    trials: list[_Trial], best: _Trial, reference: _Trial, notes: list[str], t0: float,
    clock: Callable[[], float],
) -> dict[str, Any]:  # fmt: skip
    found = best is not reference
    gain = None
    if found and best.ab and best.ab["effect"]:
        # the gain compounds over the chain of accepted candidates; the interval stated is
        # the last A/B's (best against the one it replaced)
        eff = best.ab["effect"]
        gain = {
            "ratio_vs_previous_best": eff["ratio"],
            "delta_pct": eff["delta_pct"],
            "ci_pct": eff["ci_pct"],
            "level": eff["level"],
            "against": best.ab["against"],
            "ab_id": best.ab["ab_id"],
        }
    name = f"{base.name}-tuned"
    return {
        "tune_format_version": 1,
        "tune_id": tune_id,
        "aaco_version": __version__,
        "created_utc": utc_now_iso(),
        "wall_s": clock() - t0,
        "model": base_opts.model,
        "backend": base.name,
        "objective": settings.objective,
        "slo": None
        if settings.slo is None
        else {"quantile": settings.slo[0], "ms": settings.slo[1]},
        "budget_s": settings.budget_s,
        "found": found,
        "summary": (
            f"{best.candidate.name} beats the default: {gain['delta_pct']:+.1f} % "
            f"[{gain['ci_pct'][0]:+.1f}, {gain['ci_pct'][1]:+.1f}] per "
            f"{'item' if settings.objective == 'throughput' else 'inference'} in its A/B"
            if found and gain
            else "no candidate beats the default in an interleaved A/B"
        ),
        "best": best.to_json() if found else None,
        "gain": gain,
        "entry_name": name if found else None,
        "backend_entry": entry_yaml(dataclasses.replace(best.entry, name=name)) if found else None,
        "model_variant": best.candidate.model_path if found else None,
        "trials": [t.to_json() for t in trials],
        "rejected": [t.candidate.name for t in trials if t.stage == "rejected: verification"],
        "notes": notes,
    }


def apply_entry(result: dict[str, Any], config_dir: Path) -> tuple[Path, Path | None]:
    """Write the tuned entry into ``config_dir/backends.yaml`` (other entries kept); the
    previous file is kept beside it as ``backends.yaml.bak-<time>``. Returns (file, backup)."""
    if not result.get("found"):
        raise UsageError("nothing to apply: no candidate beat the default")
    config_dir.mkdir(parents=True, exist_ok=True)
    path = config_dir / "backends.yaml"
    backup = None
    doc: dict[str, Any] = {"backends": {}}
    if path.is_file():
        loaded = yaml.safe_load(path.read_text()) or {}
        if not isinstance(loaded, dict) or not isinstance(loaded.get("backends", {}), dict):
            raise UsageError(f"{path}: expected a mapping under 'backends:'; not changed")
        doc = loaded
        doc.setdefault("backends", {})
        backup = path.with_name(f"backends.yaml.bak-{time.strftime('%Y%m%d_%H%M%S')}")
        shutil.copy2(path, backup)
    doc["backends"][result["entry_name"]] = result["backend_entry"]
    atomic_write_bytes(path, yaml.safe_dump(doc, sort_keys=False).encode())
    return path, backup
