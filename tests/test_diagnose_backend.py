"""Which ceilings a bundle is diagnosed against comes from what it recorded, never from which
runner wrote it: an execution provider, or the device a runner without providers used."""

from __future__ import annotations

import pytest

from aaco.diagnose import _backend


@pytest.mark.parametrize(
    ("backend", "kind", "expected"),
    [
        (
            {"name": "cpu", "provider": "CPUExecutionProvider"},
            None,
            ("CPUExecutionProvider", "cpu"),
        ),
        (
            {"name": "cuda", "provider": "CUDAExecutionProvider"},
            None,
            ("CUDAExecutionProvider", "cuda"),
        ),
        (
            {"name": "rocm", "provider": "ROCMExecutionProvider"},
            None,
            ("ROCMExecutionProvider", "rocm"),
        ),
        # a provider AACO has no calibration backend for is still the provider
        ({"name": "dml", "provider": "DmlExecutionProvider"}, None, ("DmlExecutionProvider", None)),
        # PyTorch records its device as the provider
        ({"name": "torch", "provider": "cpu"}, None, (None, "cpu")),
        ({"name": "torch", "provider": "cuda"}, None, (None, "cuda")),
        ({"name": "torch", "provider": "cuda:1"}, None, (None, "cuda")),
        # an unknown device: no ceilings rather than a guess
        ({"name": "x", "provider": "tpu:0"}, None, (None, None)),
        ({"name": None, "provider": None}, None, (None, None)),
        ({"name": "cpu", "provider": "CPUExecutionProvider"}, "import", (None, None)),
    ],
)
def test_backend_of_a_bundle(
    backend: dict[str, str | None], kind: str | None, expected: tuple[str | None, str | None]
) -> None:
    meta = {"backend": backend, "run": {"framework": "whatever"}}
    if kind:
        meta["kind"] = kind
    assert _backend(meta) == expected
