"""The PyTorch workload, run by the worker harness (:mod:`aaco.runners.harness`): loads an
nn.Module; the harness times its calls, then profiles a pass under ``torch.profiler``.

It reads :class:`~aaco.runners.spec.TorchRunSpec` from ``runtime/worker_spec.json`` and
writes ``profiler/torch_trace.json.gz`` into the bundle's staging folder; its own result
fields (``WorkerResult.extra``): ``framework_info``, ``compile_time_ns``, ``trace_file``,
``batch``, ``inputs``. torch is imported only here, so AACO itself runs without it
(``pip install 'aaco[torch]'`` adds it).

The model is ``module:function`` or ``file.py:function`` (the function returns
``(module, example_inputs)``, inputs a tuple/list of tensors or a dict of keyword
arguments) or a saved ``torch.export`` program (``.pt2``, run with its saved example inputs).

Measurement protocol, all under ``torch.inference_mode()`` (steps 2 and 3 are the harness's):
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

import importlib
import importlib.util
import inspect
import platform
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from aaco.errors import InputError, UsageError
from aaco.runners.harness import Profiled, Workload, timing_loop
from aaco.runners.harness import one_line as _one_line
from aaco.runners.spec import TORCH_TRACE, TorchRunSpec

__all__ = ["LoadedModel", "TorchWorkload", "load_model"]


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
        # the device identity its ceilings are found by (aaco.session.devices), also when
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


class TorchWorkload(Workload):
    """One call of the module per iteration (synchronised on a GPU), under inference mode."""

    def __init__(self, spec: Any, ctx: Any) -> None:
        super().__init__(spec, ctx)
        self.run_spec = TorchRunSpec.from_json(spec)
        self._stack = ExitStack()
        self._step: Callable[[], Any] | None = None
        self._gpu = False
        self._torch: Any = None

    def prepare(self, purpose: str) -> Callable[[], Any]:
        spec, result = self.run_spec, self.ctx.result
        for p in reversed(spec.sys_path):
            if p not in sys.path:
                sys.path.insert(0, p)
        self.ctx.stage("load")
        import torch

        self._torch = torch
        if spec.compile:
            _check_compile(torch)
        if spec.threads:
            torch.set_num_threads(spec.threads)
        t0 = time.perf_counter_ns()
        loaded = load_model(spec.model, spec.model_kind, spec.device, spec.batch, spec.seed)
        result.load_time_ns = time.perf_counter_ns() - t0
        result.extra["framework_info"] = _framework_info(spec, torch)
        result.extra["inputs"] = loaded.describe_inputs()
        result.extra["batch"] = loaded.batch()
        result.extra.setdefault("compile_time_ns", None)
        gpu = self._gpu = torch.device(spec.device).type == "cuda"
        self._stack.enter_context(torch.inference_mode())
        module = loaded.module
        if spec.compile:
            module = torch.compile(module)
            self.ctx.stage("compile")
            # The first call traces and compiles; it is neither warmup nor measured.
            c_starts, c_ends = timing_loop(_make_step(loaded, module, gpu, torch), 1)
            result.extra["compile_time_ns"] = c_ends[0] - c_starts[0]
            result.phases["compile"] = [c_starts[0], c_ends[0]]
        self._step = _make_step(loaded, module, gpu, torch)
        return self._step

    @contextmanager
    def profiled(self) -> Iterator[Profiled | None]:
        from torch.profiler import ProfilerActivity, profile, schedule

        spec, result, step = self.run_spec, self.ctx.result, self._step
        assert step is not None
        trace = self.ctx.bundle_dir / TORCH_TRACE
        trace.parent.mkdir(parents=True, exist_ok=True)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self._gpu else [])
        exported: list[str] = []

        def on_ready(prof: Any) -> None:
            # export_chrome_trace gzips when the name ends in .gz
            prof.export_chrome_trace(str(trace))
            exported.append(str(trace))

        with profile(
            activities=activities,
            record_shapes=True,
            schedule=schedule(
                wait=0, warmup=spec.profile_warmup, active=spec.profile_iterations, repeat=1
            ),
            on_trace_ready=on_ready,
        ) as prof:
            # one ProfilerStep#N annotation per iteration, outside the timed region
            yield Profiled(step, after=prof.step)
        if exported and trace.is_file():
            result.extra["trace_file"] = TORCH_TRACE
        else:
            result.failures.append(
                {"stage": "profile", "error": "torch.profiler exported no trace"}
            )

    def finish(self) -> None:
        self._stack.close()

    def describe_error(self, exc: BaseException) -> str:
        """``error_type`` InputError or UsageError means the user's model or options were at
        fault (the parent turns those into a usage error)."""
        return str(exc) if isinstance(exc, UsageError) else _one_line(exc)
