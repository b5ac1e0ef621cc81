"""Environment capture: fingerprint, env-var filter, GPU tool parsers on documented output."""

from __future__ import annotations

import copy
import json
import os
import shutil
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from aaco.collectors import environment as envmod
from aaco.collectors.environment import (
    TOOLS,
    capture_environment,
    describe_machine,
    detect_gpus,
    find_tools,
    fingerprint,
    fingerprint_fields,
    parse_amd_smi_json,
    parse_nvidia_smi_csv,
    parse_rocm_smi_json,
    selected_env_vars,
)

CAT = shutil.which("cat") or "/bin/cat"
SLEEP = shutil.which("sleep") or "/bin/sleep"
posix_only = pytest.mark.skipif(
    os.name != "posix" or not os.path.exists("/bin/sh"), reason="fake tools are shell scripts"
)

GIB = 1 << 30
MIB = 1 << 20

# nvidia-smi --query-gpu=index,name,driver_version,memory.total,uuid
#            --format=csv,noheader,nounits
NVIDIA_CSV = """\
0, NVIDIA H100 80GB HBM3, 550.54.15, 81559, GPU-5a1c2b3d-0e4f-4a6b-8c7d-9e0f1a2b3c4d
1, NVIDIA H100 80GB HBM3, 550.54.15, 81559, GPU-6b2d3c4e-1f50-4b7c-9d8e-0f1a2b3c4d5e
2, NVIDIA A10, 550.54.15, [N/A], [N/A]
"""

# amd-smi static --json, ROCm 6.1/6.2: a list of per-GPU objects
AMD_SMI_STATIC_LIST = """
[
    {
        "gpu": 0,
        "asic": {
            "market_name": "AMD Instinct MI300X",
            "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "subvendor_id": "0x1002",
            "device_id": "0x74a1",
            "rev_id": "0x00",
            "asic_serial": "0x5F3C0E2A1B7D4C21",
            "oam_id": 0
        },
        "bus": {"bdf": "0000:0c:00.0", "max_pcie_width": 16, "max_pcie_speed": "32 GT/s"},
        "vbios": {"name": "AMD MI300X", "build_date": "2023/11/22 17:33",
                  "part_number": "113-M3000100-102", "version": "022.040.003.043.000001"},
        "driver": {"name": "amdgpu", "version": "6.7.0"},
        "vram": {"type": "HBM", "vendor": "N/A",
                 "size": {"value": 196592, "unit": "MB"}, "bit_width": 8192}
    },
    {
        "gpu": 1,
        "asic": {"market_name": "N/A", "device_id": "0x74a1"},
        "board": {"product_name": "AMD Instinct MI300X OAM"},
        "driver": {"name": "amdgpu", "version": "6.7.0"},
        "vram": {"type": "HBM", "vendor": "N/A", "size": "N/A"}
    }
]
"""

# amd-smi static --json, ROCm 6.3 and later: wrapped in "gpu_data"
AMD_SMI_STATIC_WRAPPED = """
{
    "gpu_data": [
        {
            "gpu": 0,
            "asic": {"market_name": "AMD Instinct MI210", "device_id": "0x740f"},
            "driver": {"name": "amdgpu", "version": "6.10.5"},
            "vram": {"type": "HBM", "vendor": "SAMSUNG",
                     "size": {"value": 65520, "unit": "MB"}, "bit_width": 4096}
        }
    ]
}
"""

# amd-smi static --json, ROCm 6.0: driver_version and vram_size_mb
AMD_SMI_STATIC_OLD = """
[{"gpu": 0, "asic": {"market_name": "Radeon RX 7900 XTX"},
  "driver": {"driver_version": "6.3.6"},
  "vram": {"vram_type": "GDDR6", "vram_size_mb": 24560}}]
"""

# amd-smi list --json
AMD_SMI_LIST = """
[
    {"gpu": 0, "bdf": "0000:0c:00.0", "uuid": "a1ff74a1-0000-1000-80fe-6e6ba1a1b2c3",
     "kfd_id": 58183, "node_id": 2, "partition_id": 0},
    {"gpu": 1, "bdf": "0000:22:00.0", "uuid": "b2ff74a1-0000-1000-8011-2233a4b5c6d7",
     "kfd_id": 10487, "node_id": 3, "partition_id": 0}
]
"""

