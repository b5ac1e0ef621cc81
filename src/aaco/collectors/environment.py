"""The environment lockbox: what machine and software a session ran on, and a fingerprint of it."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psutil

from aaco import __version__
from aaco.collectors.system import cpu_governors
from aaco.session.fingerprint import fingerprint, fingerprint_fields

TOOLS: tuple[str, ...] = (
    "rocprofv3",
    "rocprof",
    "rocprof-compute",
    "nsys",
    "ncu",
    "amd-smi",
    "rocm-smi",
    "nvidia-smi",
    "migraphx-driver",
    "perf",
)

#: the distributions that install the ``onnxruntime`` module, most common first
ORT_DISTRIBUTIONS: tuple[str, ...] = (
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxruntime-rocm",
    "onnxruntime-migraphx",
    "onnxruntime-openvino",
    "onnxruntime-directml",
    "onnxruntime-qnn",
    "onnxruntime-training",
)

_PACKAGES: tuple[str, ...] = ("aaco", "onnx", "numpy", "pyarrow", "psutil", "torch")

ENV_PREFIXES: tuple[str, ...] = (
    "OMP_",
    "ORT_",
    "HIP_",
    "HSA_",
    "ROCR_",
    "ROCM_",
    "CUDA_",
    "NVIDIA_",
    "MKL_",
    "OPENBLAS_",
    "KMP_",
    "GOMP_",
    "MIGRAPHX_",
)
#: exact names recorded besides the prefixes: they decide which libraries (and allocators)
#: get loaded
ENV_NAMES: tuple[str, ...] = ("LD_LIBRARY_PATH", "LD_PRELOAD")
_SECRET_WORDS: tuple[str, ...] = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")

#: CPU feature flags that change which kernels ONNX Runtime's MLAS picks, per architecture
CPU_FLAGS: dict[str, tuple[str, ...]] = {
    "x86": (
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx_vnni",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
    ),
    "arm": ("asimd", "asimddp", "asimdhp", "sve", "sve2", "i8mm", "bf16", "sme"),
}

_GIB = 1 << 30
_MIB = 1 << 20
_UNITS = {
    "B": 1,
    "KB": 1 << 10,
    "KIB": 1 << 10,
    "MB": _MIB,
    "MIB": _MIB,
    "GB": _GIB,
    "GIB": _GIB,
    "TB": 1 << 40,
    "TIB": 1 << 40,
}
_MISSING = frozenset({"", "n/a", "[n/a]", "[not supported]", "not supported", "none", "unknown"})


# -- small readers ---------------------------------------------------------------------


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    except Exception:  # a broken METADATA file must not break the capture
        return None


def _cpuinfo() -> tuple[str | None, set[str] | None]:
    """Model name and feature flags of the first processor listed in /proc/cpuinfo."""
    text = _read_text("/proc/cpuinfo")
    if text is None:
        return None, None
    model: str | None = None
    flags: set[str] | None = None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if model is not None and flags is not None:
                break  # end of the first processor block
            continue
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and model is None and value.strip():
            model = value.strip()
        elif key in ("flags", "features") and flags is None:
            flags = set(value.split())
    return model, flags


def _cpu_freq_mhz() -> dict[str, float | None] | None:
    try:
        freq = psutil.cpu_freq()
    except Exception:  # psutil raises assorted errors on exotic /proc layouts
        return None
    if freq is None:
        return None

    def positive(v: float) -> float | None:
        return float(v) if v and v > 0 else None

    return {"min": positive(freq.min), "max": positive(freq.max), "current": positive(freq.current)}


def _flags_of_interest() -> tuple[str, ...]:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64", "i386", "i686"):
        return CPU_FLAGS["x86"]
    if machine in ("aarch64", "arm64") or machine.startswith("arm"):
        return CPU_FLAGS["arm"]
    return CPU_FLAGS["x86"] + CPU_FLAGS["arm"]


def _cpu() -> dict[str, Any]:
    model, flags = _cpuinfo()
    governors = cpu_governors()
    try:
        usable: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {
        "model": model or platform.processor() or platform.machine() or None,
        "architecture": platform.machine() or None,
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "usable_cores": usable,
        "governors": sorted(set(governors.values())) if governors else None,
        "freq_mhz": _cpu_freq_mhz(),
        "flags": None if flags is None else {f: f in flags for f in _flags_of_interest()},
        "amx": None if flags is None else any(f.startswith("amx") for f in flags),
    }


def _memory() -> dict[str, int]:
    vm = psutil.virtual_memory()
    return {"total_bytes": int(vm.total), "available_bytes": int(vm.available)}


def _os_release() -> str | None:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        text = _read_text(path)
        if text is None:
            continue
        for line in text.splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.partition("=")[2].strip().strip("\"'") or None
    return None


def _os() -> dict[str, str | None]:
    return {
        "system": platform.system() or None,
        "release": platform.release() or None,
        "kernel_version": platform.version() or None,
        "distro": _os_release(),
    }


def _onnxruntime(providers: Sequence[str] | None) -> dict[str, Any]:
    installed = {d: v for d in ORT_DISTRIBUTIONS if (v := _dist_version(d)) is not None}
    info: dict[str, Any] = {
        "version": None,
        "distribution": None,
        "distributions_installed": installed,
        "available_providers": None,
        "device": None,
        "requested_providers": list(providers) if providers is not None else None,
        "error": None,
    }
    try:
        import onnxruntime as ort

        info["version"] = str(ort.__version__)
        info["available_providers"] = [str(p) for p in ort.get_available_providers()]
        info["device"] = str(ort.get_device())
    except Exception as exc:  # a broken GPU build can fail at import time in many ways
        info["error"] = f"{type(exc).__name__}: {exc}"
    # Several distributions can be installed over each other (a classic source of "why is
    # it not using the GPU"); the one whose version matches the imported module is the one
    # that actually won.
    matching = [d for d, v in installed.items() if v == info["version"]]
    if matching:
        info["distribution"] = matching[0]
    elif installed:
        info["distribution"] = next(iter(installed))
    return info


def _packages(ort_info: Mapping[str, Any]) -> dict[str, str | None]:
    versions: dict[str, str | None] = {name: _dist_version(name) for name in _PACKAGES}
    if versions["aaco"] is None:
        versions["aaco"] = __version__
    dist = ort_info.get("distribution")
    versions["onnxruntime"] = ort_info.get("version") or (
        ort_info["distributions_installed"].get(dist) if dist else None
    )
    versions["onnxruntime_distribution"] = dist
    return versions


def selected_env_vars(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables that steer threading, BLAS and GPU runtimes.

    Names starting with one of :data:`ENV_PREFIXES`, plus :data:`ENV_NAMES`; any name
    containing TOKEN, KEY, SECRET, PASSWORD, PASSWD or CREDENTIAL is left out whatever
    its prefix, so a credential never lands in a bundle that gets shared.
    """
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name in sorted(env):
        upper = name.upper()
        if any(word in upper for word in _SECRET_WORDS):
            continue
        if upper.startswith(ENV_PREFIXES) or upper in ENV_NAMES:
            out[name] = env[name]
    return out


