"""Tests of the Kineto / Chrome-trace importer on a recorded CPU trace and generated GPU traces.

The CUDA and ROCm traces are written here in Kineto's layout (pretty-printed events, args as
the PyTorch profiler writes them, see /work/shared/formats.md); every expected value below is
known by construction.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from aaco.errors import InputError
from aaco.importers.base import TraceTables, read_head
from aaco.importers.kineto import KinetoImporter, api_kind, memcpy_kind
from aaco.session.schema import ANNOTATIONS, API_CALLS, KERNELS, MEMCPY, OPS

FIXTURES = Path(__file__).parent / "fixtures" / "kineto"
PID = 4242
TID = 4243


def _event_text(ev: Any) -> str:
    """One event as Kineto's ChromeTraceLogger lays it out (2-space indent, args block)."""
    if not isinstance(ev, dict) or not isinstance(ev.get("args", {}), dict):
        return f"  {json.dumps(ev)}"
    head = {k: v for k, v in ev.items() if k != "args"}
    keys = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items())
    if "args" not in ev:
        return f"  {{\n    {keys}\n  }}"
    args = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in ev["args"].items())
    return f'  {{\n    {keys},\n    "args": {{\n      {args}\n    }}\n  }}'


def _write(path: Path, top: dict[str, Any], events: list[Any], gz: bool = False) -> Path:
    parts = ["{"]
    for k, v in top.items():
        parts.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    parts.append('  "traceEvents": [')
    parts.append(",\n".join(_event_text(e) for e in events))
    parts.append('  ],\n  "traceName": "t.json",\n  "baseTimeNanoseconds": 1700000000000000000\n}')
    data = "\n".join(parts).encode()
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def _x(cat: str, name: str, pid: Any, tid: Any, ts: float, dur: float, **args: Any) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip


def _flow(ph: str, corr: int, pid: int, tid: int, ts: float) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": ph, "id": corr, "pid": pid, "tid": tid, "ts": ts}
    ev.update({"cat": "ac2g", "name": "ac2g"})
    return ev


GEMM = "ampere_sgemm_128x64_tn"
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::relu>(int)"


def cuda_events() -> list[dict[str, Any]]:
    """Two steps; each: linear -> addmm -> cudaLaunchKernel -> GEMM on stream 7, a copy."""
    evs: list[dict[str, Any]] = []
    for step, t0 in ((5, 1000.0), (6, 2000.0)):
        ext = step * 10
        corr = step * 100
        evs.append(
            _x(
                "user_annotation",
                f"ProfilerStep#{step}",
                PID,
                TID,
                t0,
                500.0,
                **{"External id": ext},
            )
        )
        evs.append(
            _x(
                "cpu_op",
                "aten::addmm",
                PID,
                TID,
                t0 + 10.5,
                100.25,
                **{"External id": ext + 1, "Input Dims": [[16], [2, 8], [8, 16]]},
            )
        )
        evs.append(
            _x(
                "cuda_runtime",
                "cudaLaunchKernel",
                PID,
                TID,
                t0 + 20.001,
                5.5,
                **{"External id": ext + 1, "cbid": 211, "correlation": corr},
            )
        )
        evs.append(_flow("s", corr, PID, TID, t0 + 20.001))
        # the kernel of step 5 runs late, inside step 6's CPU window: its iteration must
        # still be 5 (from its launch), not the window containing its start
        k_ts = t0 + 30.0 if step == 6 else 2000.5
        evs.append(
            _x(
                "kernel",
                GEMM,
                0,
                7,
                k_ts,
                40.125,
                **{
                    "External id": ext + 1,
                    "queued": 0,
                    "device": 0,
                    "context": 1,
                    "stream": 7,
                    "correlation": corr,
                    "registers per thread": 128,
                    "shared memory": 16384,
                    "blocks per SM": 0.5,
                    "warps per SM": 2.0,
                    "grid": [4, 2, 1],
                    "block": [256, 1, 1],
                    "est. achieved occupancy %": 12,
                },
            )
        )
        evs.append(_flow("f", corr, 0, 7, k_ts))
        evs.append(
            _x(
                "cuda_runtime",
                "cudaMemcpyAsync",
                PID,
                TID,
                t0 + 200.0,
                9.0,
                **{"External id": ext + 2, "cbid": 41, "correlation": corr + 1},
            )
        )
        evs.append(
            _x(
                "gpu_memcpy",
                "Memcpy DtoH (Device -> Pageable)",
                0,
                7,
                t0 + 210.0,
                3.0,
                **{
                    "External id": ext + 2,
                    "device": 0,
                    "context": 1,
                    "stream": 7,
                    "correlation": corr + 1,
                    "bytes": 128,
                    "memory bandwidth (GB/s)": 0.04,
                },
            )
        )
        evs.append(
            _x(
                "cuda_runtime",
                "cudaStreamSynchronize",
                PID,
                TID,
                t0 + 210.0,
                4.0,
                **{"External id": ext + 3, "cbid": 131, "correlation": corr + 2},
            )
        )
        evs.append(
            _x(
                "cuda_sync",
                "Stream Sync",
                0,
                7,
                t0 + 212.0,
                2.0,
                **{
                    "External id": ext + 3,
                    "cuda_sync_kind": "Stream Sync",
                    "stream": 7,
                    "correlation": corr + 2,
                    "device": 0,
                    "context": 1,
                },
            )
        )
    evs.append(
        _x(
            "gpu_memset",
            "Memset (Device)",
            0,
            7,
            2600.0,
            1.0,
            **{"device": 0, "context": 1, "stream": 7, "correlation": 999, "bytes": 64},
        )
    )
    evs.append(
        _x(
            "python_function",
            "torch/nn/modules/module.py(1): _call_impl",
            PID,
            TID,
            1000.0,
            1.0,
            **{"Python id": 1},
        )
    )
    evs.append(
        {
            "name": "thread_name",
            "ph": "M",
            "ts": 1000.0,
            "pid": 0,
            "tid": 7,
            "args": {"name": "stream 7 "},
        }
    )
    evs.append(
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 3000.0}
    )
    return evs  # fmt: skip


