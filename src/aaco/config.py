"""The model registry and the backend table: built-in YAML files, overridden by the user's.

Lookup order: the built-in ``aaco/configs/{models,backends}.yaml``, then the user's
directory (``--config DIR``, else ``./configs`` when it exists). A user entry replaces the
built-in entry of the same name as a whole.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from aaco.errors import InputError, UsageError

# Keys of a backend entry that configure the session rather than the provider.
_SESSION_KEYS = {
    "provider",
    "intra_op_threads",
    "inter_op_threads",
    "graph_optimization_level",
    "execution_mode",
    "fallback_providers",
    "provider_options",
    "enable_mem_pattern",
    "enable_cpu_mem_arena",
    "io_binding",
}
_OPT_LEVELS = ("disable", "basic", "extended", "layout", "all")
#: classes a zoo model may declare (the bottleneck taxonomy's CPU-reachable ones)
ZOO_CLASSES = (
    "launch-bound",
    "cpu-bound",
    "memory-bound",
    "compute-bound",
    "latency-bound",
    "warmup-instability",
)


@dataclass(frozen=True)
class ModelEntry:
    """One model of the registry: built by a builder, or read from an ONNX file."""

    name: str
    builder: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    input_shapes: dict[str, list[int]] = field(default_factory=dict)
    dtype: str | None = None
    warmup: int | None = None
    iterations: int | None = None
    description: str = ""
    origin: str = "builtin"
    # zoo models: the bottleneck class they are built to show on a CPU
    expected_bottleneck: str | None = None
    # a host-side preprocessing step run inside each iteration (aaco.runners.preprocess)
    preprocess: str | None = None


@dataclass(frozen=True)
class BackendEntry:
    """One backend: an execution provider and the session options that go with it."""

    name: str
    provider: str
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    graph_optimization_level: str = "all"
    execution_mode: str = "sequential"
    fallback_providers: tuple[str, ...] = ()
    provider_options: dict[str, Any] = field(default_factory=dict)
    origin: str = "builtin"
    #: ONNX Runtime's session options of the same names (None: its default, on)
    enable_mem_pattern: bool | None = None
    enable_cpu_mem_arena: bool | None = None
    #: bind the inputs once and run with IO binding instead of ``session.run``
    io_binding: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "provider": self.provider,
            "intra_op_threads": self.intra_op_threads,
            "inter_op_threads": self.inter_op_threads,
            "graph_optimization_level": self.graph_optimization_level,
            "execution_mode": self.execution_mode,
            "fallback_providers": list(self.fallback_providers),
            "provider_options": dict(self.provider_options),
            "origin": self.origin,
            "enable_mem_pattern": self.enable_mem_pattern,
            "enable_cpu_mem_arena": self.enable_cpu_mem_arena,
            "io_binding": self.io_binding,
        }


@dataclass(frozen=True)
class Registry:
    models: dict[str, ModelEntry]
    backends: dict[str, BackendEntry]
    sources: tuple[str, ...]

    def model(self, name: str) -> ModelEntry:
        try:
            return self.models[name]
        except KeyError:
            raise UsageError(
                f"unknown model {name!r}: give a path to an .onnx file or one of "
                f"{', '.join(sorted(self.models))}"
            ) from None

    def backend(self, name: str) -> BackendEntry:
        """A backend by table name, or any ONNX Runtime provider name given as is."""
        if name in self.backends:
            return self.backends[name]
        lowered = {k.lower(): v for k, v in self.backends.items()}
        if name.lower() in lowered:
            return lowered[name.lower()]
        if name.endswith("ExecutionProvider"):
            return BackendEntry(name=name, provider=name, origin="command line")
        raise UsageError(
            f"unknown backend {name!r}: use one of {', '.join(sorted(self.backends))} "
            "or an ONNX Runtime provider name such as CPUExecutionProvider"
        )


#: LibYAML's safe loader where PyYAML was built with it (10x faster, the same documents)
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_PARSED: dict[tuple[str, int, int], Any] = {}


def _parse_yaml(path: Path) -> Any:
    """``path``'s YAML, parsed once per (path, mtime, size) per process: the registry is
    read on every run, and ``aaco ab`` and ``aaco tune`` run many. A copy is returned, so
    callers may change it."""
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _PARSED:
        _PARSED[key] = yaml.load(path.read_text(), Loader=_LOADER)
    return copy.deepcopy(_PARSED[key])


def _read_yaml(path: Path, top_key: str) -> dict[str, Any]:
    try:
        data = _parse_yaml(path)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{path}: not valid YAML{where}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict) or not isinstance(data.get(top_key, {}), dict):
        raise InputError(f"{path}: expected a mapping under a top-level '{top_key}:' key")
    section = data.get(top_key) or {}
    for name, entry in section.items():
        if not isinstance(entry, dict):
            raise InputError(f"{path}: entry {name!r} must be a mapping")
    return dict(section)


def _int_or_none(value: Any, what: str, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{where}: {what} must be a non-negative integer, got {value!r}")
    return value


def parse_model_entry(
    name: str, raw: Mapping[str, Any], base_dir: Path | None, origin: str
) -> ModelEntry:
    where = f"{origin}: model {name!r}"
    builder = raw.get("builder")
    path_value = raw.get("path")
    if (builder is None) == (path_value is None):
        raise InputError(f"{where}: give exactly one of 'builder' or 'path'")
    path = None
    if path_value is not None:
        path = Path(str(path_value)).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
    shapes_raw = raw.get("input_shapes") or {}
    if not isinstance(shapes_raw, dict):
        raise InputError(f"{where}: input_shapes must map input names to lists of ints")
    shapes: dict[str, list[int]] = {}
    for inp, dims in shapes_raw.items():
        if not isinstance(dims, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims
        ):
            raise InputError(f"{where}: input_shapes.{inp} must be a list of non-negative ints")
        shapes[str(inp)] = list(dims)
    params = raw.get("params") or {}
    if not isinstance(params, dict):
        raise InputError(f"{where}: params must be a mapping")
    expected = raw.get("expected_bottleneck")
    if expected is not None and expected not in ZOO_CLASSES:
        raise InputError(f"{where}: expected_bottleneck must be one of {', '.join(ZOO_CLASSES)}")
    preprocess = raw.get("preprocess")
    if preprocess is not None and not isinstance(preprocess, str):
        raise InputError(f"{where}: preprocess must be a name, e.g. image")
    return ModelEntry(
        name=name,
        builder=str(builder) if builder is not None else None,
        params=dict(params),
        path=path,
        input_shapes=shapes,
        dtype=str(raw["dtype"]) if raw.get("dtype") is not None else None,
        warmup=_int_or_none(raw.get("warmup"), "warmup", where),
        iterations=_int_or_none(raw.get("iterations"), "iterations", where),
        description=str(raw.get("description", "")),
        origin=origin,
        expected_bottleneck=expected,
        preprocess=preprocess,
    )


def parse_backend_entry(name: str, raw: Mapping[str, Any], origin: str) -> BackendEntry:
    where = f"{origin}: backend {name!r}"
    provider = raw.get("provider")
    if not isinstance(provider, str) or not provider:
        raise InputError(f"{where}: 'provider' (an ONNX Runtime provider name) is required")
    level = str(raw.get("graph_optimization_level", "all")).lower()
    if level not in _OPT_LEVELS:
        raise InputError(f"{where}: graph_optimization_level must be one of {_OPT_LEVELS}")
    mode = str(raw.get("execution_mode", "sequential")).lower()
    if mode not in ("sequential", "parallel"):
        raise InputError(f"{where}: execution_mode must be sequential or parallel")
    fallback = raw.get("fallback_providers") or []
    if not isinstance(fallback, list):
        raise InputError(f"{where}: fallback_providers must be a list")
    options: dict[str, Any] = dict(raw.get("provider_options") or {})
    for key, value in raw.items():
        if key not in _SESSION_KEYS:
            options[key] = value
    if provider == "MIGraphXExecutionProvider":
        # The design documents write `fp16_enable`; the provider wants `migraphx_fp16_enable`.
        options = {
            (k if k == "device_id" or k.startswith("migraphx_") else f"migraphx_{k}"): v
            for k, v in options.items()
        }
    return BackendEntry(
        name=name,
        provider=provider,
        intra_op_threads=_int_or_none(raw.get("intra_op_threads"), "intra_op_threads", where),
        inter_op_threads=_int_or_none(raw.get("inter_op_threads"), "inter_op_threads", where),
        graph_optimization_level=level,
        execution_mode=mode,
        fallback_providers=tuple(str(p) for p in fallback),
        provider_options=options,
        origin=origin,
        enable_mem_pattern=_bool_or_none(
            raw.get("enable_mem_pattern"), "enable_mem_pattern", where
        ),
        enable_cpu_mem_arena=_bool_or_none(
            raw.get("enable_cpu_mem_arena"), "enable_cpu_mem_arena", where
        ),
        io_binding=bool(_bool_or_none(raw.get("io_binding"), "io_binding", where)),
    )


def _bool_or_none(value: Any, key: str, where: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InputError(f"{where}: {key} must be true or false")


def _builtin_file(name: str) -> Path:
    return Path(str(resources.files("aaco") / "configs" / name))


def load_registry(config_dir: Path | None = None, cwd: Path | None = None) -> Registry:
    """The merged registry: built-in entries, overridden by ``config_dir`` (or ./configs)."""
    sources: list[str] = []
    models: dict[str, ModelEntry] = {}
    backends: dict[str, BackendEntry] = {}

    def merge(models_file: Path, backends_file: Path, origin_dir: Path | None) -> None:
        if models_file.is_file():
            sources.append(str(models_file))
            for name, raw in _read_yaml(models_file, "models").items():
                models[str(name)] = parse_model_entry(
                    str(name),
                    raw,
                    origin_dir,
                    "builtin" if origin_dir is None else str(models_file),
                )
        if backends_file.is_file():
            sources.append(str(backends_file))
            for name, raw in _read_yaml(backends_file, "backends").items():
                backends[str(name)] = parse_backend_entry(
                    str(name), raw, "builtin" if origin_dir is None else str(backends_file)
                )

    merge(_builtin_file("models.yaml"), _builtin_file("backends.yaml"), None)
    if config_dir is not None:
        if not config_dir.is_dir():
            raise InputError(f"{config_dir}: config directory not found")
        user_dir: Path | None = config_dir
    else:
        local = (cwd or Path.cwd()) / "configs"
        user_dir = local if local.is_dir() else None
    if user_dir is not None:
        merge(user_dir / "models.yaml", user_dir / "backends.yaml", user_dir)
    return Registry(models=models, backends=backends, sources=tuple(sources))


def parse_shape_arg(text: str) -> tuple[str, list[int]]:
    """``name=1x3x224x224`` (also ``name=1,3,224,224``) -> ("name", [1, 3, 224, 224]).

    ``-1`` leaves a dimension open (resolved as the model's own dynamic dimensions are:
    ``--batch`` for the leading one); ``name=scalar`` (or ``name=[]``) is a rank-0 input.
    """
    name, sep, dims_text = text.partition("=")
    dims_text = dims_text.strip()
    if not sep or not name.strip() or not dims_text:
        raise UsageError(
            f"malformed --shape {text!r}: expected NAME=D1xD2x... e.g. input=1x3x224x224"
        )
    if dims_text.lower() in ("scalar", "[]", "()"):
        return name.strip(), []
    parts = dims_text.strip("[]()").replace(",", "x").split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise UsageError(
            f"malformed --shape {text!r}: dimensions must be integers, e.g. input=1x3x224x224"
        ) from None
    if any(d < -1 for d in dims):
        raise UsageError(
            f"malformed --shape {text!r}: dimensions must be >= 0 (or -1 to leave one open)"
        )
    return name.strip(), dims


def parse_input_arg(text: str) -> tuple[str, str]:
    """``name=16000`` or ``name=path/to/array.npy`` -> ("name", "16000")."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise UsageError(
            f"malformed --input {text!r}: expected NAME=NUMBER or NAME=FILE.npy, e.g. sr=16000"
        )
    return name.strip(), value.strip()


def parse_int_range(text: str) -> tuple[int, int]:
    """``0:1000`` -> (0, 1000), the half-open range integer inputs are drawn from."""
    lo_text, sep, hi_text = text.partition(":")
    try:
        lo, hi = int(lo_text), int(hi_text)
    except ValueError:
        raise UsageError(
            f"malformed --int-range {text!r}: expected LOW:HIGH, e.g. 0:1000"
        ) from None
    if not sep or hi <= lo:
        raise UsageError(f"malformed --int-range {text!r}: expected LOW:HIGH with LOW < HIGH")
    return lo, hi