def _cgroup_cpu_quota() -> dict[str, Any]:
    """The CPU bandwidth limit of this process's cgroup (v2 ``cpu.max``, else v1 CFS)."""
    candidates = ["/sys/fs/cgroup/cpu.max"]
    text = _read_text("/proc/self/cgroup")
    if text:
        for line in text.splitlines():
            if line.startswith("0::"):
                rel = line[3:].strip().lstrip("/")
                if rel:
                    candidates.insert(0, os.path.join("/sys/fs/cgroup", rel, "cpu.max"))
    for path in candidates:
        raw = _read_text(path)
        if raw is None:
            continue
        parts = raw.split()
        quota = None if not parts or parts[0] == "max" else _to_int(parts[0])
        period = _to_int(parts[1]) if len(parts) > 1 else None
        return {
            "cpu_max": raw.strip(),
            "quota_cores": quota / period if quota and period else None,
        }
    for base in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
        q = _read_text(os.path.join(base, "cpu.cfs_quota_us"))
        p = _read_text(os.path.join(base, "cpu.cfs_period_us"))
        if q is None or p is None:
            continue
        quota, period = _to_int(q), _to_int(p)
        return {
            "cpu_max": f"{q.strip()} {p.strip()}",
            "quota_cores": quota / period if quota and quota > 0 and period else None,
        }
    return {"cpu_max": None, "quota_cores": None}