CUDA_TOP: dict[str, Any] = {
    "schemaVersion": 1,
    "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
    "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "warpSize": 32, "numSms": 132}],
}


@pytest.fixture
def cuda_trace(tmp_path: Path) -> Path:
    return _write(tmp_path / "rank0.json", CUDA_TOP, cuda_events())


def test_api_kind_names() -> None:
    launches = ["cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                "cudaGraphLaunch", "cuGraphLaunch", "hipLaunchKernel", "hipExtLaunchKernel",
                "hipExtModuleLaunchKernel", "hipModuleLaunchKernel", "hipGraphLaunch",
                "cudaLaunchCooperativeKernel", "cudaLaunchKernel_ptsz"]  # fmt: skip
    assert {api_kind(n) for n in launches} == {"launch"}
    assert api_kind("cudaMemcpyAsync") == "memcpy"
    assert api_kind("hipMemcpyWithStream") == "memcpy"
    assert api_kind("cudaMemsetAsync") == "memset"
    assert api_kind("cudaStreamSynchronize") == "sync"
    assert api_kind("cudaEventSynchronize") == "sync"
    assert api_kind("cudaStreamWaitEvent") == "sync"
    assert api_kind("cudaMalloc") == "alloc"
    assert api_kind("hipFree") == "alloc"
    assert api_kind("cudaGetDevice") == "other"
    assert memcpy_kind("Memcpy HtoD (Pageable -> Device)") == "HtoD"
    assert memcpy_kind("Memcpy PtoP (Device -> Device)") == "PtoP"
    assert memcpy_kind("Memset (Device)") == "memset"
    assert memcpy_kind("Copy", "DtoD") == "DtoD"
    assert memcpy_kind("Copy") == "unknown"


