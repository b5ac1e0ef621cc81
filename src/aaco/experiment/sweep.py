"""``aaco sweep``: a matrix of runs (models × backends × batch × threads × any option of
``aaco run``, or LLM load points of ``aaco llm bench``), run one at a time on this machine
or fanned over a Ray cluster, into one sessions root (and, optionally, a lake).

Every point is the normal command (``python -m aaco run ...``) in a subprocess of its own,
writing its bundle into a staging root of its own; the bundle is then moved into the
sessions root, tagged ``sweep:<name>:<point id>``. On Ray each point is one task (its
``num_cpus`` / ``num_gpus``; a point of several GPUs reserves them in a placement group),
which returns its bundle as a tar archive, so workers on other machines need no shared
disk. By default a measurement has its node to itself (never two at once on one machine);
``share_nodes`` lets Ray pack points by their resources alone.

The sweep's record is ``<root>/sweeps/<name>/sweep.json`` (rewritten after every point, so
a killed sweep keeps what it finished) and ``results.parquet`` (one row per point: its
options, status, attempts, session and headline figures); ``resume`` skips the points
already completed. A point is known by a hash of its options, so editing the file keeps the
finished points of the matrix that stayed.

Example sweep file::

    name: mlp-threads
    command: run                      # or "llm bench"
    options: {iterations: 100, warmup: 10, no-profile: true}
    matrix:
      model: [a.onnx, b.onnx]
      batch: [1, 8]
      threads: [1, 2]
    retries: 1
    timeout_s: 900
    resources: {num_cpus: 1, num_gpus: 0}
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from aaco import __version__
from aaco.errors import BundleError, InputError, UsageError
from aaco.runners.harness import one_line
from aaco.session.bundle import (
    Session,
    atomic_write_json,
    iter_sessions,
    update_latest,
    utc_now_iso,
)
from aaco.session.catalog import session_row

__all__ = [
    "COMMANDS",
    "RESERVED",
    "Point",
    "SweepSpec",
    "load_spec",
    "run_sweep",
]

#: the commands a sweep runs, and the words of each after ``aaco``
COMMANDS: dict[str, tuple[str, ...]] = {
    "run": ("run",),
    "llm bench": ("llm", "bench"),
    "llm run": ("llm", "run"),
}
#: options the sweep sets itself
RESERVED = ("output", "tag", "report", "repeat")
SWEEP_FILE = "sweep.json"
RESULTS_FILE = "results.parquet"
COMPLETED, FAILED, PENDING = "completed", "failed", "pending"
#: the characters of stderr kept per failed attempt
_STDERR_TAIL = 2000
_KEYS = {"name", "command", "options", "matrix", "points", "retries", "timeout_s", "resources"}


@dataclass(frozen=True)
class Point:
    """One point of the sweep: its options (the matrix's values over the shared ones)."""

    index: int
    options: dict[str, Any]

    @property
    def id(self) -> str:
        """``p<index>-<hash of the options>``: a resumed sweep finds a point by its hash."""
        return f"p{self.index:03d}-{self.key}"

    @property
    def key(self) -> str:
        blob = json.dumps(self.options, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep file."""

    name: str
    command: str
    options: dict[str, Any]
    matrix: dict[str, list[Any]]
    extra_points: list[dict[str, Any]]
    retries: int = 0
    timeout_s: float = 3600.0
    num_cpus: float = 1.0
    num_gpus: float = 0.0

    def points(self) -> list[Point]:
        """The matrix's product (first key slowest), then the file's extra points."""
        keys = list(self.matrix)
        combos = [dict(zip(keys, values, strict=True)) for values in itertools.product(
            *(self.matrix[k] for k in keys))]  # fmt: skip
        if not keys:
            combos = [] if self.extra_points else [{}]
        combos += self.extra_points
        return [Point(i, {**self.options, **c}) for i, c in enumerate(combos)]


def _option_name(key: Any, where: str) -> str:
    if not isinstance(key, str) or not key or key.startswith("-"):
        raise InputError(f"{where}: option {key!r} must be an option's long name (no dashes)")
    name = key.replace("_", "-")
    if name in RESERVED:
        raise InputError(f"{where}: {name} is set by the sweep; leave it out")
    return name


def _options(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"{where} must be a mapping of option -> value")
    return {_option_name(k, where): v for k, v in value.items()}


def load_spec(path: Path, name: str | None = None) -> SweepSpec:
    """The sweep file at ``path``; InputError (one line) when it is not one."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such sweep file") from None
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: not a readable YAML sweep file ({one_line(exc)})") from None
    if not isinstance(data, Mapping):
        raise InputError(f"{path}: a sweep file is a mapping (name, command, options, matrix)")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise InputError(f"{path}: unknown key(s) {unknown}; valid: {sorted(_KEYS)}")
    command = str(data.get("command") or "run")
    if command not in COMMANDS:
        raise InputError(f"{path}: command {command!r} is not one of {sorted(COMMANDS)}")
    matrix_raw = data.get("matrix") or {}
    if not isinstance(matrix_raw, Mapping):
        raise InputError(f"{path}: matrix must be a mapping of option -> list of values")
    matrix: dict[str, list[Any]] = {}
    for k, v in matrix_raw.items():
        values = v if isinstance(v, list) else [v]
        if not values:
            raise InputError(f"{path}: matrix.{k} is an empty list")
        matrix[_option_name(k, f"{path}: matrix")] = values
    extra = data.get("points") or []
    if not isinstance(extra, list):
        raise InputError(f"{path}: points must be a list of option mappings")
    extra_points = [_options(p, f"{path}: points[{i}]") for i, p in enumerate(extra)]
    resources = data.get("resources") or {}
    if not isinstance(resources, Mapping) or set(resources) - {"num_cpus", "num_gpus"}:
        raise InputError(f"{path}: resources takes num_cpus and num_gpus")
    sweep_name = name or str(data.get("name") or path.stem)
    if not sweep_name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise InputError(f"{path}: sweep name {sweep_name!r}: letters, digits, - _ . only")
    try:
        spec = SweepSpec(
            name=sweep_name,
            command=command,
            options=_options(data.get("options"), f"{path}: options"),
            matrix=matrix,
            extra_points=extra_points,
            retries=int(data.get("retries", 0)),
            timeout_s=float(data.get("timeout_s", 3600.0)),
            num_cpus=float(resources.get("num_cpus", 1)),
            num_gpus=float(resources.get("num_gpus", 0)),
        )
    except (TypeError, ValueError) as exc:
        raise InputError(f"{path}: {exc}") from None
    if spec.retries < 0 or spec.timeout_s <= 0 or spec.num_cpus < 0 or spec.num_gpus < 0:
        raise InputError(f"{path}: retries, timeout_s and resources must not be negative")
    return spec


def point_argv(options: Mapping[str, Any]) -> list[str]:
    """The command-line options of a point: ``--key value``; true: ``--key``; false:
    ``--no-key``; a list: the option repeated; null: left out."""
    argv: list[str] = []
    for key, value in options.items():
        if value is None:
            continue
        if value is True:
            argv.append(f"--{key}")
        elif value is False:
            argv.append(f"--no-{key}")
        elif isinstance(value, list):
            for v in value:
                argv += [f"--{key}", str(v)]
        else:
            argv += [f"--{key}", str(value)]
    return argv


# -- one attempt, wherever it runs ----------------------------------------------------------


def run_point(
    command: Sequence[str], argv: Sequence[str], tag: str, timeout_s: float, staging: Path
) -> dict[str, Any]:
    """Run one point (``python -m aaco <command> <argv>``) into the empty root ``staging``;
    its exit code, the tail of its stderr, its bundle (the one folder it published) and
    where it ran. Runs in the sweep's process, or in a Ray task on any node."""
    staging.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "aaco", *command, *argv, "--tag", tag, "--output", str(staging)]
    cmd += ["--report", "none"]
    started = time.time()
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr: str | None
    timed_out = False
    try:
        _, stderr = proc.communicate(timeout=timeout_s)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        # SIGTERM: aaco unwinds as on Ctrl-C, kills its worker (a process group of its
        # own, which a SIGKILL of the parent would leave running into the next point) and
        # publishes the bundle as failed
        _, stderr = _stop(proc)
        rc = -1
        timed_out = True
    except BaseException:  # Ctrl-C or SIGTERM of the sweep: the point stops with it
        _stop(proc)
        raise
    bundles = list(iter_sessions(staging))
    return {
        "rc": rc,
        "stderr": (stderr or "")[-_STDERR_TAIL:],
        "timed_out": timed_out,
        "bundle": str(bundles[-1]) if bundles else None,
        "host": socket.gethostname(),
        "seconds": time.time() - started,
    }


