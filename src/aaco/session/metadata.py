"""The metadata registry: every key of a bundle's description that commands compare, group
or list, with its type, unit, role and formatter (after pyperf's ``_metadata.py``).

A key is a dotted path into ``session.json`` (``run.batch``, ``backend.provider``, ``tag``)
or, prefixed ``env.``, into ``env.json`` (``env.cpu.model``, ``env.packages``). Its role says
what it is to a comparison:

``setting``
    chosen by the user and compared between runs: sessions of one configuration (pooled
    on one side of ``aaco diff``, one series of ``aaco history``, the noise floor's past
    sessions) share every setting.
``environment``
    what the machine and its software were; a change is an environment change.
``cause``
    not a setting (a change does not make another configuration), but a change of it
    between baseline and session is a candidate explanation of the difference.
``label``
    names or dates the session (``tag``, ``created_utc``, ``status``); never compared.

A setting is also a candidate cause unless its entry says ``cause=False`` (and why). The
``run.`` settings are :data:`aaco.session.catalog.RUN_SETTINGS`, and the ``run.`` causes
are the run settings ``aaco diff`` reports as a configuration change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["setting", "environment", "cause", "label"]
ROLES: tuple[Role, ...] = ("setting", "environment", "cause", "label")
#: the prefix of keys read from env.json rather than session.json
ENV_PREFIX = "env."


def _plain(value: Any) -> str:
    return str(value)


def _yes_no(value: Any) -> str:
    return "yes" if value else "no"


def _inputs(value: Any) -> str:
    """``name[1x3x224x224] float32, ...`` for ``run.inputs``."""
    if not isinstance(value, list):
        return str(value)
    parts = []
    for spec in value:
        if not isinstance(spec, Mapping):
            parts.append(str(spec))
            continue
        shape = spec.get("shape")
        dims = "x".join(str(d) for d in shape) if isinstance(shape, list) else "?"
        dtype = f" {spec['dtype']}" if spec.get("dtype") else ""
        parts.append(f"{spec.get('name', '?')}[{dims}]{dtype}")
    return ", ".join(parts)


def _versions(value: Any) -> str:
    """``name version, ...`` for a ``{package: version}`` object."""
    if not isinstance(value, Mapping):
        return str(value)
    return ", ".join(f"{k} {v}" for k, v in value.items())


def _listing(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "none"
    return str(value)


def _gib(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return f"{value / 2**30:.1f} GiB"


@dataclass(frozen=True)
class MetaKey:
    """One registered key."""

    key: str  #: dotted path; ``env.`` keys are read from env.json
    type: type  #: the type of a known value (None, unknown or unset, is always allowed)
    unit: str | None
    role: Role
    description: str  #: one line
    formatter: Callable[[Any], str] = _plain  #: a known value -> text
    #: a change between baseline and session is a candidate cause (``aaco diff``): every
    #: cause, every setting whose entry does not say otherwise (and why), and the
    #: environment keys diff compares (an environment change)
    cause: bool = False

    @property
    def in_env(self) -> bool:
        """Read from env.json (the ``env.`` prefix) rather than session.json."""
        return self.key.startswith(ENV_PREFIX)

    @property
    def path(self) -> tuple[str, ...]:
        """The key's path inside its file."""
        return tuple(self.key.removeprefix(ENV_PREFIX).split("."))

    def format(self, value: Any) -> str:
        """``value`` as text: ``unset`` (a setting or label) or ``unknown`` (environment)
        when None."""
        if value is None:
            return "unknown" if self.role == "environment" else "unset"
        return self.formatter(value)


def _setting(
    key: str,
    type_: type,
    unit: str | None,
    description: str,
    formatter: Callable[[Any], str] = _plain,
    *,
    cause: bool = True,
) -> MetaKey:
    return MetaKey(key, type_, unit, "setting", description, formatter, cause)