def test_cuda_trace(cuda_trace: Path) -> None:
    assert KinetoImporter.sniff(cuda_trace, read_head(cuda_trace))
    t = KinetoImporter().read(cuda_trace)
    for spec, table in ((KERNELS, t.kernels), (API_CALLS, t.api_calls), (MEMCPY, t.memcpy),
                        (OPS, t.ops), (ANNOTATIONS, t.annotations)):  # fmt: skip
        assert table.schema == spec.schema
    k = t.kernels.to_pylist()
    assert [r["name"] for r in k] == [GEMM, GEMM]
    first = k[0]
    assert first["start_ns"] == 2_000_500 and first["dur_ns"] == 40_125
    assert first["end_ns"] == 2_040_625
    assert (first["device"], first["stream"], first["correlation_id"]) == (0, 7, 500)
    assert first["external_id"] == 51
    assert (first["grid_x"], first["grid_y"], first["grid_z"]) == (4, 2, 1)
    assert (first["block_x"], first["block_y"], first["block_z"]) == (256, 1, 1)
    assert (first["registers"], first["shared_bytes"]) == (128, 16384)
    assert (first["process_id"], first["thread_id"]) == (PID, TID)
    assert first["time_is_gpu"] is True
    assert first["short_name"] is None and first["family"] is None
    # iteration from the launch call, even though the kernel ran inside step 6's window
    assert [r["iteration"] for r in k] == [5, 6]

    ops = t.ops.to_pylist()
    assert [(o["node_name"], o["op_type"], o["iteration"]) for o in ops] == [
        ("aten::addmm", "aten::addmm", 5),
        ("aten::addmm", "aten::addmm", 6),
    ]
    assert ops[0]["start_ns"] == 1_010_500 and ops[0]["dur_ns"] == 100_250
    assert ops[0]["external_id"] == 51 and ops[0]["process_id"] == PID
    assert json.loads(ops[0]["input_shapes"]) == [[16], [2, 8], [8, 16]]
    assert ops[0]["source"] == "pytorch" and ops[0]["provider"] is None

    # rows are grouped by category inside each decoded piece: order by time to compare
    api = sorted(t.api_calls.to_pylist(), key=lambda a: (a["start_ns"], a["name"]))
    assert [(a["name"], a["kind"], a["domain"]) for a in api[:4]] == [
        ("cudaLaunchKernel", "launch", "cuda_runtime"),
        ("cudaMemcpyAsync", "memcpy", "cuda_runtime"),
        ("cudaStreamSynchronize", "sync", "cuda_runtime"),
        ("Stream Sync", "sync", "cuda_sync"),
    ]
    assert api[3]["start_ns"] == 1_212_000
    assert api[0]["start_ns"] == 1_020_001 and api[0]["end_ns"] == 1_025_501
    # cuda_sync lives on the device track: no host pid/tid
    assert api[3]["process_id"] is None and api[3]["thread_id"] is None
    assert api[0]["process_id"] == PID

    mc = sorted(t.memcpy.to_pylist(), key=lambda m: m["start_ns"])
    assert [(m["kind"], m["bytes"], m["iteration"]) for m in mc] == [
        ("DtoH", 128, 5),
        ("DtoH", 128, 6),
        ("memset", 64, None),
    ]
    ann = t.annotations.to_pylist()
    assert [(a["kind"], a["step"], a["start_ns"], a["dur_ns"]) for a in ann] == [
        ("step", 5, 1_000_000, 500_000),
        ("step", 6, 2_000_000, 500_000),
    ]
    meta = t.meta
    assert meta["flavour"] == "cuda" and meta["rank"] == 0 and meta["world_size"] == 2
    assert meta["clock"]["base_time_ns"] == 1700000000000000000
    assert meta["devices"][0]["numSms"] == 132
    assert meta["events_by_phase"] == {"M": 1, "X": 18, "f": 2, "i": 1, "s": 2}
    assert meta["events_by_category"]["python_function"] == 1
    assert meta["event_count"] == 24 and meta["tabled_events"] == 17
    assert meta["skipped_events"] == 7


def test_same_tables_gz_and_small_chunks(cuda_trace: Path, tmp_path: Path) -> None:
    gz = _write(tmp_path / "rank0.json.gz", CUDA_TOP, cuda_events(), gz=True)
    a = KinetoImporter().read(cuda_trace)
    b = KinetoImporter().read(gz)
    c = KinetoImporter(chunk_bytes=64).read(cuda_trace)  # a cut every event or so
    for name in a.tables():
        assert a.tables()[name].equals(b.tables()[name]), name
        assert a.tables()[name].equals(c.tables()[name]), name


def test_compact_array_layout(tmp_path: Path) -> None:
    """A generic Chrome trace: top-level array, compact, nested lists of objects in args."""
    evs = cuda_events()
    evs[1]["args"]["weird"] = [{"a": "},{"}, {"b": 1}]
    p = tmp_path / "compact.json"
    p.write_text(json.dumps(evs, separators=(",", ":")))
    assert KinetoImporter.sniff(p, read_head(p))
    t = KinetoImporter(chunk_bytes=50).read(p)
    assert t.kernels.num_rows == 2 and t.ops.num_rows == 2
    assert t.meta["layout"] == "array" and t.meta["rank"] is None


