"""The measurement capsule: where the worker runs (``--isolate``: pinned CPUs and thread counts
to match) and what rebuilds a run (``runtime/capsule.json``, read by ``aaco rerun``).

:func:`plan_capsule` turns the options of ``aaco run`` into a :class:`CapsulePlan` before
anything starts: the CPUs (``--cpus``, else the CPUs the kernel isolates, else the least
busy over a short ``/proc/stat`` sample, CPU 0's core left to the system when there are more
than two CPUs), the threads (``--threads``, else one per pinned CPU) and whether the noise
sentinel runs. :func:`capsule_document` is what ``runtime/capsule.json`` holds, and
:func:`prepare_rerun` reads it back into the options of a new run.

>>> rerun = prepare_rerun(Path("sessions/latest"), output=Path("sessions"))  # doctest: +SKIP
>>> run_model(rerun.options)                                                 # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aaco import __version__
from aaco.analysis.graph import file_sha256
from aaco.collectors.machine_state import (
    CpuSample,
    Machine,
    format_cpu_list,
    parse_cpu_list,
    sample_cpus,
)
from aaco.errors import BundleError, InputError, UsageError
from aaco.runners.base import RunOptions
from aaco.session.bundle import read_json
from aaco.session.paths import CAPSULE_FILE, MODEL_META_FILE, SESSION_FILE

__all__ = [
    "CAPSULE_FILE",
    "CAPSULE_FORMAT",
    "THREAD_ENV_VARS",
    "CapsulePlan",
    "Rerun",
    "capsule_document",
    "choose_cpus",
    "options_from_json",
    "options_to_json",
    "parse_cpus",
    "pick_cpus",
    "plan_capsule",
    "prepare_rerun",
]

#: where the capsule lies in a bundle
# Format history of runtime/capsule.json:
#   1 -- first version: model, options, seeds, isolation, environment, command_line.
CAPSULE_FORMAT = 1
#: the thread-count variables set in the worker's environment with --isolate (OpenMP, MKL,
#: OpenBLAS: numpy's BLAS and PyTorch's CPU kernels read them; ONNX Runtime takes its
#: intra-op count from the session options)
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: how long the CPU sample that picks the least busy CPUs lasts
SAMPLE_S = 0.2
#: a CPU busier than this during the sample is not picked when quieter ones remain
QUIET = 0.1

# RunOptions fields that are not JSON values as they are: how to read them back
_FROM_JSON: dict[str, Callable[[Any], Any]] = {
    "output": Path,
    "config_dir": Path,
    "int_range": tuple,
    "collectors": tuple,
    "cpus": tuple,
}
# not part of the capsule: argv is the command line of the run that wrote it
_NOT_SAVED = ("argv",)


# -- CPUs ---------------------------------------------------------------------------------------


def parse_cpus(text: str) -> tuple[int, ...]:
    """``--cpus`` (``1``, ``0-1,3``) as CPU numbers; a UsageError when malformed or empty."""
    try:
        cpus = parse_cpu_list(text)
    except ValueError as exc:
        raise UsageError(f"--cpus: {exc} (e.g. --cpus 1 or --cpus 0-1,3)") from None
    if not cpus:
        raise UsageError("--cpus: no CPU given (e.g. --cpus 1 or --cpus 0-1,3)")
    return cpus


def _allowed_cpus() -> set[int]:
    """The CPUs this process may run on (the worker may be pinned to any of them)."""
    return set(os.sched_getaffinity(0))


def choose_cpus(
    allowed: Sequence[int],
    sample: CpuSample | None,
    isolated: Sequence[int] = (),
    siblings: Callable[[int], Sequence[int]] = lambda c: (c,),
) -> tuple[int, ...]:
    """The CPUs ``--isolate`` pins the worker to when ``--cpus`` is not given.

    * CPUs the kernel isolates (``isolcpus=``), all of them: what they were isolated for;
    * else, with two CPUs or fewer, the one least busy during ``sample`` (ties: the highest
      number, since CPU 0 takes most interrupts);
    * else every core but CPU 0's (left to the system and to aaco's own process), one
      logical CPU per core (an SMT sibling would share the core with the model's threads),
      dropping those busier than :data:`QUIET` during ``sample`` while a quieter one remains.
    """
    if isolated:
        return tuple(sorted(isolated))

    def busy(cpu: int) -> float:
        b = sample.busy.get(cpu) if sample is not None else None
        return b if b is not None else 0.0

    ordered = sorted(allowed, key=lambda c: (busy(c), -c))
    if len(ordered) <= 2:
        return (ordered[0],)
    taken: set[int] = set(siblings(0)) | {0}
    picks: list[int] = []
    for cpu in ordered:
        if cpu in taken:
            continue
        picks.append(cpu)
        taken.update(siblings(cpu))
    if not picks:  # every allowed CPU shares CPU 0's core
        picks = [ordered[0]]
    quiet = [c for c in picks if busy(c) <= QUIET]
    return tuple(sorted(quiet or picks[:1]))


@dataclass(frozen=True)
class CapsulePlan:
    """What :func:`plan_capsule` resolved: the options as asked (``asked``, saved in
    ``capsule.json``) and as the run uses them (``options``: the thread count resolved),
    the pinned CPUs and how they were chosen, whether the sentinel runs, and the CPU sample
    taken to choose them (also what the machine-state checks read)."""

    asked: RunOptions
    options: RunOptions
    cpus: tuple[int, ...] | None = None
    cpus_source: str | None = None  # --cpus | isolcpus | least busy
    sentinel: bool = False
    sample: CpuSample | None = None

    @property
    def isolated(self) -> bool:
        return self.cpus is not None

    def worker_env(self) -> dict[str, str]:
        """The worker's thread-count variables (pinned runs only)."""
        threads = self.options.threads
        if not self.isolated or not threads:
            return {}
        return dict.fromkeys(THREAD_ENV_VARS, str(threads))

    def record(self) -> dict[str, Any]:
        """``session.json``'s ``capsule`` as known before the worker starts."""
        return {
            "isolated": self.isolated,
            "cpus": list(self.cpus) if self.cpus else None,
            "cpus_source": self.cpus_source,
            "threads": self.options.threads,
            "threads_source": (
                None
                if self.options.threads is None
                else "--threads"
                if self.asked.threads is not None
                else "pinned CPUs"
            ),
            "thread_env": self.worker_env(),
            "cpu_sample": self.sample.to_json() if self.sample is not None else None,
        }


def pick_cpus(
    asked: Sequence[int] | None,
    root: Path = Path("/"),
    *,
    sample_s: float = SAMPLE_S,
    sleep: Callable[[float], None] = time.sleep,
    allowed: Collection[int] | None = None,
) -> tuple[tuple[int, ...], str, CpuSample]:
    """The CPUs to pin to (``asked``, checked, else :func:`choose_cpus`'s), how they were
    chosen (``--cpus``, ``isolcpus`` or ``least busy``) and the CPU sample taken; a
    UsageError when an asked CPU is not available or the platform cannot pin.
    ``allowed``: the CPUs this process may use (default: its affinity)."""
    if not hasattr(os, "sched_setaffinity"):
        raise UsageError("--isolate pins the worker with sched_setaffinity, which needs Linux")
    machine = Machine(root)
    online = set(machine.online_cpus())
    isolated = set(machine.isolated_cpus()) & online
    allowed = set(allowed) if allowed is not None else _allowed_cpus()
    sample = sample_cpus(root, sample_s, sleep=sleep)
    if asked:
        cpus = tuple(sorted(set(asked)))
        usable = allowed | isolated
        missing = [c for c in cpus if c not in usable]
        if missing:
            raise UsageError(
                f"--cpus: CPU {format_cpu_list(missing)} is not available to this process "
                f"(available: {format_cpu_list(usable)})"
            )
        return cpus, "--cpus", sample
    cpus = choose_cpus(sorted(allowed), sample, sorted(isolated), machine.siblings)
    return cpus, "isolcpus" if isolated else "least busy", sample


def plan_capsule(
    opts: RunOptions,
    root: Path = Path("/"),
    *,
    sample_s: float = SAMPLE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> CapsulePlan:
    """Resolve ``--isolate``/``--cpus``/``--sentinel`` (a UsageError, before anything
    starts, when the CPUs cannot be used). Without --isolate or --cpus: the options as
    they are, no sample."""
    sentinel = opts.sentinel if opts.sentinel is not None else bool(opts.isolate or opts.cpus)
    if not (opts.isolate or opts.cpus):
        return CapsulePlan(opts, opts, sentinel=sentinel)
    cpus, source, sample = pick_cpus(opts.cpus, root, sample_s=sample_s, sleep=sleep)
    threads = opts.threads if opts.threads is not None else len(cpus)
    return CapsulePlan(
        asked=opts,
        options=dataclasses.replace(opts, threads=threads),
        cpus=cpus,
        cpus_source=source,
        sentinel=sentinel,
        sample=sample,
    )


# -- capsule.json -------------------------------------------------------------------------------


def options_to_json(opts: RunOptions) -> dict[str, Any]:
    """The fields of ``opts`` as JSON values (paths as strings, tuples as lists), argv
    left out."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(opts):
        if f.name in _NOT_SAVED:
            continue
        value = getattr(opts, f.name)
        if isinstance(value, Path):
            value = str(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)


#: what each saved option may hold in JSON (None is allowed where the field allows it)
_OPTION_CHECKS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "model": ("a string", lambda v: isinstance(v, str) and bool(v)),
    "backend": ("a string", lambda v: isinstance(v, str)),
    "batch": ("an integer", _is_int),
    "shapes": (
        "an object of integer lists",
        lambda v: (
            isinstance(v, dict)
            and all(isinstance(x, list) and all(_is_int(i) for i in x) for x in v.values())
        ),
    ),
    "values": (
        "an object of strings",
        lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
    ),
    "warmup": ("an integer", _is_int),
    "iterations": ("an integer", _is_int),
    "duration_s": ("a number", _is_num),
    "threads": ("an integer", _is_int),
    "tag": ("a string", lambda v: isinstance(v, str)),
    "output": ("a path", lambda v: isinstance(v, str)),
    "profile": ("true or false", lambda v: isinstance(v, bool)),
    "profile_iterations": ("an integer", _is_int),
    "telemetry": ("true or false", lambda v: isinstance(v, bool)),
    "sample_hz": ("a number", _is_num),
    "timeout_s": ("a number", _is_num),
    "seed": ("an integer", _is_int),
    "int_range": (
        "two integers",
        lambda v: isinstance(v, list) and len(v) == 2 and all(_is_int(i) for i in v),
    ),
    "config_dir": ("a path", lambda v: isinstance(v, str)),
    "framework": ("a string", lambda v: isinstance(v, str)),
    "device": ("a string", lambda v: isinstance(v, str)),
    "compile": ("true or false", lambda v: isinstance(v, bool)),
    "profile_mode": ("a string", lambda v: isinstance(v, str)),
    "preprocess": ("a string", lambda v: isinstance(v, str)),
    "auto_calibrate": ("true or false", lambda v: isinstance(v, bool)),
    "tracer": ("a string", lambda v: isinstance(v, str)),
    "collectors": (
        "a list of strings",
        lambda v: isinstance(v, list) and all(isinstance(i, str) for i in v),
    ),
    "isolate": ("true or false", lambda v: isinstance(v, bool)),
    "cpus": ("a list of integers", lambda v: isinstance(v, list) and all(_is_int(i) for i in v)),
    "sentinel": ("true or false", lambda v: isinstance(v, bool)),
    "rerun_of": ("a string", lambda v: isinstance(v, str)),
}
_NOT_NULL = {"model", "output", "profile", "profile_iterations", "telemetry", "sample_hz",
             "seed", "framework", "compile", "profile_mode", "isolate"}  # fmt: skip


def _option_problem(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be the saved option ``key`` (a hand-edited capsule), or None."""
    if value is None:
        return "must not be null" if key in _NOT_NULL else None
    check = _OPTION_CHECKS.get(key)
    if check is None or check[1](value):
        return None
    return f"expected {check[0]}, got {json.dumps(value)[:40]}"


def options_from_json(d: Mapping[str, Any]) -> tuple[RunOptions, list[str]]:
    """RunOptions from :func:`options_to_json`'s output, and the names of the keys this
    AACO does not know (a capsule from a newer one), which are left out."""
    if not isinstance(d, Mapping):
        raise BundleError(f"{CAPSULE_FILE}: options is not an object")
    known = {f.name for f in dataclasses.fields(RunOptions)} - set(_NOT_SAVED)
    kw = {}
    for k, v in d.items():
        if k not in known:
            continue
        why = _option_problem(k, v)
        if why is not None:
            raise BundleError(f"{CAPSULE_FILE}: options.{k}: {why}")
        kw[k] = _FROM_JSON[k](v) if k in _FROM_JSON and v is not None else v
    if "model" not in kw:
        raise BundleError(f"{CAPSULE_FILE}: no model in its options")
    return RunOptions(**kw), sorted(set(d) - known)


def _model_record(bundle: Path, model: Mapping[str, Any]) -> dict[str, Any]:
    """The model as the run resolved it, with the sha256 of its file when it is one
    (taken from model_meta.json when the runner already hashed it)."""
    path = model.get("path")
    record: dict[str, Any] = {
        "name": model.get("name"),
        "path": path,
        "source": model.get("source"),
        "sha256": None,
        "file_bytes": None,
    }
    if not path or not Path(path).is_file():
        return record
    meta_file = bundle / MODEL_META_FILE
    meta = read_json(meta_file) if meta_file.is_file() else {}
    record["file_bytes"] = Path(path).stat().st_size
    if meta.get("path") == path and isinstance(meta.get("sha256"), str):
        record["sha256"] = meta["sha256"]
    else:
        record["sha256"] = file_sha256(Path(path))
    return record


def capsule_document(
    bundle: Path, capsule: CapsulePlan, meta: Mapping[str, Any], env: Mapping[str, Any] | None
) -> dict[str, Any]:
    """``runtime/capsule.json``: what rebuilds this run (the options as asked), the model
    it measured with its hash, the seeds, the isolation and the environment fingerprint."""
    asked = capsule.asked
    return {
        "capsule_format": CAPSULE_FORMAT,
        "aaco_version": __version__,
        "session_id": meta.get("session_id"),
        "created_utc": meta.get("created_utc"),
        "model": _model_record(bundle, meta.get("model") or {}),
        "options": options_to_json(asked),
        "seeds": {"inputs": asked.seed},
        "isolation": {
            "isolate": capsule.isolated,
            "cpus_asked": list(asked.cpus) if asked.cpus else None,
            "cpus": list(capsule.cpus) if capsule.cpus else None,
            "threads": capsule.options.threads,
            "sentinel": capsule.sentinel,
        },
        "environment": {
            "fingerprint": (env or {}).get("fingerprint"),
            "fingerprint_fields": (env or {}).get("fingerprint_fields"),
        },
        "command_line": meta.get("command_line"),
    }


# -- aaco rerun ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rerun:
    """A recorded run rebuilt: the ``options`` to pass to :func:`aaco.pipeline.run_model`,
    and one-line ``warnings`` for the user (the environment changed, ...)."""

    options: RunOptions
    warnings: tuple[str, ...]
    session_id: str


def _load(bundle: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(session.json, capsule.json) of ``bundle``; a UsageError for a bundle written
    before capsules."""
    session_file = bundle / SESSION_FILE
    if not session_file.is_file():
        raise BundleError(f"{bundle}: not a session bundle (no {SESSION_FILE})")
    meta = read_json(session_file)
    capsule_file = bundle / CAPSULE_FILE
    kind = meta.get("kind")
    if kind is not None and not capsule_file.is_file():
        # an import or a serving bundle: no aaco run to repeat
        raise UsageError(
            f"{bundle} was not written by aaco run (session kind {kind!r}): aaco rerun "
            "repeats aaco run sessions only"
        )
    if not capsule_file.is_file():
        argv = meta.get("command_line") or []
        command = " ".join(str(a) for a in argv) if isinstance(argv, list) else str(argv)
        raise UsageError(
            f"{bundle} was recorded before capsules (aaco {meta.get('aaco_version', '?')}, "
            f"no {CAPSULE_FILE}); rerun it with the command line in session.json: "
            f"{command or '(none recorded)'}"
        )
    capsule = read_json(capsule_file)
    if not isinstance(capsule, dict) or capsule.get("capsule_format") != CAPSULE_FORMAT:
        raise BundleError(
            f"{capsule_file}: capsule format {capsule.get('capsule_format')!r} is not "
            f"supported (this AACO reads {CAPSULE_FORMAT})"
            if isinstance(capsule, dict)
            else f"{capsule_file}: not a JSON object"
        )
    return meta, capsule


def _check_model(model: Mapping[str, Any], session_id: str) -> list[str]:
    """The recorded model file still there with the same hash (an InputError otherwise);
    warnings for what cannot be checked."""
    path, sha = model.get("path"), model.get("sha256")
    if not path:
        return []
    if not sha:
        return [f"the model {path} was not a file the capsule could hash; it runs as it is now"]
    p = Path(path)
    if not p.is_file():
        if model.get("source") == "builtin":
            return [f"the built-in model {model.get('name')} is built again ({path} is gone)"]
        raise InputError(f"model file not found: {path} (measured by session {session_id})")
    now = file_sha256(p)
    if now != sha:
        raise InputError(
            f"model file changed since session {session_id}: {path} has sha256 {now[:12]}…, "
            f"the session measured {sha[:12]}…"
        )
    return []


def _environment_warning(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> str | None:
    """One line when the environment's fingerprint differs from the recorded one."""
    was, is_ = recorded.get("fingerprint"), now.get("fingerprint")
    if not was or was == is_:
        return None
    old = recorded.get("fingerprint_fields")
    new = now.get("fingerprint_fields")
    old = old if isinstance(old, dict) else {}
    new = new if isinstance(new, dict) else {}
    changed = [k for k in sorted(set(old) | set(new), key=str) if old.get(k) != new.get(k)]
    what = (
        ", ".join(f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in changed[:3])
        + (f" (+{len(changed) - 3} more)" if len(changed) > 3 else "")
        if changed
        else "fields not recorded"
    )
    return (
        f"the environment differs from the recorded session's (fingerprint {was} -> {is_}: "
        f"{what}); the rerun measures this one"
    )


def prepare_rerun(
    bundle: Path,
    *,
    output: Path,
    tag: str | None = None,
    argv: Sequence[str] | None = None,
    environment: Mapping[str, Any] | None = None,
) -> Rerun:
    """The options that repeat the run recorded in ``bundle``, into the sessions root
    ``output``, tagged ``tag`` (default ``rerun-of:<session_id>``).

    Raises a UsageError for a bundle without a capsule, an InputError when the model file
    is gone or changed. ``environment`` is this machine's (a captured env.json; default:
    captured now) and is compared with the recorded fingerprint.
    """
    meta, capsule = _load(bundle)
    session_id = str(capsule.get("session_id") or meta.get("session_id"))
    for key in ("options", "model", "environment"):
        if capsule.get(key) is not None and not isinstance(capsule.get(key), dict):
            raise BundleError(f"{CAPSULE_FILE}: {key} is not an object")
    options, unknown = options_from_json(capsule.get("options") or {})
    model = capsule.get("model") or {}
    warnings = _check_model(model, session_id)
    if model.get("source") == "file" and model.get("path"):
        # the path as resolved: a relative --model was relative to another directory
        options = dataclasses.replace(options, model=str(model["path"]))
    if unknown:
        warnings.append(f"options of a newer AACO left out: {', '.join(unknown)}")
    if environment is None:
        from aaco.collectors.environment import capture_environment  # lazy: psutil, tools

        environment = capture_environment([], [])
    line = _environment_warning(capsule.get("environment") or {}, environment)
    if line is not None:
        warnings.append(line)
    options = dataclasses.replace(
        options,
        output=output,
        tag=tag if tag is not None else f"rerun-of:{session_id}",
        argv=list(argv) if argv is not None else None,
        rerun_of=session_id,
    )
    return Rerun(options, tuple(warnings), session_id)
