"""The table of built-in model builders, and an on-disk cache of the models they build."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import platformdirs
from onnx import helper

from aaco.errors import UsageError
from aaco.models.bert import bert
from aaco.models.gpt2 import gpt2
from aaco.models.resnet import resnet50
from aaco.models.small import mlp, tiny_convnet
from aaco.models.zoo import (
    zoo_compute,
    zoo_image,
    zoo_latency,
    zoo_launch,
    zoo_memory,
    zoo_warmup,
)

BUILDERS: dict[str, Callable[..., onnx.ModelProto]] = {
    "mlp": mlp,
    "tiny-convnet": tiny_convnet,
    "resnet50": resnet50,
    "bert": bert,
    "gpt2": gpt2,
    "zoo-launch": zoo_launch,
    "zoo-compute": zoo_compute,
    "zoo-memory": zoo_memory,
    "zoo-latency": zoo_latency,
    "zoo-image": zoo_image,
    "zoo-warmup": zoo_warmup,
}

# Part of every cache key: bump it whenever any builder's output changes for the same params.
BUILDER_VERSION = 1


def cache_dir() -> Path:
    """Where built models are kept: ``$AACO_CACHE_DIR``, else the user cache dir of aaco."""
    env = os.environ.get("AACO_CACHE_DIR")
    if env:
        return Path(env)
    return Path(platformdirs.user_cache_dir("aaco")) / "models"


def resolve_params(builder: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Return every keyword of ``builder`` with ``params`` applied over its defaults.

    Raises UsageError for an unknown builder name or a parameter the builder does not take.
    """
    fn = _builder(builder)
    signature = inspect.signature(fn)
    given = dict(params or {})
    for key in given:
        if key not in signature.parameters:
            valid = ", ".join(signature.parameters)
            raise UsageError(f"builder {builder!r} has no param {key!r}; its params are: {valid}")
    resolved = {name: p.default for name, p in signature.parameters.items()}
    resolved.update(given)
    return resolved


def build(builder: str, params: Mapping[str, Any] | None = None) -> onnx.ModelProto:
    """Build the model ``builder`` makes with ``params``, in memory."""
    return _builder(builder)(**resolve_params(builder, params))


def cache_key(builder: str, params: Mapping[str, Any] | None = None) -> str:
    """The 12 hex digits naming the cached file of ``builder`` with ``params``.

    Defaults are filled in first, so ``{}`` and the explicit defaults share one file.
    """
    resolved = resolve_params(builder, params)
    blob = json.dumps(
        [builder, sorted(resolved.items()), BUILDER_VERSION], sort_keys=True, default=str
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def build_cached(builder: str, params: Mapping[str, Any] | None = None) -> Path:
    """Return the path of the built model, building and writing it first if it is not cached.

    The file appears atomically (temp file in the same folder, then ``os.replace``), so a
    concurrent reader or a crash never sees a partial model; two concurrent builders both
    build, and the last rename wins with identical content.
    """
    path = cache_dir() / f"{builder}-{cache_key(builder, params)}.onnx"
    if path.is_file():
        return path
    model = build(builder, params)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(model.SerializeToString())
            f.flush()
            os.fsync(f.fileno())
        tmp.chmod(0o644)  # mkstemp makes it 0600; a cached model is no secret
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def describe(builder: str, params: Mapping[str, Any] | None = None) -> tuple[int, int]:
    """(parameter count, parameter bytes) of a built-in model, without building its weights."""
    from aaco.models._graph import shapes_only

    with shapes_only():
        return count_parameters(build(builder, params))


def count_parameters(model: onnx.ModelProto | str | os.PathLike[str]) -> tuple[int, int]:
    """Return (element count, bytes) summed over the initializers of ``model``.

    Everything stored as an initializer counts, BatchNormalization running statistics
    included (torchvision calls those buffers, not parameters). A path is read without its
    external data, since only dims and types are needed.
    """
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(os.fspath(model), load_external_data=False)
    count = 0
    size = 0
    for tensor in model.graph.initializer:
        n = int(np.prod(tensor.dims, dtype=np.int64))
        count += n
        size += _nbytes(tensor.data_type, n)
    return count, size


# Sub-byte types are packed; getattr because older onnx releases lack some of them.
_PACKED_BITS = {
    getattr(onnx.TensorProto, name): bits
    for name, bits in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
    if hasattr(onnx.TensorProto, name)
}


def _nbytes(data_type: int, n: int) -> int:
    if data_type in _PACKED_BITS:
        return (n * _PACKED_BITS[data_type] + 7) // 8
    if data_type == onnx.TensorProto.STRING:
        return 0  # variable length, and never a weight of a model we profile
    return n * int(helper.tensor_dtype_to_np_dtype(data_type).itemsize)


def _builder(name: str) -> Callable[..., onnx.ModelProto]:
    try:
        return BUILDERS[name]
    except KeyError:
        valid = ", ".join(BUILDERS)
        raise UsageError(f"unknown model builder {name!r}; built-in builders: {valid}") from None
