"""The --preprocess option: the image pipeline's output, and its time inside each iteration."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from aaco.runners.preprocess import MEAN, STD, ImagePreprocess


def test_image_pipeline_output_by_construction() -> None:
    pre = ImagePreprocess([2, 3, 4, 6], seed=1)
    out = pre()
    assert out.shape == (2, 3, 4, 6) and out.dtype == np.float32
    # nearest neighbour: output row i, col j comes from frame row i*1080//4, col j*1920//6
    i, j, ch = 3, 5, 1
    px = float(pre.frame[i * 1080 // 4, j * 1920 // 6, ch])
    assert out[1, ch, i, j] == np.float32((np.float32(px) - MEAN[ch]) / STD[ch])
    assert np.array_equal(out[0], out[1])  # the frame repeated over the batch


def aaco(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1")
    return subprocess.run([sys.executable, "-m", "aaco", *args], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)  # fmt: skip


def test_preprocess_time_is_recorded_inside_each_iteration(tmp_path: Path) -> None:
    p = aaco("run", "--model", "zoo-host", "--warmup", "1", "--iterations", "5", "--no-profile",
             "--report", "none", "-o", "s", cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr
    t = pq.read_table(tmp_path / "s" / "latest" / "metrics" / "inference_iters.parquet")
    pre, lat = t.column("preprocess_ns").to_pylist(), t.column("latency_ns").to_pylist()
    assert len(pre) == 6 and all(x is not None and 0 < x < y for x, y in zip(pre, lat, strict=True))
    # the same model with --preprocess none: no step, no column values
    p = aaco("run", "--model", "zoo-host", "--preprocess", "none", "--iterations", "3",
             "--no-profile", "--report", "none", "-o", "n", cwd=tmp_path)  # fmt: skip
    assert p.returncode == 0, p.stderr
    t = pq.read_table(tmp_path / "n" / "latest" / "metrics" / "inference_iters.parquet")
    assert t.column("preprocess_ns").null_count == t.num_rows


def test_bad_preprocess_options_are_one_line_errors(tmp_path: Path) -> None:
    cases = [
        (["--model", "zoo-host", "--preprocess", "video"], "unknown --preprocess 'video'"),
        (["--model", "mlp", "--preprocess", "image"], "--preprocess image needs a float input"),
        (["--framework", "torch", "--model", "m:f", "--preprocess", "image"],
         "--preprocess applies to --framework onnxruntime"),
    ]  # fmt: skip
    for args, msg in cases:
        p = aaco("run", *args, "-o", "s", cwd=tmp_path)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.startswith(f"aaco: error: {msg}"), p.stderr
        assert len(p.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()  # nothing was started, no bundle left behind