# rocm-smi --showproductname --showmeminfo vram --json (key spelling of ROCm 6.x)
ROCM_SMI = """
{
  "card0": {
    "VRAM Total Memory (B)": "21458059264",
    "VRAM Total Used Memory (B)": "27856896",
    "Card Series": "Radeon RX 7900 XT",
    "Card Model": "0x744c",
    "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
    "Card SKU": "D70401XT",
    "Subsystem ID": "0x471e",
    "Device Rev": "0xcc",
    "Node ID": "1",
    "GUID": "26967",
    "GFX Version": "gfx1100"
  },
  "card1": {
    "Card series": "AMD Instinct MI210",
    "Card model": "0x0c34",
    "Card vendor": "Advanced Micro Devices, Inc. [AMD/ATI]",
    "Card SKU": "D67301"
  },
  "system": {"Driver version": "6.7.0"}
}
"""


@pytest.fixture(scope="module")
def env() -> dict[str, Any]:
    return capture_environment(argv=["aaco", "run", "resnet50"], providers=["CPUExecutionProvider"])


# -- fingerprint ---------------------------------------------------------------------------


def test_fingerprint_is_stable(env: dict[str, Any]) -> None:
    again = capture_environment()
    assert env["fingerprint"] == again["fingerprint"]
    assert env["fingerprint_fields"] == again["fingerprint_fields"]
    assert len(env["fingerprint"]) == 16
    int(env["fingerprint"], 16)


def test_fingerprint_is_the_hash_of_its_fields(env: dict[str, Any]) -> None:
    assert fingerprint(env["fingerprint_fields"]) == env["fingerprint"]
    assert fingerprint_fields(env) == env["fingerprint_fields"]
    reordered = dict(reversed(list(env["fingerprint_fields"].items())))
    assert fingerprint(reordered) == env["fingerprint"]


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("cpu", "model", "Some Other CPU"),
        ("cpu", "logical_cores", 4096),
        ("memory", "total_bytes", 2048 * GIB),
        ("os", "release", "1.2.3-other"),
        ("python", "version", "3.99.0"),
        ("onnxruntime", "version", "0.0.1"),
        ("onnxruntime", "available_providers", ["ROCMExecutionProvider"]),
    ],
)
def test_fingerprint_changes_with_relevant_fields(
    env: dict[str, Any], section: str, key: str, value: object
) -> None:
    other = copy.deepcopy(env)
    other[section][key] = value
    fields = fingerprint_fields(other)
    assert fields != env["fingerprint_fields"]
    assert fingerprint(fields) != env["fingerprint"]


def test_fingerprint_sees_gpus(env: dict[str, Any]) -> None:
    other = copy.deepcopy(env)
    other["gpus"]["devices"] = parse_nvidia_smi_csv(NVIDIA_CSV)
    assert fingerprint(fingerprint_fields(other)) != env["fingerprint"]
    # the same GPUs listed in another order, or with other uuids, are the same setup
    swapped = copy.deepcopy(other)
    swapped["gpus"]["devices"].reverse()
    for d in swapped["gpus"]["devices"]:
        d["uuid"] = "GPU-other"
    assert fingerprint(fingerprint_fields(swapped)) == fingerprint(fingerprint_fields(other))


def test_fingerprint_ignores_volatile_fields(env: dict[str, Any]) -> None:
    other = copy.deepcopy(env)
    other["memory"]["available_bytes"] = 1
    other["memory"]["total_bytes"] += 3 * MIB  # firmware reservations move a little
    other["hostname"] = "elsewhere"
    other["command_line"] = ["something", "else"]
    other["env_vars"] = {"OMP_NUM_THREADS": "1"}
    if other["cpu"]["freq_mhz"] is not None:
        other["cpu"]["freq_mhz"]["current"] = 1.0
    assert fingerprint(fingerprint_fields(other)) == env["fingerprint"]


# -- the capture ---------------------------------------------------------------------------