def rocm_events() -> list[dict[str, Any]]:
    long_gemm = "Cijk_Alik_Bljk_SB_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1"
    return [
        _x(
            "user_annotation",
            "ProfilerStep#1",
            PID,
            TID,
            4203669603187.439,
            9288.291,
            **{"External id": 1},
        ),
        _x("cpu_op", "aten::mm", PID, TID, 4203669603800.5, 50.0, **{"External id": 13}),
        _x(
            "cuda_runtime",
            "hipExtModuleLaunchKernel",
            PID,
            TID,
            4203669603834.612,
            5.18,
            **{
                "External id": 13,
                "kernel": long_gemm,
                "cid": 65,
                "correlation": 121,
                "stream": "0x0",
                "grid": [512, 1, 1],
                "block": [256, 1, 1],
                "shared memory": 0,
            },
        ),
        _x(
            "cuda_runtime",
            "hipMemcpyWithStream",
            PID,
            TID,
            4203669603438.301,
            60.204,
            **{
                "External id": 8,
                "stream": "0x0",
                "cid": 153,
                "correlation": 117,
                "size": "2560",
                "kind": "1",
            },
        ),
        _x(
            "gpu_memcpy",
            "Memcpy HtoD (Host -> Device)",
            2,
            0,
            4203669603454.206,
            22.441,
            **{"External id": 8, "device": 2, "stream": 0, "correlation": 117, "kind": "HtoD"},
        ),
        _x(
            "kernel",
            long_gemm,
            2,
            0,
            4203669603847.969,
            17.6,
            **{
                "External id": 13,
                "device": 2,
                "stream": 0,
                "correlation": 121,
                "kind": "Dispatch Kernel",
            },
        ),
        _x(
            "kernel",
            "hex_stream_kernel",
            2,
            "0x1a",
            4203669603900.0,
            1.0,
            **{"device": 2, "stream": "0x1a", "correlation": 5000},
        ),
        _x(
            "gpu_user_annotation",
            "ProfilerStep#1",
            2,
            0,
            4203669603454.0,
            500.0,
            **{"External id": 1},
        ),
    ]


ROCM_TOP: dict[str, Any] = {
    "schemaVersion": 1,
    "deviceProperties": [{"id": 2, "name": "AMD Radeon Graphics", "warpSize": 64}],
}


def test_rocm_trace(tmp_path: Path) -> None:
    p = _write(tmp_path / "mi250.json.gz", ROCM_TOP, rocm_events(), gz=True)
    t = KinetoImporter().read(p)
    assert t.meta["flavour"] == "rocm"
    k = t.kernels.to_pylist()
    gemm, other = k
    assert gemm["start_ns"] == 4203669603847969 and gemm["dur_ns"] == 17_600
    assert (gemm["device"], gemm["stream"], gemm["correlation_id"]) == (2, 0, 121)
    # grid/block come from the launch call (ROCm kernels lack them)
    assert (gemm["grid_x"], gemm["block_x"], gemm["block_y"]) == (512, 256, 1)
    assert gemm["registers"] is None and gemm["iteration"] == 1
    # hex stream string; no launch call known: GPU step window gives the iteration
    assert other["stream"] == 26 and other["iteration"] == 1
    assert other["process_id"] is None and other["grid_x"] is None
    api = {a["name"]: a for a in t.api_calls.to_pylist()}
    assert api["hipExtModuleLaunchKernel"]["kind"] == "launch"
    assert api["hipMemcpyWithStream"]["kind"] == "memcpy"
    (mc,) = t.memcpy.to_pylist()
    assert (mc["kind"], mc["bytes"], mc["device"], mc["stream"]) == ("HtoD", None, 2, 0)
    assert mc["iteration"] == 1
    ann = sorted(t.annotations.to_pylist(), key=lambda a: a["kind"] != "step")
    assert [(a["kind"], a["device"], a["stream"], a["step"]) for a in ann] == [
        ("step", None, None, 1),
        ("gpu_user", 2, 0, None),
    ]


