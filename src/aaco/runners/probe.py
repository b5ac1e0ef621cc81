"""Find input shapes a model runs with, for the hint of an open-dimension error.

When a model leaves non-leading dimensions open (an OCR model's height and width, a speech
model's sample count), ``aaco run`` cannot guess the size the user cares about, so it stops
with a usage error. The error carries a command that works when pasted: candidate shapes
(:func:`candidate_shapes`) are tried once each, with the inputs the real run would use, in
a child process (``python -m aaco.runners.probe SPEC``) that a timeout bounds, so a model
that crashes, hangs or eats memory on a bad shape cannot take the parent with it.

Example::

    try:
        specs = resolve_inputs(proto)
    except UnresolvedShapes as exc:
        found = probe_shapes(path, proto, exc)
        found.shapes      # {"x": (1, 3, 224, 224)} or None when no candidate ran
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from aaco.runners.inputs import (
    InputSpec,
    ModelInput,
    OpenDim,
    UnresolvedShapes,
    build_specs,
    feed_value,
    make_array,
)

__all__ = [
    "FALLBACK_SIZES",
    "ProbeOutcome",
    "candidate_shapes",
    "hint_command",
    "implied_sizes",
    "probe_shapes",
]

#: sizes tried for every open dimension at once, after the size each one's role suggests
FALLBACK_SIZES = (128, 64, 32, 256, 16, 512, 8, 1)
#: image side tried first for the height and width of an NCHW/NHWC input
IMAGE_SIDE = 224
#: the length tried first for any other open dimension (a sequence, a sample count)
SEQUENCE_LENGTH = 128
#: candidates whose inputs together exceed this are not tried
MAX_CANDIDATE_BYTES = 1 << 30
DEFAULT_TIMEOUT_S = 120.0
_CHANNELS = (1, 2, 3, 4)


@dataclass(frozen=True)
class ProbeOutcome:
    """The first candidate that ran (``shapes``; None when none did), the number tried and
    the first line of each failure."""

    shapes: dict[str, tuple[int, ...]] | None
    tried: int
    errors: list[str] = field(default_factory=list)


def _role_size(inp: ModelInput, axis: int, partial: Sequence[int | None]) -> int | None:
    """The size an open dimension's role suggests: the batch for the middle dimension of a
    recurrent state ([layers x directions, batch, hidden]), an image side for the height and
    width of an image, else a sequence length. None: the batch (filled by the caller)."""
    rank = len(partial)
    if rank == 3 and axis == 1 and partial[0] in _CHANNELS and partial[2]:
        return None
    is_float = inp.elem_type in (
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.BFLOAT16,
    )
    if is_float and rank == 4:
        spatial: tuple[int, int] | None = None
        if partial[1] in _CHANNELS and axis in (2, 3):
            spatial = (2, 3)  # NCHW
        elif partial[3] in _CHANNELS and axis in (1, 2):
            spatial = (1, 2)  # NHWC
        if spatial is not None:
            other = partial[spatial[0] if axis == spatial[1] else spatial[1]]
            # a fixed other side larger than the default (a 48x? text line stays 224 wide)
            return max(IMAGE_SIDE, other) if other else IMAGE_SIDE
    return SEQUENCE_LENGTH


# Ops that hand their first input's axes through unchanged (unary, or broadcasting against
# constants): a size an op further on needs is a size of the graph input.
_SAME_AXES = frozenset({
    "Identity", "Cast", "CastLike", "Dropout", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Abs",
    "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Clip", "Elu", "Selu", "Softplus", "Softsign",
    "HardSigmoid", "HardSwish", "Erf", "Floor", "Ceil", "Round", "Add", "Sub", "Mul", "Div",
    "Pow", "BatchNormalization", "InstanceNormalization", "QuantizeLinear",
    "DequantizeLinear",
})  # fmt: skip
_RECURRENT = frozenset({"LSTM", "GRU", "RNN", "DynamicQuantizeLSTM"})


def implied_sizes(model: onnx.ModelProto) -> dict[tuple[str, int], int]:
    """Sizes of graph-input axes that the model's weights impose: the feature size an LSTM,
    GRU, RNN, MatMul, Gemm or Conv with an initializer weight needs of its input, followed
    back to a graph input through ops that only add, drop, permute or keep axes (Unsqueeze,
    Squeeze, Transpose, elementwise ops against constants). Keys: (input name, axis).
    An axis two consumers disagree on is left out."""
    graph = model.graph
    weights = {t.name: list(t.dims) for t in graph.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for t in dict.fromkeys(node.input):
            if t:
                consumers.setdefault(t, []).append(node)
    found: dict[tuple[str, int], set[int]] = {}
    # tensor -> for each of its axes, the graph-input axis it is (or None)
    Axes = list[tuple[str, int] | None]
    inits = set(weights)
    start: list[tuple[str, Axes]] = []
    for vi in graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        rank = len(vi.type.tensor_type.shape.dim)
        if vi.type.tensor_type.HasField("shape"):
            start.append((vi.name, [(vi.name, i) for i in range(rank)]))
    stack = list(start)
    seen: set[str] = set()

    def need(axes: Axes, axis: int, size: int) -> None:
        if -len(axes) <= axis < len(axes) and axes[axis] is not None and size > 0:
            found.setdefault(axes[axis], set()).add(int(size))  # type: ignore[arg-type]

    while stack:
        tensor, axes = stack.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        for node in consumers.get(tensor, []):
            op = node.op_type
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            first = node.input[0] == tensor if node.input else False
            w = weights.get(node.input[1]) if len(node.input) > 1 else None
            out = node.output[0] if node.output else ""
            if op in _RECURRENT and first and w is not None and len(w) == 3:
                need(axes, 2, w[2])
            elif op == "MatMul" and first and w is not None and len(w) >= 2:
                need(axes, -1, w[-2])
            elif op == "Gemm" and first and w is not None and len(w) == 2:
                k = w[1] if attrs.get("transB") else w[0]
                need(axes, 0 if attrs.get("transA") else 1, k)
            elif op == "Conv" and first and w is not None and len(w) >= 3:
                need(axes, 1, w[1] * int(attrs.get("group", 1)))
            elif not out:
                continue
            elif op in _SAME_AXES and (first or op in ("Add", "Mul")):
                others = [t for t in node.input if t and t != tensor]
                if all(t in inits for t in others):
                    stack.append((out, axes))
            elif op == "Transpose" and first:
                perm = attrs.get("perm") or list(range(len(axes)))[::-1]
                if sorted(perm) == list(range(len(axes))):
                    stack.append((out, [axes[p] for p in perm]))
            elif op in ("Unsqueeze", "Squeeze") and first:
                ax = attrs.get("axes")
                if ax is None and len(node.input) > 1:
                    ax = _const_ints(graph, node.input[1])
                if ax is None:
                    continue
                if op == "Unsqueeze":
                    new_rank = len(axes) + len(ax)
                    pos = sorted(a % new_rank for a in ax)
                    it = iter(axes)
                    stack.append((out, [None if i in pos else next(it) for i in range(new_rank)]))
                else:
                    drop = {a % len(axes) for a in ax}
                    stack.append((out, [x for i, x in enumerate(axes) if i not in drop]))
    return {k: next(iter(v)) for k, v in found.items() if len(v) == 1}


def _const_ints(graph: onnx.GraphProto, name: str) -> list[int] | None:
    for t in graph.initializer:
        if t.name == name:
            return [int(x) for x in onnx.numpy_helper.to_array(t).ravel()]
    return None


def candidate_shapes(
    exc: UnresolvedShapes,
    max_candidates: int = 1 + 2 * len(FALLBACK_SIZES),
    implied: Mapping[tuple[str, int], int] | None = None,
) -> list[dict[str, tuple[int, ...]]]:
    """Concrete shapes to try, best guess first: each open dimension at the size its role
    suggests, then every open dimension at each of :data:`FALLBACK_SIZES`. Open dimensions
    sharing a model symbol get one size; a size the model's weights imply (``implied``,
    from :func:`implied_sizes`) is kept in every candidate."""
    implied = implied or {}
    declared = {i.name: i for i in exc.declared}
    leading = [s[0] for s in exc.partial.values() if s and s[0] is not None]
    batch = leading[0] if leading else 1
    roles = {od: _role_size(declared[od.input], od.axis, exc.partial[od.input])
             for od in exc.open_dims}  # fmt: skip

    def fill(size_of: Mapping[OpenDim, int]) -> dict[str, tuple[int, ...]]:
        by_symbol: dict[str, int] = {}
        shapes: dict[str, list[int | None]] = {k: list(v) for k, v in exc.partial.items()}
        for od in exc.open_dims:
            # a recurrent state's batch follows the batch whatever the other sizes
            size = batch if roles[od] is None else size_of[od]
            size = implied.get((od.input, od.axis), size)
            if od.symbol is not None:
                size = by_symbol.setdefault(od.symbol, size)
            shapes[od.input][od.axis] = size
        return {k: tuple(int(d) for d in v if d is not None) for k, v in shapes.items()}

    out: list[dict[str, tuple[int, ...]]] = []
    guesses = [{od: role or SEQUENCE_LENGTH for od, role in roles.items()}]
    guesses += [{od: size for od in exc.open_dims} for size in FALLBACK_SIZES]
    for guess in guesses:
        cand = fill(guess)
        if cand not in out:
            out.append(cand)
    # then the leading dimensions that took the default batch as sequences too (an audio
    # model's frames): last, since a batch of 1 is what the user most likely wants
    for size in FALLBACK_SIZES if exc.default_leading else ():
        cand = fill({od: size for od in exc.open_dims})
        for name in exc.default_leading:
            dims = cand[name]
            if dims and implied.get((name, 0)) is None:
                cand[name] = (size, *dims[1:])
        if cand not in out:
            out.append(cand)
    return out[:max_candidates]


def probe_shapes(
    model_path: Path,
    model: onnx.ModelProto,
    exc: UnresolvedShapes,
    *,
    int_range: tuple[int, int] | None = None,
    values: Mapping[str, str] | None = None,
    seed: int = 0,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ProbeOutcome:
    """Run the model once with each candidate (in a child process, on ONNX Runtime's CPU
    provider, inputs generated with ``seed`` exactly as the real run generates them) and
    return the first that ran. Never raises for what the model does; a timeout or a crash
    of the child ends the search with what it found so far."""
    candidates: list[list[dict[str, Any]]] = []
    for shapes in candidate_shapes(exc, implied=implied_sizes(model)):
        try:
            specs = build_specs(model, exc.declared, shapes, int_range, values)
        except Exception:
            continue
        if sum(s.nbytes for s in specs) > MAX_CANDIDATE_BYTES:
            continue
        candidates.append([s.to_json() for s in specs])
    if not candidates:
        return ProbeOutcome(None, 0, ["no candidate shape fits in memory"])
    with tempfile.TemporaryDirectory(prefix="aaco-probe-") as tmp:
        spec_file = Path(tmp) / "probe.json"
        out_file = Path(tmp) / "result.jsonl"
        spec_file.write_text(
            json.dumps(
                {
                    "model": str(model_path),
                    "seed": seed,
                    "candidates": candidates,
                    "out": str(out_file),
                }
            )
        )
        with contextlib.suppress(subprocess.TimeoutExpired):
            subprocess.run(
                [sys.executable, "-m", "aaco.runners.probe", str(spec_file)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=timeout_s,
                check=False,
            )
        return _read_outcome(out_file, candidates)


def _read_outcome(out_file: Path, candidates: list[list[dict[str, Any]]]) -> ProbeOutcome:
    errors: list[str] = []
    tried = 0
    try:
        lines = out_file.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        tried += 1
        if rec.get("ok"):
            specs = [InputSpec.from_json(d) for d in candidates[int(rec["index"])]]
            return ProbeOutcome({s.name: s.shape for s in specs}, tried, errors)
        errors.append(str(rec.get("error") or "failed"))
    if tried < len(candidates) and not errors:
        errors.append("the model could not be loaded or run in time")
    return ProbeOutcome(None, tried, errors)


def hint_command(argv: Sequence[str], shapes: Mapping[str, Sequence[int]]) -> str:
    """``argv`` (an ``aaco run`` command line) with its ``--shape`` options for ``shapes``'
    inputs replaced by the given shapes, quoted for a POSIX shell."""
    # drop "--shape NAME=..." pairs (and "--shape=NAME=...") for the inputs being given
    cleaned: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        value: str | None = None
        step = 1
        if arg == "--shape" and i + 1 < len(argv):
            value = argv[i + 1]
            step = 2
        elif arg.startswith("--shape="):
            value = arg.removeprefix("--shape=")
        if value is not None and value.partition("=")[0].strip() in shapes:
            i += step
            continue
        cleaned.append(arg)
        i += 1
    for name, dims in shapes.items():
        text = "x".join(str(d) for d in dims) if dims else "scalar"
        cleaned += ["--shape", f"{name}={text}"]
    return shlex.join(cleaned)


# --------------------------------------------------------------------------- child


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    # ORT prefixes "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : "; keep its own words
    line = text.splitlines()[0] if text else type(exc).__name__
    return line[:300]


def main(argv: list[str] | None = None) -> int:
    """Child side: load the model once, run each candidate once, append one JSON line per
    candidate to the result file, stop at the first that runs."""
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(Path(args[0]).read_text())
    out = Path(spec["out"])

    def record(rec: dict[str, Any]) -> None:
        with out.open("a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())

    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(spec["model"], so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        record({"index": -1, "ok": False, "error": f"model did not load: {_first_line(exc)}"})
        return 1
    for index, cand in enumerate(spec["candidates"]):
        specs = [InputSpec.from_json(d) for d in cand]
        rng = np.random.default_rng(int(spec["seed"]))
        try:
            feeds = {s.name: feed_value(s, make_array(s, rng)) for s in specs}
            sess.run(None, feeds)
        except Exception as exc:
            record({"index": index, "ok": False, "error": _first_line(exc)})
            continue
        record({"index": index, "ok": True})
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
