"""The PyTorch worker: loads an nn.Module, times iterations, then profiles a pass.

Started by the parent as ``python -m aaco.runners.torch BUNDLE_DIR``; it reads
``runtime/worker_spec.json`` (:class:`~aaco.runners.spec.TorchRunSpec`) and writes
``metrics/inference_iters.parquet``, ``profiler/torch_trace.json.gz`` and
``runtime/worker_result.json`` into the bundle's staging folder. torch is imported only
here, so AACO itself runs without it (``pip install 'aaco[torch]'`` adds it).

The model is ``module:function`` or ``file.py:function`` (the function returns
``(module, example_inputs)``, inputs a tuple/list of tensors or a dict of keyword
arguments) or a saved ``torch.export`` program (``.pt2``, run with its saved example inputs).

Measurement protocol, all under ``torch.inference_mode()``:
  1. with ``--compile``, one call compiles the module (timed on its own, ``compile_time_ns``);
  2. ``warmup`` calls, then the measured calls (``iterations``, or until ``duration_s``), each
     timed with ``time.perf_counter_ns()`` around the call only, garbage collection off; on a
     GPU ``torch.cuda.synchronize()`` is inside the timed region so the time covers the
     kernels, not just their launches;
  3. a separate pass under ``torch.profiler`` (CPU, plus CUDA activity on a GPU, shapes
     recorded) of ``profile_warmup`` + ``profile_iterations`` steps, one ``prof.step()`` each,
     so the trace holds ``ProfilerStep#N`` annotations; only the active steps are recorded.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import inspect
import json
import platform
import sys
import time
import traceback
from array import array
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aaco.errors import InputError, UsageError
from aaco.runners.ort import _one_line, _Progress, iters_table
from aaco.runners.rss import own_peak_rss_bytes
from aaco.runners.spec import (
    PROGRESS_FILE,
    RESULT_FILE,
    SPEC_FILE,
    TORCH_TRACE,
    TorchRunSpec,
    WorkerResult,
)
from aaco.session.bundle import atomic_write_json, write_table
from aaco.session.schema import INFERENCE_ITERS

__all__ = ["LoadedModel", "load_model", "main", "run_worker", "timing_loop", "timing_loop_for"]


class LoadedModel:
    """The module to run and the arguments of one call, already on the target device."""

    def __init__(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.module = module
        self.args = args
        self.kwargs = kwargs

    def describe_inputs(self) -> list[dict[str, Any]]:
        """Name, shape and dtype of each tensor argument (positional ones are ``arg<i>``)."""
        out: list[dict[str, Any]] = []
        named = [(f"arg{i}", a) for i, a in enumerate(self.args)] + list(self.kwargs.items())
        for name, value in named:
            shape = getattr(value, "shape", None)
            dtype = getattr(value, "dtype", None)
            out.append(
                {
                    "name": name,
                    "shape": list(shape) if shape is not None else None,
                    "dtype": str(dtype).removeprefix("torch.") if dtype is not None else None,
                }
            )
        return out

    def batch(self) -> int | None:
        """The leading dimension when every tensor input shares it, else unknown (None)."""
        leading = {i["shape"][0] for i in self.describe_inputs() if i["shape"]}
        return leading.pop() if len(leading) == 1 else None


def _import_target(target: str, spec_text: str) -> Any:
    """Import ``target``: a dotted module name or a path to a ``.py`` file."""
    if target.endswith(".py") or "/" in target:
        path = Path(target).expanduser()
        if not path.is_file():
            raise InputError(f"--model {spec_text}: file not found: {target}")
        mod_spec = importlib.util.spec_from_file_location(f"_aaco_user_{path.stem}", path)
        if mod_spec is None or mod_spec.loader is None:
            raise InputError(f"--model {spec_text}: cannot load {target} as a Python module")
        module = importlib.util.module_from_spec(mod_spec)
        sys.modules[mod_spec.name] = module
        try:
            mod_spec.loader.exec_module(module)
        except Exception as exc:
            raise InputError(
                f"--model {spec_text}: importing {target} failed: {type(exc).__name__}: "
                f"{_one_line(exc)}"
            ) from exc
        return module
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        raise InputError(f"--model {spec_text}: cannot import module {target!r} ({exc})") from exc
    except Exception as exc:
        raise InputError(
            f"--model {spec_text}: importing {target} failed: {type(exc).__name__}: "
            f"{_one_line(exc)}"
        ) from exc


def _split_inputs(value: Any, where: str, torch: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(value, torch.Tensor):
        return (value,), {}
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise InputError(f"{where}: example inputs as a dict need str keys (keyword names)")
        return (), dict(value)
    if isinstance(value, (tuple, list)):
        return tuple(value), {}
    raise InputError(
        f"{where}: example inputs must be a tuple/list of tensors or a dict of keyword "
        f"arguments, got {type(value).__name__}"
    )


def _to_device(value: Any, device: Any) -> Any:
    to = getattr(value, "to", None)
    return to(device) if callable(to) and hasattr(value, "shape") else value


def load_model(
    model: str, kind: str, device: str, batch: int | None = None, seed: int = 0
) -> LoadedModel:
    """Build or load the model and its example inputs and move both to ``device``.

    Raises InputError (bad model spec or a factory returning the wrong thing) or UsageError
    (a device this torch cannot use), each with a one-line message naming the ``--model``.

    >>> m = load_model("tests.fixtures.torch_models:tiny_mlp", "function", "cpu")  # doctest: +SKIP
    """
    import torch

    torch_device = _check_device(device, torch)
    torch.manual_seed(seed)
    if kind == "export":
        path = Path(model).expanduser()
        try:
            program = torch.export.load(str(path))
        except Exception as exc:
            raise InputError(
                f"--model {model}: not a saved torch.export program "
                f"({type(exc).__name__}: {_one_line(exc)})"
            ) from exc
        example = getattr(program, "example_inputs", None)
        if not example:
            raise InputError(
                f"--model {model}: the saved program holds no example inputs; save it from "
                "torch.export.export(model, args) with torch >= 2.3, or pass a "
                "module:function that returns (module, inputs)"
            )
        args, kwargs = tuple(example[0]), dict(example[1] or {})
        if torch_device.type != "cpu":
            # The unlifted module refuses .to(); move the program itself instead.
            from torch.export.passes import move_to_device_pass

            program = move_to_device_pass(program, torch_device)
        module = program.module()
        args = tuple(_to_device(a, torch_device) for a in args)
        kwargs = {k: _to_device(v, torch_device) for k, v in kwargs.items()}
        return LoadedModel(module, args, kwargs)
    else:
        target, _, func_name = model.rpartition(":")
        if not target or not func_name:
            raise InputError(f"--model {model}: expected module:function or file.py:function")
        mod = _import_target(target, model)
        func = getattr(mod, func_name, None)
        if func is None:
            raise InputError(f"--model {model}: {target} has no attribute {func_name!r}")
        if not callable(func):
            raise InputError(f"--model {model}: {target}.{func_name} is not callable")
        call_kw: dict[str, Any] = {}
        if batch is not None:
            try:
                params = inspect.signature(func).parameters
            except (TypeError, ValueError):
                params = {}  # type: ignore[assignment]
            if "batch" not in params and not any(
                p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
            ):
                raise InputError(
                    f"--model {model}: --batch needs {func_name}() to take a 'batch' argument"
                )
            call_kw["batch"] = batch
        try:
            returned = func(**call_kw)
        except Exception as exc:
            raise InputError(
                f"--model {model}: {func_name}() raised {type(exc).__name__}: {_one_line(exc)}"
            ) from exc
        if not (isinstance(returned, (tuple, list)) and len(returned) == 2):
            raise InputError(
                f"--model {model}: {func_name}() must return (nn.Module, example_inputs), "
                f"got {type(returned).__name__}"
            )
        module, inputs = returned
        if not isinstance(module, torch.nn.Module):
            raise InputError(
                f"--model {model}: {func_name}() must return an nn.Module first, "
                f"got {type(module).__name__}"
            )
        args, kwargs = _split_inputs(inputs, f"--model {model}", torch)
    module = module.to(torch_device) if hasattr(module, "to") else module
    if hasattr(module, "eval"):
        module.eval()
    args = tuple(_to_device(a, torch_device) for a in args)
    kwargs = {k: _to_device(v, torch_device) for k, v in kwargs.items()}
    return LoadedModel(module, args, kwargs)


def _check_device(device: str, torch: Any) -> Any:
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise UsageError(f"--device {device}: not a torch device (cpu, cuda, cuda:N)") from exc
    if dev.type == "cuda":
        build = (
            f"ROCm {torch.version.hip}"
            if getattr(torch.version, "hip", None)
            else (f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only")
        )
        if not torch.cuda.is_available():
            raise UsageError(
                f"--device {device}: no GPU available to torch {torch.__version__} ({build} build)"
            )
        count = torch.cuda.device_count()
        if (dev.index or 0) >= count:
            raise UsageError(f"--device {device}: only {count} GPU(s) visible")
    elif dev.type != "cpu":
        raise UsageError(f"--device {device}: AACO runs torch on cpu or cuda (also ROCm)")
    return dev


def _check_compile(torch: Any) -> None:
    if not hasattr(torch, "compile") or importlib.util.find_spec("torch._dynamo") is None:
        raise UsageError(
            f"--compile needs torch.compile (TorchDynamo); torch {torch.__version__} lacks it"
        )
    import torch._dynamo as dynamo

    supported = getattr(dynamo, "is_dynamo_supported", None)
    if supported is not None and not supported():
        raise UsageError(
            f"--compile: TorchDynamo does not support this platform "
            f"(Python {platform.python_version()}, torch {torch.__version__})"
        )


def timing_loop(step: Callable[[], Any], n: int) -> tuple[array[int], array[int]]:
    """Time ``n`` calls of ``step``; the only work between the two clock reads is the call."""
    clock = time.perf_counter_ns
    starts = array("q", bytes(8 * n))
    ends = array("q", bytes(8 * n))
    for i in range(n):
        t0 = clock()
        step()
        t1 = clock()
        starts[i] = t0
        ends[i] = t1
    return starts, ends


def timing_loop_for(step: Callable[[], Any], duration_ns: int) -> tuple[array[int], array[int]]:
    """Time calls of ``step`` until ``duration_ns`` has passed (at least one call)."""
    clock = time.perf_counter_ns
    starts = array("q")
    ends = array("q")
    deadline = clock() + duration_ns
    t1 = 0
    while t1 < deadline:
        t0 = clock()
        step()
        t1 = clock()
        starts.append(t0)
        ends.append(t1)
    return starts, ends


def _make_step(loaded: LoadedModel, module: Any, gpu: bool, torch: Any) -> Callable[[], Any]:
    args, kwargs = loaded.args, loaded.kwargs
    if gpu:
        sync = torch.cuda.synchronize

        def step_gpu() -> None:
            module(*args, **kwargs)
            # Without this the clock would stop when the kernels are queued, not done.
            sync()

        return step_gpu

    def step_cpu() -> None:
        module(*args, **kwargs)

    return step_cpu


def _framework_info(spec: TorchRunSpec, torch: Any) -> dict[str, Any]:
    dev = torch.device(spec.device)
    name: str | None
    gpu: dict[str, Any] = {}
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev.index or 0)
        # the device identity its ceilings are found by (aaco.analysis.devices), also when
        # no vendor tool on PATH lists the GPU in env.json
        props = torch.cuda.get_device_properties(dev.index or 0)
        hip = getattr(torch.version, "hip", None)
        gpu = {
            "device_arch": getattr(props, "gcnArchName", None)
            if hip
            else f"sm_{props.major}{props.minor}",
            "device_compute_units": getattr(props, "multi_processor_count", None),
            "device_memory_bytes": getattr(props, "total_memory", None),
        }
    else:
        name = platform.processor() or platform.machine() or None
    return {
        **gpu,
        "framework": "torch",
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "device": spec.device,
        "device_name": name,
        "compile": spec.compile,
        "threads": torch.get_num_threads(),
    }


def run_worker(bundle_dir: Path) -> WorkerResult:
    """Run the spec found in ``bundle_dir``; always returns a result, never raises.

    ``error_type`` is ``InputError`` or ``UsageError`` when the user's model or options were
    at fault (the parent turns those into a usage error), else the exception's class name.
    """
    result = WorkerResult()
    progress = _Progress(bundle_dir / PROGRESS_FILE)
    try:
        spec = TorchRunSpec.from_json(json.loads((bundle_dir / SPEC_FILE).read_text()))
        _run(spec, bundle_dir, result, progress)
        result.status = "completed"
        result.stage = "done"
        progress.stage("done")
    except Exception as exc:
        result.status = "failed"
        result.error_type = type(exc).__name__
        result.error = str(exc) if isinstance(exc, UsageError) else _one_line(exc)
        (bundle_dir / "runtime").mkdir(parents=True, exist_ok=True)
        with (bundle_dir / "runtime" / "worker_traceback.txt").open("w") as fh:
            traceback.print_exc(file=fh)
    result.peak_rss_bytes = own_peak_rss_bytes()  # last: it covers the whole run
    atomic_write_json(bundle_dir / RESULT_FILE, result.to_json())
    return result


def _run(spec: TorchRunSpec, bundle_dir: Path, result: WorkerResult, progress: _Progress) -> None:
    for p in reversed(spec.sys_path):
        if p not in sys.path:
            sys.path.insert(0, p)
    result.stage = "load"
    progress.stage("load")
    import torch

    if spec.compile:
        _check_compile(torch)
    if spec.threads:
        torch.set_num_threads(spec.threads)
    t0 = time.perf_counter_ns()
    loaded = load_model(spec.model, spec.model_kind, spec.device, spec.batch, spec.seed)
    result.load_time_ns = time.perf_counter_ns() - t0
    result.framework_info = _framework_info(spec, torch)
    result.inputs = loaded.describe_inputs()
    result.batch = loaded.batch()
    gpu = torch.device(spec.device).type == "cuda"

    with torch.inference_mode():
        module = loaded.module
        if spec.compile:
            module = torch.compile(module)
            result.stage = "compile"
            progress.stage("compile")
            # The first call traces and compiles; it is neither warmup nor measured.
            c_starts, c_ends = timing_loop(_make_step(loaded, module, gpu, torch), 1)
            result.compile_time_ns = c_ends[0] - c_starts[0]
            result.phases["compile"] = [c_starts[0], c_ends[0]]
        step = _make_step(loaded, module, gpu, torch)

        result.stage = "warmup"
        progress.stage("warmup")
        w_starts, w_ends = timing_loop(step, spec.warmup)
        if spec.warmup:
            result.phases["warmup"] = [w_starts[0], w_ends[-1]]
        result.warmup_iterations = spec.warmup

        result.stage = "measure"
        progress.stage("measure")
        # A collection in the middle of the loop would be charged to one unlucky iteration.
        gc_was_enabled = gc.isenabled()
        gc.collect()
        gc.disable()
        try:
            if spec.duration_s is not None:
                m_starts, m_ends = timing_loop_for(step, int(spec.duration_s * 1e9))
            else:
                m_starts, m_ends = timing_loop(step, spec.iterations or 0)
        finally:
            if gc_was_enabled:
                gc.enable()
        if m_starts:
            result.phases["measured"] = [m_starts[0], m_ends[-1]]
        result.measured_iterations = len(m_starts)
        write_table(
            bundle_dir / INFERENCE_ITERS.path, iters_table(w_starts, w_ends, m_starts, m_ends)
        )

        if spec.profile:
            result.stage = "profile"
            progress.stage("profile")
            _profile_pass(spec, bundle_dir, result, step, gpu, torch)


def _profile_pass(
    spec: TorchRunSpec,
    bundle_dir: Path,
    result: WorkerResult,
    step: Callable[[], Any],
    gpu: bool,
    torch: Any,
) -> None:
    from torch.profiler import ProfilerActivity, profile, schedule

    trace = bundle_dir / TORCH_TRACE
    trace.parent.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    exported: list[str] = []

    def on_ready(prof: Any) -> None:
        # export_chrome_trace gzips when the name ends in .gz
        prof.export_chrome_trace(str(trace))
        exported.append(str(trace))

    runs = spec.profile_warmup + spec.profile_iterations
    clock = time.perf_counter_ns
    starts: list[int] = []
    ends: list[int] = []
    with profile(
        activities=activities,
        record_shapes=True,
        schedule=schedule(
            wait=0, warmup=spec.profile_warmup, active=spec.profile_iterations, repeat=1
        ),
        on_trace_ready=on_ready,
    ) as prof:
        for _ in range(runs):
            t0 = clock()
            step()
            t1 = clock()
            starts.append(t0)
            ends.append(t1)
            prof.step()
    result.phases["profile"] = [starts[0], ends[-1]]
    result.profile_runs = runs
    result.profile_wall_ns = [e - s for s, e in zip(starts, ends, strict=True)]
    if exported and trace.is_file():
        result.trace_file = TORCH_TRACE
    else:
        result.failures.append({"stage": "profile", "error": "torch.profiler exported no trace"})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m aaco.runners.torch BUNDLE_DIR", file=sys.stderr)
        return 2
    result = run_worker(Path(args[0]))
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