#: seconds an ``aaco`` command is given to unwind after SIGTERM before it is killed
STOP_GRACE_S = 30.0


def _stop(proc: subprocess.Popen[str]) -> tuple[str | None, str | None]:
    """Stop a point's command: SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`."""
    proc.terminate()
    try:
        return proc.communicate(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def _error_line(stderr: str, rc: int) -> str:
    """The one-line error an ``aaco`` command ends with, else the last line of stderr."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("aaco: error:")]
    if errors:
        return errors[-1].removeprefix("aaco: error:").strip()
    return lines[-1] if lines else f"exit code {rc}"


def _tar(bundle: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(bundle, arcname=bundle.name)
    return buf.getvalue()


def _untar(data: bytes, dest: Path) -> Path:
    """Unpack a bundle archive (one folder, no links or paths leaving it) under ``dest``."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = tar.getmembers()
        tops = {Path(m.name).parts[0] for m in members if m.name}
        if len(tops) != 1 or any(
            m.issym() or m.islnk() or Path(m.name).is_absolute() or ".." in Path(m.name).parts
            for m in members
        ):
            raise BundleError("a sweep task returned an archive that is not one bundle")
        if hasattr(tarfile, "data_filter"):  # Python 3.10.12+, 3.11.4+
            tar.extractall(dest, filter="data")
        else:  # the members were checked above: one folder, no links, nothing outside it
            tar.extractall(dest)
    return dest / tops.pop()


def ray_task(
    command: Sequence[str], argv: Sequence[str], tag: str, timeout_s: float
) -> dict[str, Any]:
    """The body of a Ray task: :func:`run_point` in a temporary root on the worker's node,
    the bundle returned as a tar archive (no shared disk needed), with the GPUs Ray gave."""
    import ray

    with tempfile.TemporaryDirectory(prefix="aaco-sweep-") as tmp:
        result = run_point(command, argv, tag, timeout_s, Path(tmp) / "sessions")
        bundle = result.pop("bundle")
        result["archive"] = _tar(Path(bundle)) if bundle else None
    ctx = ray.get_runtime_context()
    result["node_id"] = ctx.get_node_id()
    result["gpu_ids"] = [str(g) for g in ray.get_gpu_ids()]
    return result


# -- the sweep ------------------------------------------------------------------------------


@dataclass
class _State:
    """``sweep.json``: the sweep's design and every point's attempts."""

    spec: SweepSpec
    folder: Path
    executor: str
    points: dict[str, dict[str, Any]] = field(default_factory=dict)
    started_utc: str = field(default_factory=utc_now_iso)

    def save(self) -> None:
        atomic_write_json(
            self.folder / SWEEP_FILE,
            {
                "aaco_version": __version__,
                "name": self.spec.name,
                "command": self.spec.command,
                "options": self.spec.options,
                "matrix": self.spec.matrix,
                "retries": self.spec.retries,
                "timeout_s": self.spec.timeout_s,
                "resources": {"num_cpus": self.spec.num_cpus, "num_gpus": self.spec.num_gpus},
                "executor": self.executor,
                "started_utc": self.started_utc,
                "updated_utc": utc_now_iso(),
                "points": list(self.points.values()),
            },
        )


def _place(root: Path, bundle: Path) -> Path:
    """Move a point's bundle into the sessions root's day folder (its id kept)."""
    day = root / f"{bundle.name[0:4]}-{bundle.name[4:6]}-{bundle.name[6:8]}"
    if not bundle.name[:8].isdigit():
        day = root / "sweeps-imported"
    day.mkdir(parents=True, exist_ok=True)
    target = day / bundle.name
    if target.exists():
        raise BundleError(f"{target}: a bundle of that id is already in the sessions root")
    shutil.move(str(bundle), target)
    update_latest(root, target)
    return target


#: the figures of a point's session kept in its record and results row: a model run's
#: latency and throughput, a serving run's TTFT and output tokens/s (``aaco ls``'s row)
HEADLINE = ("p50_ms", "p90_ms", "p99_ms", "throughput", "ttft_p50_ms", "ttft_p99_ms",
            "output_tokens_per_s")  # fmt: skip


def _headline(bundle: Path | None) -> dict[str, Any]:
    empty: dict[str, Any] = {"status": None, **dict.fromkeys(HEADLINE)}
    if bundle is None:
        return empty
    try:
        row = session_row(Session.load(bundle))
    except BundleError:
        return empty
    return {k: row.get(k) for k in empty}


def results_table(points: Sequence[dict[str, Any]], option_keys: Sequence[str]) -> pa.Table:
    """One row per point: id, each option, status, attempts, session, headline figures."""
    rows = []
    for p in points:
        row: dict[str, Any] = {"point": p["id"]}
        for k in option_keys:
            v = p["options"].get(k)
            row[k] = None if v is None else v if isinstance(v, str) else json.dumps(v)
        last = (p.get("attempts") or [{}])[-1]
        row.update(
            status=p["status"],
            attempts=len(p.get("attempts") or []),
            session_id=p.get("session_id"),
            error=last.get("error") if p["status"] != COMPLETED else None,
            **{k: p.get(k) for k in HEADLINE},
            host=last.get("host"),
            gpu_ids=",".join(last.get("gpu_ids") or []) or None,
        )
        rows.append(row)
    schema = pa.schema(
        [
            ("point", pa.string()),
            *((k, pa.string()) for k in option_keys),
            ("status", pa.string()),
            ("attempts", pa.int64()),
            ("session_id", pa.string()),
            ("error", pa.string()),
            *((k, pa.float64()) for k in HEADLINE),
            ("host", pa.string()),
            ("gpu_ids", pa.string()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


Executor = Callable[[list[tuple[Point, int]], Callable[[Point, int, dict[str, Any]], None]], None]


def _local(spec: SweepSpec, root: Path, parallel: int) -> Executor:
    """Points in subprocesses here, ``parallel`` at a time (1: never two measurements at
    once)."""
    command = COMMANDS[spec.command]

    def execute(
        todo: list[tuple[Point, int]], done: Callable[[Point, int, dict[str, Any]], None]
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        def one(item: tuple[Point, int]) -> tuple[Point, int, dict[str, Any]]:
            point, attempt = item
            staging = root / ".sweep-staging" / f"{spec.name}-{point.id}-{attempt}"
            shutil.rmtree(staging, ignore_errors=True)
            result = run_point(
                command, point_argv(point.options), _tag(spec, point), spec.timeout_s, staging
            )
            result["staging"] = str(staging)
            return point, attempt, result

        if parallel == 1:  # in this thread: Ctrl-C reaches the running point at once
            for item in todo:
                done(*one(item))
            return
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            for point, attempt, result in pool.map(one, todo):
                done(point, attempt, result)

    return execute


def _tag(spec: SweepSpec, point: Point) -> str:
    return f"sweep:{spec.name}:{point.id}"


def import_ray() -> Any:
    """Ray, or a UsageError saying why not: absent, or failing at import (a broken
    ``amdsmi`` package makes ``import ray`` raise on some machines)."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray: pip install 'aaco[ray]'") from None
    except Exception as exc:
        raise UsageError(
            f"Ray failed to import ({type(exc).__name__}: {one_line(exc)}); "
            "a broken amdsmi package is a known cause: uninstall it or fix ROCm's library"
        ) from None
    return ray


def _ray(spec: SweepSpec, share_nodes: bool) -> Executor:
    """One Ray task per point with the point's resources; unless ``share_nodes``, pinned
    to a node no other point of the sweep is measuring on."""
    ray = import_ray()
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import (
        NodeAffinitySchedulingStrategy,
        PlacementGroupSchedulingStrategy,
    )

    command = COMMANDS[spec.command]
    remote = ray.remote(max_retries=0)(ray_task)
    need = {"CPU": spec.num_cpus, "GPU": spec.num_gpus}

    def nodes() -> list[dict[str, Any]]:
        fits = []
        for n in ray.nodes():
            res = n.get("Resources") or {}
            if n.get("Alive") and all(res.get(k, 0) >= v for k, v in need.items() if v):
                fits.append(n)
        return fits

    def execute(
        todo: list[tuple[Point, int]], done: Callable[[Point, int, dict[str, Any]], None]
    ) -> None:
        candidates = nodes()
        if not candidates:
            raise UsageError(
                f"no node of the Ray cluster has {spec.num_cpus:g} CPU(s) and "
                f"{spec.num_gpus:g} GPU(s) for a point"
            )
        idle = [n["NodeID"] for n in candidates]
        ips = {n["NodeID"]: n.get("NodeManagerAddress") for n in candidates}
        pending = list(todo)
        inflight: dict[Any, tuple[Point, int, str | None, Any]] = {}

        def submit(point: Point, attempt: int, node: str | None) -> None:
            opts: dict[str, Any] = {"num_cpus": spec.num_cpus, "num_gpus": spec.num_gpus}
            group = None
            if spec.num_gpus > 1:
                # a point of several GPUs reserves them together, on one node; the task
                # waits in Ray's queue until the group is placed (never here: a group that
                # cannot be placed yet must not stop the points that can)
                bundle: dict[str, float] = {"CPU": spec.num_cpus, "GPU": spec.num_gpus}
                if node is not None and ips.get(node):
                    bundle[f"node:{ips[node]}"] = 0.001
                group = placement_group([bundle], strategy="STRICT_PACK")
                opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(group)
            elif node is not None:
                opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
            try:
                ref = remote.options(**opts).remote(
                    command, point_argv(point.options), _tag(spec, point), spec.timeout_s
                )
            except BaseException:
                if group is not None:
                    remove_placement_group(group)
                raise
            inflight[ref] = (point, attempt, node, group)

        try:
            while pending or inflight:
                while pending and (share_nodes or idle):
                    point, attempt = pending.pop(0)
                    submit(point, attempt, None if share_nodes else idle.pop(0))
                ready, _ = ray.wait(list(inflight), num_returns=1)
                for ref in ready:
                    point, attempt, node, group = inflight.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as exc:
                        result = {
                            "rc": -1,
                            "stderr": f"the Ray task failed: {one_line(exc)}",
                            "archive": None,
                        }
                    finally:
                        if group is not None:
                            remove_placement_group(group)
                        if node is not None:
                            idle.append(node)
                    done(point, attempt, result)
        finally:
            # an error or Ctrl-C: nothing of the sweep stays queued or reserved on the cluster
            for ref, (_, _, _, group) in inflight.items():
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
                if group is not None:
                    with contextlib.suppress(Exception):
                        remove_placement_group(group)

    return execute


def run_sweep(
    spec: SweepSpec,
    root: Path,
    *,
    resume: bool = False,
    ray_address: str | None = None,
    share_nodes: bool = False,
    parallel: int = 1,
    lake: Path | None = None,
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run the sweep's points into ``root`` (see the module's docstring); its record.

    ``ray_address``: None runs the points here, ``parallel`` at a time; otherwise on Ray:
    the instance already initialised in this process if there is one, else ``local`` starts
    one here and ``auto`` or an address joins a cluster. ``lake``: the sessions root is
    exported into it at the end."""
    if parallel < 1:
        raise UsageError("--parallel must be at least 1")
    folder = root / "sweeps" / spec.name
    previous: dict[str, dict[str, Any]] = {}
    if (folder / SWEEP_FILE).is_file():
        if not resume:
            raise UsageError(
                f"sweep {spec.name} exists under {root}; --resume continues it, "
                "another name starts a new one"
            )
        try:
            data = json.loads((folder / SWEEP_FILE).read_text())
            previous = {p["key"]: p for p in data.get("points") or []}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{folder / SWEEP_FILE}: unreadable ({exc})") from None
    folder.mkdir(parents=True, exist_ok=True)
    executor_name = f"local:{parallel}" if ray_address is None else f"ray:{ray_address}"
    state = _State(spec, folder, executor_name)
    points = spec.points()
    todo: list[tuple[Point, int]] = []
    for point in points:
        old = previous.get(point.key)
        record: dict[str, Any] = {
            "id": point.id,
            "key": point.key,
            "options": point.options,
            "status": PENDING,
            "attempts": [],
        }
        if old is not None:
            record["attempts"] = list(old.get("attempts") or [])
            bundle = old.get("bundle")
            if old.get("status") == COMPLETED and bundle and (root / bundle).is_dir():
                record.update({k: old.get(k) for k in ("status", "session_id", "bundle")})
                record.update(_headline(root / bundle))
                record["status"] = COMPLETED
                record["skipped"] = "resumed: completed before"
        state.points[point.id] = record
        if record["status"] != COMPLETED:
            todo.append((point, 1))
    state.save()

    def done(point: Point, attempt: int, result: dict[str, Any]) -> None:
        record = state.points[point.id]
        bundle: Path | None = None
        archive = result.pop("archive", None)
        staging = result.pop("staging", None)
        try:
            if archive is not None:
                with tempfile.TemporaryDirectory(dir=root, prefix=".sweep-unpack-") as tmp:
                    bundle = _place(root, _untar(archive, Path(tmp)))
            elif result.get("bundle"):
                bundle = _place(root, Path(result["bundle"]))
        except BundleError as exc:
            result["rc"], result["stderr"] = result.get("rc") or -1, str(exc)
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
        headline = _headline(bundle)
        ok = result.get("rc") == 0 and headline["status"] == COMPLETED
        entry = {
            "attempt": len(record["attempts"]) + 1,
            "rc": result.get("rc"),
            "seconds": result.get("seconds"),
            "host": result.get("host"),
            "node_id": result.get("node_id"),
            "gpu_ids": result.get("gpu_ids"),
            "session_id": bundle.name if bundle else None,
            "session_status": headline["status"],
            "error": None
            if ok
            else f"ran past timeout_s ({spec.timeout_s:g} s) and was stopped"
            if result.get("timed_out")
            else _error_line(str(result.get("stderr") or ""), result["rc"]),
        }
        record["attempts"].append(entry)
        record["session_id"] = entry["session_id"]
        # relative to the sessions root: a resume from another folder finds it
        record["bundle"] = bundle.relative_to(root).as_posix() if bundle else None
        record.update(headline)
        retry = not ok and attempt <= spec.retries
        record["status"] = COMPLETED if ok else PENDING if retry else FAILED
        state.save()
        if progress is not None:
            progress(dict(record, retrying=retry))
        if retry:
            retries.append((point, attempt + 1))

    retries: list[tuple[Point, int]] = []
    if ray_address is None:
        execute = _local(spec, root, parallel)
    else:
        ray = import_ray()
        if not ray.is_initialized():
            try:
                with contextlib.redirect_stderr(io.StringIO()):
                    if ray_address == "local":
                        ray.init(include_dashboard=False, log_to_driver=False)
                    else:
                        ray.init(address=ray_address, log_to_driver=False)
            except Exception as exc:
                raise UsageError(
                    f"cannot start or join Ray at {ray_address!r} "
                    f"({type(exc).__name__}: {one_line(exc)})"
                ) from None
        execute = _ray(spec, share_nodes)
    started = time.perf_counter()
    try:
        while todo:
            execute(todo, done)
            todo, retries = retries, []
    finally:
        shutil.rmtree(root / ".sweep-staging", ignore_errors=True)
        state.save()
    records = list(state.points.values())
    option_keys = _option_keys(spec)
    table = results_table(records, option_keys)
    tmp = folder / f".{RESULTS_FILE}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, folder / RESULTS_FILE)
    exported = None
    if lake is not None:
        from aaco.lake.export import export_lake

        exported = export_lake(root, lake).to_json()
    return {
        "name": spec.name,
        "folder": str(folder),
        "executor": executor_name,
        "points": records,
        "option_keys": option_keys,
        "completed": sum(r["status"] == COMPLETED for r in records),
        "failed": sum(r["status"] == FAILED for r in records),
        "seconds": time.perf_counter() - started,
        "lake": exported,
    }


def _option_keys(spec: SweepSpec) -> list[str]:
    """The options that vary between points (the matrix's, then the extra points')."""
    keys = list(spec.matrix)
    for p in spec.extra_points:
        keys += [k for k in p if k not in keys]
    return keys
