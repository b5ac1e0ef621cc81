"""Which GPU a session's lake row names: only the one the environment says the run used."""

from __future__ import annotations

from typing import Any

import pytest

from aaco.lake.rows import used_gpu

GPUS: list[dict[str, Any]] = [
    {"vendor": "nvidia", "index": 0, "name": "NVIDIA H100", "uuid": "GPU-aaa", "driver": "580"},
    {"vendor": "nvidia", "index": 1, "name": "NVIDIA H100", "uuid": "GPU-bbb", "driver": "580"},
]


@pytest.mark.parametrize(
    ("env_vars", "index"),
    [
        ({}, None),  # two GPUs, nothing says which: unknown, not GPU 0
        ({"CUDA_VISIBLE_DEVICES": "1"}, 1),  # as Ray sets it for a task of one GPU
        ({"CUDA_VISIBLE_DEVICES": "GPU-bbb"}, 1),
        ({"HIP_VISIBLE_DEVICES": "0"}, 0),
        ({"ROCR_VISIBLE_DEVICES": "1"}, 1),
        ({"CUDA_VISIBLE_DEVICES": "0,1"}, None),  # the run saw both
        ({"CUDA_VISIBLE_DEVICES": "7"}, None),  # no such GPU listed
    ],
)
def test_the_gpu_used_is_named_only_when_known(env_vars: dict[str, str], index: int | None) -> None:
    picked = used_gpu({"env_vars": env_vars}, GPUS)
    assert (None if picked is None else picked["index"]) == index


def test_a_single_gpu_is_the_one_used() -> None:
    assert used_gpu({}, GPUS[:1]) is GPUS[0]
    assert used_gpu({}, []) is None