def test_recorded_cpu_trace() -> None:
    """torch 2.13 CPU, 3 active steps (ProfilerStep#2..4), recorded by scripts/."""
    p = FIXTURES / "cpu_mlp.json.gz"
    # the head as read_head gives it: decompressed (read here so the gz file is closed)
    assert KinetoImporter.sniff(p, gzip.decompress(p.read_bytes())[:65536])
    t = KinetoImporter().read(p)
    assert t.meta["flavour"] == "cpu"
    assert t.kernels.num_rows == 0 and t.api_calls.num_rows == 0
    assert t.annotations.column("step").to_pylist() == [2, 3, 4]
    assert t.annotations.column("start_ns").to_pylist()[0] == 4477334503941424
    lin = [o for o in t.ops.to_pylist() if o["node_name"] == "aten::linear"]
    assert [o["iteration"] for o in lin] == [2, 2, 3, 3, 4, 4]
    assert lin[0]["start_ns"] == 4477334503980026 and lin[0]["dur_ns"] == 55_945
    assert json.loads(lin[0]["input_shapes"]) == [[2, 8], [16, 8], [16]]
    assert t.ops.num_rows == 66
    assert set(t.ops.column("iteration").to_pylist()) == {2, 3, 4}


def test_multi_rank(tmp_path: Path) -> None:
    parts = []
    for rank in (0, 1):
        top = dict(CUDA_TOP, distributedInfo={"rank": rank, "world_size": 2})
        p = _write(tmp_path / f"rank{rank}.json", top, cuda_events())
        parts.append(KinetoImporter().read(p))
    assert [p.meta["rank"] for p in parts] == [0, 1]
    merged = TraceTables.merge(parts)
    assert merged.kernels.num_rows == 4
    assert [s["rank"] for s in merged.meta["sources"]] == [0, 1]


def test_empty_trace_events(tmp_path: Path) -> None:
    p = tmp_path / "empty.json"
    p.write_text('{"schemaVersion": 1, "traceEvents": []}')
    t = KinetoImporter().read(p)
    assert t.event_count == 0 and t.meta["flavour"] == "cpu"
    assert t.kernels.schema == KERNELS.schema


def test_sniff_rejects_ort_and_others(tmp_path: Path) -> None:
    ort = tmp_path / "ort.json"
    ort.write_text(
        '[\n{"cat" : "Session","pid" :1,"tid" :1,"dur" :5,"ts" :1,"ph" : "X",'
        '"name" :"model_loading_uri","args" : {}},\n'
        '{"cat" : "Node","pid" :1,"tid" :1,"dur" :5,"ts" :9,"ph" : "X",'
        '"name" :"n_kernel_time","args" : {"op_name" : "Conv"}}\n]\n'
    )
    assert not KinetoImporter.sniff(ort, read_head(ort))
    other = tmp_path / "x.json"
    other.write_text('{"rocprofiler-sdk-tool": []}')
    assert not KinetoImporter.sniff(other, read_head(other))
    csv = tmp_path / "k.csv"
    csv.write_text("Kind,Agent_Id\n")
    assert not KinetoImporter.sniff(csv, read_head(csv))


@pytest.mark.parametrize("frac", [0.05, 0.3, 0.5, 0.77, 0.95, 0.999])
@pytest.mark.parametrize("chunk", [1 << 20, 200])
def test_truncated(cuda_trace: Path, tmp_path: Path, frac: float, chunk: int) -> None:
    data = cuda_trace.read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: int(len(data) * frac)])
    with pytest.raises(InputError, match=r"cut\.json"):
        KinetoImporter(chunk_bytes=chunk).read(cut)
    gz = tmp_path / "cut.json.gz"
    whole = gzip.compress(data)
    gz.write_bytes(whole[: int(len(whole) * frac)])
    with pytest.raises(InputError, match=r"cut\.json\.gz"):
        KinetoImporter(chunk_bytes=chunk).read(gz)


@pytest.mark.parametrize("chunk", [1 << 20, 200])
def test_garbled(cuda_trace: Path, tmp_path: Path, chunk: int) -> None:
    data = bytearray(cuda_trace.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 6] = b"#@!%^&"
    bad = tmp_path / "bad.json"
    bad.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"bad\.json"):
        KinetoImporter(chunk_bytes=chunk).read(bad)


def test_not_json(tmp_path: Path) -> None:
    p = tmp_path / "junk.json"
    p.write_bytes(b"\x00\x01garbage")
    with pytest.raises(InputError, match=r"junk\.json"):
        KinetoImporter().read(p)
    q = tmp_path / "obj.json"
    q.write_text('{"a": 1}')
    with pytest.raises(InputError, match="without traceEvents"):
        KinetoImporter().read(q)


