"""``aaco run --framework torch`` and ``--profile kernels`` from the command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import torch  # noqa: F401
except ModuleNotFoundError as exc:  # only an absent torch skips; a broken one is an error
    if exc.name != "torch":
        raise
    pytest.skip("PyTorch (optional extra aaco[torch]) is not installed", allow_module_level=True)

AACO = shutil.which("aaco", path=str(Path(sys.executable).parent)) or "aaco"
FIXTURES = Path(__file__).parents[1] / "fixtures" / "torch_models.py"


def aaco(
    *args: str, module: bool = False, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "aaco", *args] if module else [AACO, *args]
    full_env = dict(os.environ, NO_COLOR="1", COLUMNS="120", **(env or {}))
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=cwd, timeout=300)


def one_line_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_torch_run_json_report(tmp_path: Path) -> None:
    proc = aaco(
        "run",
        "--framework",
        "torch",
        "--model",
        f"{FIXTURES}:tiny_mlp",
        "--warmup",
        "1",
        "--iterations",
        "5",
        "--profile-iterations",
        "2",
        "--no-telemetry",
        "--report",
        "json",
        "-o",
        str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["summary"]["latency_ms"]["count"] == 5
    bundle = Path(proc.stderr.strip().splitlines()[-1].removeprefix("bundle: "))
    meta = json.loads((bundle / "session.json").read_text())
    assert meta["run"]["framework"] == "torch"
    assert meta["run"]["model_spec"] == f"{FIXTURES}:tiny_mlp"
    assert meta["command_line"][:3] == ["aaco", "run", "--framework"]
    assert (bundle / "profiler" / "torch_trace.json.gz").is_file()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--model", "nosuch_module_h6:build"],
            "aaco: error: --model nosuch_module_h6:build: cannot import module 'nosuch_module_h6'",
        ),
        (
            ["--model", f"{FIXTURES}:missing"],
            f"aaco: error: --model {FIXTURES}:missing: {FIXTURES} has no attribute 'missing'",
        ),
        (
            ["--model", f"{FIXTURES}:module_only"],
            f"aaco: error: --model {FIXTURES}:module_only: module_only() must return "
            "(nn.Module, example_inputs), got Linear",
        ),
        (
            ["--model", f"{FIXTURES}:tiny_mlp", "--device", "cuda"],
            "aaco: error: --device cuda: no GPU available to torch",
        ),
        (
            ["--model", f"{FIXTURES}:tiny_mlp", "--backend", "cuda"],
            "aaco: error: --backend chooses an ONNX Runtime provider; "
            "with --framework torch use --device",
        ),
    ],
)
def test_torch_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], expected: str) -> None:
    proc = aaco("run", "--framework", "torch", *args, "--no-telemetry", "-o", str(tmp_path))
    assert one_line_error(proc, 2).startswith(expected)
    assert not list(tmp_path.rglob("session.json"))


def test_torch_missing_is_one_line(tmp_path: Path) -> None:
    # torch is installed here: the runner's one check of it is made to say it is not
    code = (
        "import aaco.runners.torch as t; t.torch_installed = lambda: False; "
        "from aaco.cli import main; "
        f"main(['run', '--framework', 'torch', '--model', 'm:f', '-o', {str(tmp_path)!r}])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert one_line_error(proc, 2) == (
        "aaco: error: PyTorch is not installed; install it with pip install 'aaco[torch]'"
    )


def test_profile_kernels_errors(tmp_path: Path) -> None:
    proc = aaco("run", "--model", "mlp", "--profile", "kernels", "-o", str(tmp_path), module=True)
    line = one_line_error(proc, 2)
    assert "CPUExecutionProvider runs no GPU kernels" in line
    # (rocprofv3 missing on a ROCm backend: tests/runners/test_rocprof_capture.py)
    proc = aaco("run", "--model", "mlp", "--profile", "kernels", "--no-profile")
    assert one_line_error(proc, 2) == (
        "aaco: error: --profile kernels and --no-profile contradict each other"
    )
    proc = aaco("run", "--model", "mlp", "--compile", "-o", str(tmp_path))
    assert one_line_error(proc, 2) == "aaco: error: --compile applies to --framework torch"
    assert not list(tmp_path.rglob("session.json"))