def _container() -> dict[str, Any]:
    return {
        "dockerenv": os.path.exists("/.dockerenv"),
        "containerenv": os.path.exists("/run/.containerenv"),
        **_cgroup_cpu_quota(),
    }


# -- tools and GPUs --------------------------------------------------------------------


def find_tools() -> dict[str, str | None]:
    """Absolute path of each profiling / GPU tool of :data:`TOOLS` on PATH, else None."""
    return {tool: shutil.which(tool) for tool in TOOLS}


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip().lower() in _MISSING)


def _to_int(value: Any) -> int | None:
    if _missing(value) or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    try:
        return int(str(value).strip(), 0)
    except ValueError:
        try:
            return int(float(str(value).strip()))
        except ValueError:
            return None


def _to_str(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("value")
    if _missing(value):
        return None
    return str(value).strip()


def _to_bytes(value: Any, default_unit: str) -> int | None:
    """A size given as a number, a ``"123 MB"`` string or ``{"value": 123, "unit": "MB"}``.

    GPU tools write MB/GB for what are binary units (an MI300X reports 196592 MB of VRAM,
    that is 192 GiB), so MB and GB are read as MiB and GiB.
    """
    unit = default_unit
    if isinstance(value, dict):
        unit = str(value.get("unit") or default_unit)
        value = value.get("value")
    if _missing(value):
        return None
    if isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", value)
        if not match:
            return None
        value, unit = match.group(1), match.group(2) or unit
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    scale = _UNITS.get(unit.strip().upper())
    return None if scale is None else int(number * scale)


def _device(
    vendor: str,
    index: int | None,
    name: str | None,
    driver: str | None,
    memory_bytes: int | None,
    uuid: str | None,
) -> dict[str, Any]:
    return {
        "vendor": vendor,
        "index": index,
        "name": name,
        "driver": driver,
        "memory_bytes": memory_bytes,
        "uuid": uuid,
    }


def parse_nvidia_smi_csv(text: str) -> list[dict[str, Any]]:
    """Parse ``nvidia-smi --query-gpu=index,name,driver_version,memory.total,uuid
    --format=csv,noheader,nounits``: one line per GPU, fields in the order queried,
    separated by ``", "``, memory in MiB, ``[N/A]``/``[Not Supported]`` for unknowns.

    Index, driver, memory and uuid are taken by position from both ends so that a comma
    inside the product name cannot shift them.
    """
    devices: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        mib = _to_int(parts[-2])
        devices.append(
            _device(
                "nvidia",
                _to_int(parts[0]),
                _to_str(", ".join(parts[1:-3])),
                _to_str(parts[-3]),
                mib * _MIB if mib is not None else None,
                _to_str(parts[-1]),
            )
        )
    return devices


def _get(entry: Mapping[str, Any], *path: str) -> Any:
    node: Any = entry
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _first(entry: Mapping[str, Any], *paths: tuple[str, ...]) -> Any:
    for path in paths:
        value = _get(entry, *path)
        if not _missing(value) and not (isinstance(value, dict) and _missing(value.get("value"))):
            return value
    return None


def parse_amd_smi_json(text: str) -> list[dict[str, Any]]:
    """Parse ``amd-smi static --json`` (or ``amd-smi list --json``).

    Accepts the list of per-GPU objects of ROCm 6.0-6.2 and the ``{"gpu_data": [...]}``
    wrapper of later releases; values may be plain, ``{"value": .., "unit": ..}`` or
    ``"N/A"``. Field names moved between releases, so each is looked up at every place
    it has lived: name at ``asic.market_name`` or ``board.product_name``; driver at
    ``driver.version`` or ``driver.driver_version``; VRAM at ``vram.size`` (MB when no
    unit is given) or ``vram.vram_size_mb``; uuid at top level (``list``) or under asic.
    """
    data = json.loads(text)
    if isinstance(data, Mapping):
        inner = data.get("gpu_data", data.get("gpus"))
        entries: list[Any] = inner if isinstance(inner, list) else [data]
    elif isinstance(data, list):
        entries = data
    else:
        return []
    devices: list[dict[str, Any]] = []
    for position, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            continue
        index = _to_int(_first(entry, ("gpu",), ("gpu_id",), ("index",)))
        driver = _first(
            entry, ("driver", "version"), ("driver", "driver_version"), ("driver_version",)
        )
        if driver is None and isinstance(entry.get("driver"), str):
            driver = entry["driver"]
        memory = _first(entry, ("vram", "size"), ("vram", "vram_size"))
        memory_bytes = _to_bytes(memory, "MB") if memory is not None else None
        if memory_bytes is None:
            memory_bytes = _to_bytes(_get(entry, "vram", "vram_size_mb"), "MB")
        devices.append(
            _device(
                "amd",
                position if index is None else index,
                _to_str(
                    _first(
                        entry,
                        ("asic", "market_name"),
                        ("board", "product_name"),
                        ("market_name",),
                        ("name",),
                    )
                ),
                _to_str(driver),
                memory_bytes,
                _to_str(_first(entry, ("uuid",), ("asic", "uuid"), ("bus", "uuid"))),
            )
        )
    return devices


def parse_rocm_smi_json(text: str) -> list[dict[str, Any]]:
    """Parse ``rocm-smi --showproductname --json``: ``{"card0": {"Card Series": ..}, ..}``.

    Key spelling varies between releases ("Card Series" / "Card series"), so keys are
    matched case-insensitively. When the caller added ``--showdriverversion``,
    ``--showmeminfo vram`` or ``--showuniqueid``, the driver (``system`` object), VRAM
    total and unique id are taken too.
    """
    data = json.loads(text)
    if not isinstance(data, Mapping):
        return []
    system = {str(k).lower(): v for k, v in (data.get("system") or {}).items()}
    driver = _to_str(system.get("driver version"))
    devices: list[dict[str, Any]] = []
    for key, card in data.items():
        match = re.fullmatch(r"card(\d+)", str(key))
        if not match or not isinstance(card, Mapping):
            continue
        fields = {str(k).lower(): v for k, v in card.items()}
        name = _to_str(
            fields.get("card series") or fields.get("device name") or fields.get("card sku")
        )
        devices.append(
            _device(
                "amd",
                int(match.group(1)),
                name,
                _to_str(fields.get("driver version")) or driver,
                _to_int(fields.get("vram total memory (b)")),
                _to_str(fields.get("unique id")),
            )
        )
    return devices


def _run_tool(argv: Sequence[str], timeout_s: float) -> tuple[str | None, str | None]:
    """stdout of a tool, or None and a one-line reason; never raises."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None, f"{' '.join(argv)}: timed out after {timeout_s:g} s"
    except OSError as exc:
        return None, f"{' '.join(argv)}: {exc}"
    if done.returncode != 0:
        detail = (done.stderr or done.stdout or "").strip().splitlines()
        tail = detail[-1] if detail else "no output"
        return None, f"{' '.join(argv)}: exit {done.returncode}: {tail}"
    return done.stdout, None


def _try_parse(
    argv: Sequence[str],
    parser: Callable[[str], list[dict[str, Any]]],
    timeout_s: float,
    sources: list[str],
    errors: list[str],
) -> list[dict[str, Any]]:
    out, err = _run_tool(argv, timeout_s)
    if err is not None:
        errors.append(err)
        return []
    try:
        devices = parser(out or "")
    except (ValueError, TypeError, AttributeError) as exc:
        errors.append(f"{' '.join(argv)}: unparseable output: {exc}")
        return []
    sources.append(" ".join(argv))
    return devices


def detect_gpus(timeout_s: float = 5.0) -> dict[str, Any]:
    """GPUs as the vendor tools on PATH report them; failures are recorded, never raised.

    NVIDIA via ``nvidia-smi``; AMD via ``amd-smi static --json``, then ``amd-smi list
    --json`` if that fails, then ``rocm-smi`` if amd-smi is absent or found nothing.
    Returns ``{"devices": [{vendor, index, name, driver, memory_bytes, uuid}],
    "sources": [command lines that answered], "errors": [one line per failure]}``.
    """
    devices: list[dict[str, Any]] = []
    sources: list[str] = []
    errors: list[str] = []
    if shutil.which("nvidia-smi"):
        devices += _try_parse(
            [
                "nvidia-smi",
                "--query-gpu=index,name,driver_version,memory.total,uuid",
                "--format=csv,noheader,nounits",
            ],
            parse_nvidia_smi_csv,
            timeout_s,
            sources,
            errors,
        )
    amd: list[dict[str, Any]] = []
    if shutil.which("amd-smi"):
        amd = _try_parse(
            ["amd-smi", "static", "--json"], parse_amd_smi_json, timeout_s, sources, errors
        )
        if not amd:
            amd = _try_parse(
                ["amd-smi", "list", "--json"], parse_amd_smi_json, timeout_s, sources, errors
            )
    if not amd and shutil.which("rocm-smi"):
        amd = _try_parse(
            ["rocm-smi", "--showproductname", "--json"],
            parse_rocm_smi_json,
            timeout_s,
            sources,
            errors,
        )
    devices += amd
    return {"devices": devices, "sources": sources, "errors": errors}


# -- the two entry points --------------------------------------------------------------


def capture_environment(
    argv: Sequence[str] | None = None,
    providers: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Everything about this machine and software that can explain a performance number.

    JSON-ready. Sections: ``python``, ``packages`` (versions, null when not installed,
    plus ``onnxruntime_distribution``), ``onnxruntime`` (version, distribution, all
    distributions installed, available providers, device, ``requested_providers`` as
    passed), ``cpu``, ``memory``, ``os``, ``hostname``, ``env_vars`` (see
    :func:`selected_env_vars`), ``gpus`` (:func:`detect_gpus`), ``tools``
    (:func:`find_tools`), ``command_line`` (``argv``, default ``sys.argv``),
    ``container`` (``/.dockerenv``, ``/run/.containerenv``, cgroup CPU quota),
    ``fingerprint`` and ``fingerprint_fields``.

    ``fingerprint`` is :func:`fingerprint` over ``fingerprint_fields``, which
    :func:`fingerprint_fields` documents: CPU model, architecture, core counts, CPU
    flags, memory total in GiB, OS system/release/distro, Python version, onnxruntime
    version/distribution/available providers, GPU vendor/name/driver. Two sessions with
    the same fingerprint ran on the same hardware and software stack; diff the
    ``fingerprint_fields`` of two captures to see what changed. The requested providers
    are a run setting, not the environment, and are not part of it.
    """
    ort_info = _onnxruntime(providers)
    env: dict[str, Any] = {
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "packages": _packages(ort_info),
        "onnxruntime": ort_info,
        "cpu": _cpu(),
        "memory": _memory(),
        "os": _os(),
        "hostname": socket.gethostname(),
        "env_vars": selected_env_vars(),
        "gpus": detect_gpus(),
        "tools": find_tools(),
        "command_line": list(sys.argv if argv is None else argv),
        "container": _container(),
    }
    fields = fingerprint_fields(env)
    env["fingerprint"] = fingerprint(fields)
    env["fingerprint_fields"] = fields
    return env


def describe_machine() -> dict[str, Any]:
    """What ``aaco info`` shows: CPU, memory, OS, GPUs, onnxruntime providers, tools.

    Cheap: well under a second when no GPU tool is installed (the GPU tools themselves
    can take seconds, bounded by :func:`detect_gpus`' timeout).
    """
    ort_info = _onnxruntime(None)
    return {
        "cpu": _cpu(),
        "memory": _memory(),
        "os": _os(),
        "gpus": detect_gpus(),
        "onnxruntime": {
            k: ort_info[k]
            for k in ("version", "distribution", "available_providers", "device", "error")
        },
        "tools": find_tools(),
    }