def test_event_with_string_ts_is_dropped_and_counted(tmp_path: Path) -> None:
    """An event that cannot be placed in time is left out; the rest of the file is read."""
    evs = cuda_events()
    evs[1]["ts"] = "soon"  # the first aten::addmm
    p = _write(tmp_path / "ts.json", CUDA_TOP, evs)
    t = KinetoImporter().read(p)
    assert t.ops.num_rows == 1 and t.kernels.num_rows == 2
    assert t.meta["dropped_rows"] == {"ts: missing, not a number or out of range": 1}
    assert t.meta["odd_values"] == {}


def test_tables_are_arrow(cuda_trace: Path) -> None:
    t = KinetoImporter().read(cuda_trace)
    assert isinstance(t.kernels, pa.Table)
    assert t.kernels.column("iteration").type == pa.int32()


def _same(a: TraceTables, b: TraceTables) -> None:
    for name in a.tables():
        assert a.tables()[name].equals(b.tables()[name]), name
    assert {k: v for k, v in a.meta.items() if k != "workers"} == {
        k: v for k, v in b.meta.items() if k != "workers"
    }


@pytest.mark.parametrize("layout", ["object", "array"])
def test_split_between_two_processes_gives_same_tables(
    cuda_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """The forked two-process read (normally only for files >= 8 MB) equals the serial one."""
    monkeypatch.setattr("aaco.importers.kineto.PARALLEL_MIN_BYTES", 0)
    path = cuda_trace
    if layout == "array":
        path = tmp_path / "array.json"
        path.write_text(json.dumps(cuda_events(), indent=1))
    serial = KinetoImporter(workers=1).read(path)
    split = KinetoImporter(workers=2).read(path)
    assert "workers" not in serial.meta
    (worker,) = split.meta["workers"]
    assert worker["rss_peak_kb"] > 0
    _same(serial, split)
    assert split.kernels.num_rows == 2 and split.meta["event_count"] == 24
    assert split.meta["text_bytes"] == path.stat().st_size


@pytest.mark.parametrize("where", [0.3, 0.8])
def test_split_garbled_or_truncated_is_an_error(
    cuda_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: float
) -> None:
    monkeypatch.setattr("aaco.importers.kineto.PARALLEL_MIN_BYTES", 0)
    data = bytearray(cuda_trace.read_bytes())
    at = int(len(data) * where)
    bad = tmp_path / "bad.json"
    bad.write_bytes(bytes(data[:at] + b"#@!%^&" + data[at + 6 :]))
    with pytest.raises(InputError, match=r"bad\.json"):
        KinetoImporter(workers=2).read(bad)
    cut = tmp_path / "cut.json"
    cut.write_bytes(bytes(data[:at]))
    with pytest.raises(InputError, match=r"cut\.json"):
        KinetoImporter(workers=2).read(cut)


@pytest.mark.parametrize("layout", ["object", "array"])
def test_gzip_split_between_two_processes_gives_same_tables(
    cuda_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """A gzip trace is decompressed once and split like an uncompressed one: same tables."""
    monkeypatch.setattr("aaco.importers.kineto.PARALLEL_MIN_BYTES", 0)
    text = cuda_trace.read_bytes()
    if layout == "array":
        text = json.dumps(cuda_events(), indent=1).encode()
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(text))
    serial = KinetoImporter(workers=1).read(path)
    split = KinetoImporter(workers=2).read(path)
    assert "workers" not in serial.meta and len(split.meta["workers"]) == 1
    _same(serial, split)
    assert split.meta["text_bytes"] == len(text)


def test_gzip_split_falls_back_on_bad_or_large_text(
    cuda_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("aaco.importers.kineto.PARALLEL_MIN_BYTES", 0)
    packed = gzip.compress(cuda_trace.read_bytes())
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(InputError, match=r"cut\.json\.gz"):
        KinetoImporter(workers=2).read(cut)
    two = tmp_path / "two.json.gz"  # two gzip members: streamed by one process, read whole
    raw = cuda_trace.read_bytes()
    two.write_bytes(gzip.compress(raw[:100]) + gzip.compress(raw[100:]))
    t = KinetoImporter(workers=2).read(two)
    assert "workers" not in t.meta and t.kernels.num_rows == 2
    monkeypatch.setattr("aaco.importers.kineto.GZIP_PARALLEL_MAX_BYTES", 64)
    big = tmp_path / "big.json.gz"
    big.write_bytes(packed)
    assert "workers" not in KinetoImporter(workers=2).read(big).meta
