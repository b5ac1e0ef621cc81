"""AACO's torch tracer, run at start-up by every Python process of a profiled command.

``aaco profile --tracer torch`` puts this file's folder first on ``PYTHONPATH`` and the trace
folder in ``AACO_TORCH_TRACE_DIR`` (:mod:`aaco.tracers.torch`). Here, at interpreter start:

1. any ``sitecustomize`` this one shadows is found further along ``sys.path`` and run;
2. an import hook waits for ``torch``: once ``import torch`` has finished, and only then,
   ``torch.profiler.profile`` starts (CPU activity, CUDA/ROCm activity when a GPU is
   available, ``record_shapes``, CUDA sync events where the profiler offers them);
3. at the interpreter's exit the profiler stops and the Kineto trace is written to
   ``$AACO_TORCH_TRACE_DIR/<pid>.json`` (through a hidden temporary file and a rename, so a
   half-written trace is never taken for one). A process forked from a profiled one writes
   nothing; a child Python process started afresh writes its own.

The program must never notice: every failure is caught and written to
``$AACO_TORCH_TRACE_DIR/<pid>.error.txt``, and the program goes on untraced. This file runs
under whatever Python the command uses, so it needs nothing beyond the standard library.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import traceback
from typing import Any

_DIR_ENV = "AACO_TORCH_TRACE_DIR"
#: one entry once the profiler was started in this process
_STARTED: list[bool] = []
#: one entry once it was stopped (at exit, or when the program started its own profiler)
_STOPPED: list[bool] = []
_HERE = os.path.dirname(os.path.abspath(__file__))


def _report(out_dir: str | None, stage: str) -> None:
    """Append the exception being handled to ``<pid>.error.txt``; never raises."""
    if not out_dir:
        return
    try:
        with open(os.path.join(out_dir, f"{os.getpid()}.error.txt"), "a") as fh:
            fh.write(f"[aaco torch tracer] {stage} failed:\n{traceback.format_exc()}\n")
    except Exception:  # there is nowhere left to report to
        return


def _chain(out_dir: str | None) -> None:
    """Run the ``sitecustomize`` that this one shadows, if any (a distribution's, a venv's)."""
    try:
        import importlib.machinery
        import importlib.util

        here = os.path.normcase(_HERE)
        rest = [p for p in sys.path if os.path.normcase(os.path.abspath(p or os.curdir)) != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        # `import sitecustomize` in the program must give the program's own module back
        sys.modules["sitecustomize"] = module
    except Exception:
        _report(out_dir, "the shadowed sitecustomize")


def _experimental_config() -> Any:
    """``_ExperimentalConfig(enable_cuda_sync_events=True)``, or None where torch lacks it."""
    try:
        from torch._C._profiler import _ExperimentalConfig

        return _ExperimentalConfig(enable_cuda_sync_events=True)
    except Exception:
        return None


def _start(torch: Any, out_dir: str) -> None:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    try:
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
    except Exception:
        _report(out_dir, "looking for a GPU")
    kwargs: dict[str, Any] = {"activities": activities, "record_shapes": True}
    config = _experimental_config()
    if config is not None:
        kwargs["experimental_config"] = config
    try:
        prof = profile(**kwargs)
    except TypeError:  # a torch whose profile() takes no experimental_config
        kwargs.pop("experimental_config", None)
        prof = profile(**kwargs)
    prof.start()
    pid = os.getpid()
    atexit.register(_stop, prof, pid, out_dir)
    _yield_to_the_program(torch, prof, pid, out_dir)


def _yield_to_the_program(torch: Any, prof: Any, pid: int, out_dir: str) -> None:
    """Two torch profilers at once crash the process: when the program starts its own, ours
    stops first (its trace so far is written) and says so in ``<pid>.note.txt``."""
    import torch.profiler as tp

    original = tp.profile.start

    def start(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self is not prof and not _STOPPED:
            _stop(prof, pid, out_dir)
            try:
                with open(os.path.join(out_dir, f"{pid}.note.txt"), "a") as fh:
                    fh.write(
                        "the program started its own torch.profiler: AACO's trace ends there\n"
                    )
            except OSError:
                pass
        return original(self, *args, **kwargs)

    setattr(tp.profile, "start", start)  # noqa: B010 (a method of a class we do not own)
    legacy = getattr(getattr(torch, "autograd", None), "profiler", None)
    enter = getattr(getattr(legacy, "profile", None), "__enter__", None)
    if legacy is not None and enter is not None:

        def legacy_enter(self: Any) -> Any:
            if not _STOPPED:
                _stop(prof, pid, out_dir)
            return enter(self)

        setattr(legacy.profile, "__enter__", legacy_enter)  # noqa: B010


def _stop(prof: Any, pid: int, out_dir: str) -> None:
    if os.getpid() != pid or _STOPPED:  # a forked child inherited the handler, not the profile
        return
    _STOPPED.append(True)
    tmp = os.path.join(out_dir, f".{pid}.json.partial")
    try:
        prof.stop()
        prof.export_chrome_trace(tmp)
        os.replace(tmp, os.path.join(out_dir, f"{pid}.json"))
    except BaseException:
        _report(out_dir, "writing the trace")
        with contextlib.suppress(OSError):
            os.remove(tmp)


class _TorchWatcher:
    """A meta-path finder that finds nothing itself: when ``torch`` is about to be imported it
    asks the other finders, and has the loader start the profiler once torch is loaded."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "torch" or _STARTED:
            return None
        try:
            # stays in place until torch is really executed: importlib.util.find_spec("torch")
            # (libraries probe for torch this way) asks too, and imports nothing
            spec = None
            for finder in list(sys.meta_path):
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            loader = getattr(spec, "loader", None)
            original = getattr(loader, "exec_module", None)
            if spec is None or original is None:
                return spec
            out_dir = self.out_dir
            watcher = self

            def exec_module(module: Any) -> None:
                original(module)  # torch's own import errors are the program's, unchanged
                if getattr(module, "__name__", None) != "torch" or _STARTED:
                    return  # a loader shared with other modules
                _STARTED.append(True)
                watcher._detach()
                try:
                    _start(module, out_dir)
                except Exception:
                    _report(out_dir, "starting torch.profiler")

            loader.exec_module = exec_module  # type: ignore[union-attr]
            return spec
        except Exception:
            _report(self.out_dir, "watching for the torch import")
            return None

    def _detach(self) -> None:
        while self in sys.meta_path:
            sys.meta_path.remove(self)


def _install() -> None:
    out_dir = os.environ.get(_DIR_ENV)
    _chain(out_dir)
    if not out_dir:
        return
    try:
        if "torch" in sys.modules:  # imported by the shadowed sitecustomize or a .pth file
            _STARTED.append(True)
            _start(sys.modules["torch"], out_dir)
        else:
            sys.meta_path.insert(0, _TorchWatcher(out_dir))
    except Exception:
        _report(out_dir, "installing the torch import hook")


_install()