def test_capture_is_json_ready_and_complete(env: dict[str, Any]) -> None:
    json.dumps(env, allow_nan=False)
    for key in (
        "python",
        "packages",
        "onnxruntime",
        "cpu",
        "memory",
        "os",
        "hostname",
        "env_vars",
        "gpus",
        "tools",
        "command_line",
        "container",
        "fingerprint",
        "fingerprint_fields",
    ):
        assert key in env, key
    assert env["command_line"] == ["aaco", "run", "resnet50"]
    assert env["onnxruntime"]["requested_providers"] == ["CPUExecutionProvider"]
    assert "CPUExecutionProvider" in env["onnxruntime"]["available_providers"]
    assert env["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    packages = env["packages"]
    assert packages["onnxruntime"] == env["onnxruntime"]["version"]
    assert packages["onnxruntime_distribution"] in envmod.ORT_DISTRIBUTIONS
    for name in ("aaco", "numpy", "pyarrow", "psutil"):
        assert packages[name], name
    assert "torch" in packages  # null when not installed, but always listed
    assert env["cpu"]["logical_cores"] == os.cpu_count()
    assert env["memory"]["total_bytes"] >= env["memory"]["available_bytes"] > 0
    assert set(env["tools"]) == set(TOOLS)


def test_command_line_defaults_to_sys_argv() -> None:
    assert envmod.capture_environment()["command_line"] == sys.argv


def test_env_vars_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = {
        "OMP_NUM_THREADS": "8",
        "ORT_LOGGING": "1",
        "HIP_VISIBLE_DEVICES": "0",
        "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
        "CUDA_VISIBLE_DEVICES": "1",
        "MIGRAPHX_TRACE_COMPILE": "1",
        "KMP_AFFINITY": "compact",
        "LD_LIBRARY_PATH": "/opt/rocm/lib",
    }
    unwanted = {
        "HF_TOKEN": "hf_secret",
        "CUDA_API_KEY": "k",  # right prefix, secret-looking name
        "ORT_SECRET_THING": "s",
        "OMP_PASSWORD": "p",
        "HOME": "/root",
        "PATH_EXTRA": "x",
    }
    for name, value in {**wanted, **unwanted}.items():
        monkeypatch.setenv(name, value)
    got = selected_env_vars()
    for name, value in wanted.items():
        assert got[name] == value
    for name in unwanted:
        assert name not in got
    assert selected_env_vars({"ROCR_VISIBLE_DEVICES": "0", "AWS_SECRET_ACCESS_KEY": "x"}) == {
        "ROCR_VISIBLE_DEVICES": "0"
    }
    captured = capture_environment()["env_vars"]
    assert captured["OMP_NUM_THREADS"] == "8" and "HF_TOKEN" not in captured


def test_describe_machine_is_cheap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no GPU tool can be found
    describe_machine()  # warm the onnxruntime import
    t = time.perf_counter()
    info = describe_machine()
    assert time.perf_counter() - t < 1.0
    assert set(info) == {"cpu", "memory", "os", "gpus", "onnxruntime", "tools"}
    assert info["gpus"] == {"devices": [], "sources": [], "errors": []}
    assert "CPUExecutionProvider" in info["onnxruntime"]["available_providers"]
    json.dumps(info)


# -- GPU tool parsers ----------------------------------------------------------------------


def test_parse_nvidia_smi_csv() -> None:
    devices = parse_nvidia_smi_csv(NVIDIA_CSV)
    assert devices[0] == {
        "vendor": "nvidia",
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "driver": "550.54.15",
        "memory_bytes": 81559 * MIB,
        "uuid": "GPU-5a1c2b3d-0e4f-4a6b-8c7d-9e0f1a2b3c4d",
    }
    assert [d["index"] for d in devices] == [0, 1, 2]
    assert devices[2]["memory_bytes"] is None and devices[2]["uuid"] is None
    assert devices[2]["name"] == "NVIDIA A10"
    # a comma inside the name does not shift the other fields
    odd = parse_nvidia_smi_csv("3, Some GPU, Rev 2, 535.1, 1024, GPU-x\n\n")
    assert odd[0]["name"] == "Some GPU, Rev 2" and odd[0]["memory_bytes"] == 1024 * MIB
    assert parse_nvidia_smi_csv("") == []


def test_parse_amd_smi_static_list() -> None:
    devices = parse_amd_smi_json(AMD_SMI_STATIC_LIST)
    assert devices[0] == {
        "vendor": "amd",
        "index": 0,
        "name": "AMD Instinct MI300X",
        "driver": "6.7.0",
        "memory_bytes": 196592 * MIB,
        "uuid": None,
    }
    # N/A market name falls back to the board name; N/A size is unknown, not 0
    assert devices[1]["name"] == "AMD Instinct MI300X OAM"
    assert devices[1]["memory_bytes"] is None


def test_parse_amd_smi_static_wrapped_and_old() -> None:
    (wrapped,) = parse_amd_smi_json(AMD_SMI_STATIC_WRAPPED)
    assert wrapped["name"] == "AMD Instinct MI210"
    assert wrapped["driver"] == "6.10.5"
    assert wrapped["memory_bytes"] == 65520 * MIB
    (old,) = parse_amd_smi_json(AMD_SMI_STATIC_OLD)
    assert old["driver"] == "6.3.6" and old["memory_bytes"] == 24560 * MIB


def test_parse_amd_smi_list() -> None:
    devices = parse_amd_smi_json(AMD_SMI_LIST)
    assert [(d["index"], d["uuid"]) for d in devices] == [
        (0, "a1ff74a1-0000-1000-80fe-6e6ba1a1b2c3"),
        (1, "b2ff74a1-0000-1000-8011-2233a4b5c6d7"),
    ]
    assert devices[0]["name"] is None


def test_parse_amd_smi_bad_input() -> None:
    with pytest.raises(ValueError):
        parse_amd_smi_json("amd-smi: command not found")
    assert parse_amd_smi_json('"just a string"') == []
    assert parse_amd_smi_json("[1, 2]") == []


def test_parse_rocm_smi_json() -> None:
    devices = parse_rocm_smi_json(ROCM_SMI)
    assert devices == [
        {
            "vendor": "amd",
            "index": 0,
            "name": "Radeon RX 7900 XT",
            "driver": "6.7.0",
            "memory_bytes": 21458059264,
            "uuid": None,
        },
        {
            "vendor": "amd",
            "index": 1,
            "name": "AMD Instinct MI210",
            "driver": "6.7.0",
            "memory_bytes": None,
            "uuid": None,
        },
    ]


# -- tools on PATH -------------------------------------------------------------------------


def _tool(directory: Path, name: str, script: str) -> None:
    """A fake tool; PATH will hold only ``directory``, so scripts name programs in full."""
    path = directory / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_no_tools_means_no_gpus_and_no_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert detect_gpus() == {"devices": [], "sources": [], "errors": []}
    assert find_tools() == dict.fromkeys(TOOLS)


@posix_only
def test_detect_gpus_with_fake_tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fixture = tmp_path / "nvidia.csv"
    fixture.write_text(NVIDIA_CSV)
    _tool(tmp_path, "nvidia-smi", f'{CAT} "{fixture}"\n')
    _tool(tmp_path, "amd-smi", 'echo "amdsmi_init failed: driver not loaded" >&2\nexit 1\n')
    rocm = tmp_path / "rocm.json"
    rocm.write_text(ROCM_SMI)
    _tool(tmp_path, "rocm-smi", f'{CAT} "{rocm}"\n')
    monkeypatch.setenv("PATH", str(tmp_path))

    result = detect_gpus(timeout_s=5.0)
    assert [d["vendor"] for d in result["devices"]] == ["nvidia"] * 3 + ["amd"] * 2
    assert result["sources"][0].startswith("nvidia-smi --query-gpu=")
    assert result["sources"][1] == "rocm-smi --showproductname --json"
    # amd-smi failed twice (static, then list), each recorded with its reason
    assert len(result["errors"]) == 2
    assert all("driver not loaded" in e for e in result["errors"])
    assert find_tools()["nvidia-smi"] == str(tmp_path / "nvidia-smi")


@posix_only
def test_detect_gpus_tolerates_hangs_and_garbage(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _tool(tmp_path, "nvidia-smi", f"exec {SLEEP} 10\n")
    _tool(tmp_path, "amd-smi", "echo '{not json'\n")
    monkeypatch.setenv("PATH", str(tmp_path))
    t = time.perf_counter()
    result = detect_gpus(timeout_s=0.3)
    assert time.perf_counter() - t < 5.0
    assert result["devices"] == [] and result["sources"] == []
    assert any("timed out" in e for e in result["errors"])
    assert any("unparseable" in e for e in result["errors"])