_KEYS: tuple[MetaKey, ...] = (
    # -- labels: what a listing shows, never compared -----------------------------------------
    MetaKey("created_utc", str, None, "label", "when the session was created (UTC, ISO 8601)"),
    MetaKey("status", str, None, "label", "running, completed, failed or timeout"),
    MetaKey("tag", str, None, "label", "the user's label for the session (--tag)"),
    MetaKey(
        "kind",
        str,
        None,
        "label",
        "what made the bundle: absent for aaco run, `import` (aaco import), `serving` "
        "(aaco llm bench / llm run)",
    ),
    # -- settings: what runs of one configuration share ------------------------------------
    _setting(
        "model.name",
        str,
        None,
        "the model profiled (registry name, file stem or torch function)",
        # a model change is judged from the model file (``model change``), not its name
        cause=False,
    ),
    _setting("backend.name", str, None, "the backend chosen (--backend; torch for PyTorch)"),
    # run.* settings, in the order RUN_SETTINGS always listed them
    _setting("run.batch", int, "items", "items one iteration processes (null: unknown)"),
    _setting("run.threads", int, "threads", "intra-op threads (null: the runtime's default)"),
    _setting("run.inputs", list, None, "input tensors: name, shape, dtype and fill", _inputs),
    _setting("run.preprocess", str, None, "host-side step inside each iteration (--preprocess)"),
    _setting("run.framework", str, None, "onnxruntime or torch (or the tool of an import)"),
    _setting(
        "run.device",
        str,
        None,
        "torch only: the device (cpu, cuda, cuda:N)",
        # a torch run's device is its backend's provider: diff reports a change of it once,
        # as backend.provider
        cause=False,
    ),
    _setting(
        "run.compile",
        bool,
        None,
        "torch only: the module was torch.compile'd",
        _yes_no,
        # aaco diff has never named a compile change among its candidate causes (its list
        # predates the torch runner); set True to make it one
        cause=False,
    ),
    # -- causes: not settings (runs that differ in them are pooled), but a change of one
    # between baseline and session may explain a difference
    MetaKey(
        "run.profile_mode",
        str,
        None,
        "cause",
        "ops or kernels: what the profiled pass, which is apart from the timed one, traced",
        cause=True,
    ),
    MetaKey(
        "backend.provider",
        str,
        None,
        "cause",
        "the execution provider (ONNX Runtime) or device (torch) the backend resolved to",
        cause=True,
    ),
    # -- environment: the machine and its software ----------------------------------------
    MetaKey(
        "fingerprint",
        str,
        None,
        "environment",
        "hash of the hardware/software fields below (env.fingerprint_fields)",
    ),
    MetaKey(
        "env.fingerprint_fields",
        dict,
        None,
        "environment",
        "what the fingerprint hashes: CPU, memory, OS, Python, ONNX Runtime, GPUs",
        cause=True,
    ),
    MetaKey(
        "env.packages",
        dict,
        None,
        "environment",
        "versions of aaco and the Python packages it runs with",
        _versions,
        cause=True,
    ),
    MetaKey(
        "env.env_vars",
        dict,
        None,
        "environment",
        "environment variables that change how runtimes behave (threads, allocators, ...)",
        cause=True,
    ),
    MetaKey(
        "env.cpu.governors",
        list,
        None,
        "environment",
        "the CPU frequency governors in use (null: not readable)",
        _listing,
        cause=True,
    ),
    MetaKey("env.gpus", dict, None, "environment", "the GPUs found and how", cause=True),
    MetaKey("env.cpu.model", str, None, "environment", "the CPU's model name"),
    MetaKey(
        "env.cpu.logical_cores",
        int,
        "cores",
        "environment",
        "logical CPUs (what the CPU-contention share is taken of)",
    ),
    MetaKey("env.memory.total_bytes", int, "B", "environment", "the machine's memory", _gib),
    MetaKey("env.os.release", str, None, "environment", "the kernel release"),
    MetaKey("env.python.version", str, None, "environment", "the Python version"),
    MetaKey("env.onnxruntime.version", str, None, "environment", "the ONNX Runtime version"),
    MetaKey("env.hostname", str, None, "environment", "the machine's host name"),
)

#: every registered key, in registry order
REGISTRY: Mapping[str, MetaKey] = {k.key: k for k in _KEYS}
if len(REGISTRY) != len(_KEYS):  # pragma: no cover - a typo in the table above
    raise RuntimeError("aaco.session.metadata: a key is registered twice")


def lookup(key: str) -> MetaKey:
    """The registry entry of ``key``; KeyError names the key when it is not registered."""
    try:
        return REGISTRY[key]
    except KeyError:
        raise KeyError(f"{key!r} is not a registered metadata key") from None


def by_role(role: Role) -> tuple[MetaKey, ...]:
    """The keys of ``role``, in registry order."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; valid: {', '.join(ROLES)}")
    return tuple(k for k in _KEYS if k.role == role)


def settings() -> tuple[MetaKey, ...]:
    """The keys with role ``setting``: what runs of one configuration share."""
    return by_role("setting")


def causes() -> tuple[MetaKey, ...]:
    """The keys a change of which ``aaco diff`` may name as a candidate cause."""
    return tuple(k for k in _KEYS if k.cause)


def run_fields(keys: Iterable[MetaKey]) -> tuple[str, ...]:
    """The field names under ``run`` of ``keys`` (``run.batch`` -> ``batch``), in order."""
    return tuple(k.key.removeprefix("run.") for k in keys if k.key.startswith("run."))


def get(meta: Mapping[str, Any] | None, key: str, env: Mapping[str, Any] | None = None) -> Any:
    """The value of ``key`` in a bundle's ``session.json`` data ``meta`` (``env.`` keys:
    in its env.json data ``env``); None when absent, or when a section on the way is not a
    JSON object (a hand-edited bundle reads as unknown rather than crashing)."""
    entry = lookup(key)
    value: Any = env if entry.in_env else meta
    for part in entry.path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def format_value(key: str, value: Any) -> str:
    """``value`` of ``key`` as text (its unit is ``lookup(key).unit``)."""
    return lookup(key).format(value)
