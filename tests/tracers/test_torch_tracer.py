"""The torch tracer's sitecustomize in real Python processes, against a stand-in ``torch``
package whose profiler writes what it was asked (the real torch runs in
tests/cli/test_profile.py): it starts only on ``import torch``, writes one trace per process,
chains to the sitecustomize it shadows, and never breaks the program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from aaco.tracers.torch import ERROR_SUFFIX, INJECT_DIR, TRACE_DIR_ENV, TorchTracer

FAKE_TORCH = {
    "torch/__init__.py": """
        class cuda:
            @staticmethod
            def is_available():
                return False
    """,
    "torch/_C/__init__.py": "",
    "torch/_C/_profiler.py": """
        class _ExperimentalConfig:
            def __init__(self, **kwargs):
                self.kwargs = kwargs
    """,
    "torch/profiler.py": """
        import json, os

        class ProfilerActivity:
            CPU = "CPU"
            CUDA = "CUDA"

        class profile:
            def __init__(self, activities, record_shapes=False, experimental_config=None):
                if os.environ.get("FAKE_TORCH_FAIL") == "init":
                    raise RuntimeError("profiler unavailable")
                self.args = {
                    "activities": list(activities),
                    "record_shapes": record_shapes,
                    "experimental": getattr(experimental_config, "kwargs", None),
                }
                self.state = "new"

            def start(self):
                self.state = "started"

            def stop(self):
                self.state = "stopped"

            def export_chrome_trace(self, path):
                with open(path, "w") as fh:
                    json.dump({"traceEvents": [], "args": self.args, "state": self.state}, fh)
    """,
}


@pytest.fixture
def fake_torch(tmp_path: Path) -> Path:
    root = tmp_path / "fake_torch"
    for rel, text in FAKE_TORCH.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))
    return root


def run_traced(
    out: Path, program: str, *path: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c program`` with the tracer's environment, ``path`` after its folder."""
    out.mkdir(parents=True, exist_ok=True)
    tracer_env = TorchTracer().environment(out)
    tracer_env["PYTHONPATH"] = os.pathsep.join([str(INJECT_DIR), *map(str, path)])
    return subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env={**os.environ, **tracer_env, **(env or {})},
        timeout=120,
    )


def traces(out: Path) -> dict[str, dict[str, object]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}


def test_starts_on_import_torch_and_writes_the_trace_at_exit(
    tmp_path: Path, fake_torch: Path
) -> None:
    out = tmp_path / "out"
    proc = run_traced(out, "import os, torch; print(os.getpid())", fake_torch)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    pid = proc.stdout.strip()
    written = traces(out)
    assert list(written) == [f"{pid}.json"]
    trace = written[f"{pid}.json"]
    assert trace["state"] == "stopped"
    assert trace["args"] == {
        "activities": ["CPU"],
        "record_shapes": True,
        "experimental": {"enable_cuda_sync_events": True},
    }
    assert [p.name for p in out.iterdir()] == [f"{pid}.json"]  # no temporary file left
    assert TorchTracer().check_output([f"profiler/torch_traces/{pid}.json"]) is None


def test_a_process_that_never_imports_torch_writes_nothing(
    tmp_path: Path, fake_torch: Path
) -> None:
    out = tmp_path / "out"
    proc = run_traced(out, "import json; print('plain')", fake_torch)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "plain\n", "")
    assert list(out.iterdir()) == []
    assert "imported torch" in (TorchTracer().check_output([]) or "")


def test_every_python_child_writes_its_own_trace_and_forks_do_not(
    tmp_path: Path, fake_torch: Path
) -> None:
    out = tmp_path / "out"
    program = textwrap.dedent(
        """
        import os, subprocess, sys, torch
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        child = os.fork()
        if child == 0:
            sys.exit(0)  # runs the inherited atexit handler: it must not write
        os.waitpid(child, 0)
        sys.exit(3)
        """
    )
    proc = run_traced(out, program, fake_torch)
    assert proc.returncode == 3, proc.stderr  # the program's own status, unchanged
    assert len(traces(out)) == 2  # the program and its Python child, not the fork


def test_a_failing_hook_never_breaks_the_program(tmp_path: Path, fake_torch: Path) -> None:
    out = tmp_path / "out"
    proc = run_traced(
        out,
        "import os, torch; print('still running', os.getpid())",
        fake_torch,
        env={"FAKE_TORCH_FAIL": "init"},
    )
    assert proc.returncode == 0 and proc.stderr == ""
    pid = proc.stdout.split()[-1]
    assert proc.stdout.startswith("still running")
    error = out / f"{pid}{ERROR_SUFFIX}"
    assert "starting torch.profiler failed" in error.read_text()
    assert "profiler unavailable" in error.read_text()
    assert traces(out) == {}
    why = TorchTracer().check_output([f"profiler/torch_traces/{error.name}"])
    assert why is not None and "hook failed" in why


def test_chains_to_the_sitecustomize_it_shadows(tmp_path: Path, fake_torch: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.SHADOWED_RAN = True\n")
    out = tmp_path / "out"
    proc = run_traced(out, "print(SHADOWED_RAN); import torch", other, fake_torch)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "True\n", "")
    assert len(traces(out)) == 1


def test_a_broken_shadowed_sitecustomize_is_reported_not_raised(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("raise RuntimeError('broken site')\n")
    out = tmp_path / "out"
    proc = run_traced(out, "import os; print(os.getpid())", other)
    assert proc.returncode == 0 and proc.stderr == ""
    error = out / f"{proc.stdout.strip()}{ERROR_SUFFIX}"
    assert "broken site" in error.read_text()


def test_does_nothing_without_the_trace_folder(tmp_path: Path, fake_torch: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(INJECT_DIR), str(fake_torch)])}
    env.pop(TRACE_DIR_ENV, None)
    proc = subprocess.run(
        [sys.executable, "-c", "import torch, sys; print(type(sys.meta_path[0]).__name__)"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.strip() != "_TorchWatcher"
