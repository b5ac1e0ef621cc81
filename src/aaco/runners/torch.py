"""The PyTorch runner (parent side): check the ``--model`` and ``--device`` without importing
torch, and after the worker, import its torch.profiler trace. The worker side is
:mod:`aaco.runners.torch_worker` (torch is imported only there).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from aaco.errors import InputError, UsageError
from aaco.ingest import ingest_traces
from aaco.runners.base import Runner, RunOptions, RunPlan, RunStage
from aaco.runners.launch import LaunchOutcome
from aaco.runners.spec import TORCH_TRACE, TorchRunSpec
from aaco.session.paths import TORCH_CONFIG_FILE

__all__ = ["TORCH_MISSING", "TorchModelRef", "TorchRunner", "resolve_torch_model"]

DEFAULT_WARMUP = 10
DEFAULT_ITERATIONS = 100
TORCH_MISSING = "PyTorch is not installed; install it with pip install 'aaco[torch]'"
_TORCH_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


@dataclass(frozen=True)
class TorchModelRef:
    """A ``--model`` for ``--framework torch``: what the worker loads and how."""

    spec: str  # as given
    target: str  # module name, absolute .py path + ":function", or absolute .pt2 path
    kind: str  # function | export
    name: str


def resolve_torch_model(spec: str, cwd: Path | None = None) -> TorchModelRef:
    """Check a torch ``--model`` without importing torch or the user's code.

    ``module:function`` (found on ``sys.path`` or in ``cwd``), ``file.py:function`` or a
    ``.pt2`` file. Whether the function exists and what it returns is checked by the worker.
    """
    base = Path.cwd() if cwd is None else cwd
    if spec.endswith(".pt2"):
        p = (base / Path(spec).expanduser()).resolve()
        if not p.is_file():
            raise InputError(f"model file not found: {spec}")
        return TorchModelRef(spec=spec, target=str(p), kind="export", name=p.stem)
    where, sep, func = spec.rpartition(":")
    if not sep or not where or not func.isidentifier():
        raise UsageError(
            f"--model {spec}: with --framework torch give module:function, "
            "file.py:function or a saved torch.export program (.pt2)"
        )
    if where.endswith(".py") or "/" in where:
        p = (base / Path(where).expanduser()).resolve()
        if not p.is_file():
            raise InputError(f"--model {spec}: file not found: {where}")
        return TorchModelRef(spec=spec, target=f"{p}:{func}", kind="function", name=func)
    saved = list(sys.path)
    sys.path.insert(0, str(base))
    try:
        found = importlib.util.find_spec(where)
    except (ImportError, ValueError):
        found = None
    finally:
        sys.path[:] = saved
    if found is None:
        raise InputError(f"--model {spec}: cannot import module {where!r}")
    return TorchModelRef(spec=spec, target=spec, kind="function", name=func)


def torch_installed() -> bool:
    """Whether torch can be imported here (checked without importing it)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


class TorchRunner(Runner):
    """An ``nn.Module`` from ``module:function`` / ``file.py:function``, or a saved
    ``torch.export`` program, on ``--device`` (cpu, cuda, cuda:N; ROCm GPUs too)."""

    name: ClassVar[str] = "torch"
    description: ClassVar[str] = "PyTorch through torch.profiler (--device cpu|cuda)"
    workload: ClassVar[str] = "aaco.runners.torch_worker:TorchWorkload"

    def validate(self, opts: RunOptions) -> None:
        if opts.preprocess is not None and opts.preprocess != "none":
            raise UsageError("--preprocess applies to --framework onnxruntime")
        if opts.backend is not None:
            raise UsageError(
                "--backend chooses an ONNX Runtime provider; with --framework torch use --device"
            )
        for given, option in (
            (opts.shapes, "--shape"),
            (opts.int_range, "--int-range"),
            (opts.values, "--input"),
        ):
            if given:
                raise UsageError(
                    f"{option} does not apply to --framework torch: the model function "
                    "returns its example inputs"
                )

    def plan(self, opts: RunOptions) -> RunPlan:
        if not torch_installed():
            raise UsageError(TORCH_MISSING)
        device = opts.device or "cpu"
        if not _TORCH_DEVICE.match(device):
            raise UsageError(f"--device {device}: expected cpu, cuda or cuda:N")
        if opts.profile_mode == "kernels" and device == "cpu":
            raise UsageError(
                "--profile kernels records GPU kernels; --device cpu runs none (use --device "
                "cuda, where torch.profiler records the kernels with CUPTI or roctracer)"
            )
        ref = resolve_torch_model(opts.model)
        if opts.batch is not None and ref.kind == "export":
            raise UsageError(
                "--batch does not apply to a saved torch.export program: its example inputs "
                "fix the shapes"
            )
        warmup = opts.warmup if opts.warmup is not None else DEFAULT_WARMUP
        iterations: int | None = None
        if opts.duration_s is None:
            iterations = opts.iterations or DEFAULT_ITERATIONS
        return RunPlan(
            model={"name": ref.name, "path": ref.target, "source": f"torch-{ref.kind}"},
            backend={"name": "torch", "provider": device},
            spec={
                "model": ref.target,
                "model_kind": ref.kind,
                "device": device,
                "compile": opts.compile,
                "batch": opts.batch,
                "sys_path": [os.getcwd()],
                "framework": "torch",
            },
            warmup=warmup,
            iterations=iterations,
            run={"device": device, "compile": opts.compile, "model_spec": ref.spec},
        )

    def check_outcome(self, plan: RunPlan, outcome: LaunchOutcome) -> None:
        result = outcome.result
        if result is not None and result.stage == "load" and result.error:
            if result.error_type == "InputError":
                raise InputError(result.error)
            if result.error_type == "UsageError":
                raise UsageError(result.error)

    def batch(self, plan: RunPlan, outcome: LaunchOutcome) -> int | None:
        result = outcome.result
        if result is None:
            return None
        batch: int | None = result.get("batch")
        if plan.spec["batch"] is not None and batch != plan.spec["batch"]:
            batch = None  # --batch was passed on, but the inputs do not all lead with it
        return batch

    def finish(
        self, plan: RunPlan, outcome: LaunchOutcome, stage: RunStage, summary: dict[str, Any]
    ) -> None:
        spec = TorchRunSpec.from_json(plan.spec)
        result = outcome.result
        if result is None:
            return
        batch = self.batch(plan, outcome)
        info = result.get("framework_info", {})
        compile_ns = result.get("compile_time_ns")
        compile_ms = compile_ns / 1e6 if compile_ns else None
        stage.update(
            "run",
            inputs=result.get("inputs", []),
            batch=batch,
            batch_source=None if batch is None else ("--batch" if spec.batch else "inputs"),
            torch=info,
            compile_ms=compile_ms,
        )
        stage.write_json(
            TORCH_CONFIG_FILE,
            {
                **info,
                "model": spec.model,
                "model_kind": spec.model_kind,
                "model_load_ms": result.load_time_ns / 1e6 if result.load_time_ns else None,
                "compile_ms": compile_ms,
            },
        )
        if not result.get("trace_file"):
            return
        trace = stage.path / result.get("trace_file")
        record = stage.attempt("trace_ingest", _ingest, stage.path, [trace])
        summary["profile"] = {
            "source": "torch.profiler",
            "trace_file": TORCH_TRACE,
            "profiled_iterations": spec.profile_iterations,
            "rows": record.get("rows") if record else None,
            "events": record.get("events") if record else None,
        }


def _ingest(bundle: Path, paths: list[Path]) -> dict[str, Any]:
    return ingest_traces(bundle, paths)
