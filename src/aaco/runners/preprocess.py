"""Host-side preprocessing steps run inside each timed iteration (``aaco run --preprocess``).

A serving loop rarely hands the model a ready tensor: it decodes, converts and resizes an
image first, on the CPU, in Python. ``--preprocess image`` puts that work inside the
measured iteration so AACO can show how much of the latency it takes (the
``preprocess_ns`` column of ``inference_iters``).

``image``: a full-HD uint8 frame (1080 x 1920 x 3, seeded, made once outside the timing) is
converted to float32 and normalised with ImageNet's mean and standard deviation, resized
(nearest neighbour, by index arithmetic) to the model input's H x W, transposed to CHW and
repeated over the batch: [N, 3, H, W] float32 for the model's first 4-D float input.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from aaco.errors import UsageError

__all__ = ["PREPROCESSORS", "ImagePreprocess", "Preprocessed", "image_input"]

FRAME_SHAPE = (1080, 1920, 3)
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32) * 255.0
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32) * 255.0


def image_input(inputs: Sequence[Any]) -> Any:
    """The first float input of rank 4 with 3 channels at axis 1 (an InputSpec), or a
    UsageError saying what ``--preprocess image`` needs."""
    for i in inputs:
        shape = list(i.shape)
        if str(i.dtype).startswith("float") and len(shape) == 4 and shape[1] == 3:
            return i
    raise UsageError(
        "--preprocess image needs a float input of shape [N, 3, H, W]; this model has "
        + ", ".join(f"{i.name} {i.dtype}{list(i.shape)}" for i in inputs)
    )


class ImagePreprocess:
    """Frame -> normalised, resized NCHW float32 tensor (see the module docstring)."""

    def __init__(self, shape: Sequence[int], seed: int = 0) -> None:
        n, _, h, w = (int(d) for d in shape)
        self.batch = n
        rng = np.random.default_rng(seed)
        self.frame = rng.integers(0, 256, size=FRAME_SHAPE, dtype=np.uint8)
        fh, fw = FRAME_SHAPE[:2]
        self.rows = (np.arange(h) * fh // h).astype(np.intp)
        self.cols = (np.arange(w) * fw // w).astype(np.intp)

    def __call__(self) -> np.ndarray:
        x = self.frame.astype(np.float32)
        x -= MEAN
        x /= STD
        x = x[self.rows][:, self.cols]
        chw = np.ascontiguousarray(x.transpose(2, 0, 1))
        out: np.ndarray = np.repeat(chw[None], self.batch, axis=0)
        return out


PREPROCESSORS: dict[str, Callable[[Sequence[int], int], Callable[[], np.ndarray]]] = {
    "image": ImagePreprocess,
}


class Preprocessed:
    """``session.run`` preceded by a preprocessing step whose duration is recorded.

    Called as ``run(output_names, feeds)`` by the timing loops; ``times`` holds one entry
    (ns) per call, in call order.
    """

    def __init__(self, run: Callable[..., Any], step: Callable[[], np.ndarray], name: str):
        self.run = run
        self.step = step
        self.name = name
        self.times: array[int] = array("q")

    def __call__(self, output_names: Any, feeds: dict[str, Any]) -> Any:
        t0 = time.perf_counter_ns()
        feeds[self.name] = self.step()
        self.times.append(time.perf_counter_ns() - t0)
        return self.run(output_names, feeds)
