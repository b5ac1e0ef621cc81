"""Lenient import: real traces of every layout import, odd values cost a counted null, not the file.

The Kineto traces here are laid out byte for byte as libkineto's ChromeTraceLogger writes them
(output_json.cpp: metadata and ``displayTimeUnit`` before ``traceEvents``, fractional ``ts``,
``distributedInfo`` with ``pg_config`` lists and the profiler's log lines as JSON lists after
it); the real fixtures are listed in fixtures/kineto/README.md. Every expected value is known
by construction or counted independently with Python's ``json`` module.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from tests.cli.test_cli import aaco, assert_one_line_error

from aaco.errors import InputError
from aaco.importers._lenient import OddValues, collecting, note_null, summary_line, to_int
from aaco.importers.base import TABLE_FIELDS, TraceTables, read_head
from aaco.importers.kineto import KinetoImporter
from aaco.importers.registry import detect, import_paths
from aaco.ingest import analyze_trace

FIXTURES = Path(__file__).parent / "fixtures" / "kineto"
PID = 3001
TID = 3002
BASE = 1722000000000000000


def _event(ev: dict[str, Any]) -> str:
    """One event as ChromeTraceLogger::handleActivity writes it."""
    head = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in ev.items() if k != "args")
    if "args" not in ev:
        return f"\n  {{\n    {head}\n  }}"
    if not isinstance(ev["args"], dict):
        return f'\n  {{\n    {head},\n    "args": {json.dumps(ev["args"])}\n  }}'
    args = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in ev["args"].items())
    return f'\n  {{\n    {head},\n    "args": {{\n      {args}\n    }}\n  }}'


def pytorch2_trace(
    events: list[dict[str, Any]], unit: str | None = "ns", bom: bool = False, tail: bool = True
) -> bytes:
    """A PyTorch 2.x (Kineto) trace from a V100 box with the metadata PyTorch adds."""
    device = (
        '\n    {\n      "id": 0, "name": "Tesla V100-SXM2-32GB", "totalGlobalMem": 34089730048,'
        '\n      "computeMajor": 7, "computeMinor": 0,\n      "maxThreadsPerBlock": 1024, '
        '"maxThreadsPerMultiprocessor": 2048,\n      "regsPerBlock": 65536, "warpSize": 32,'
        '\n      "sharedMemPerBlock": 49152, "numSms": 80\n    , "regsPerMultiprocessor": 65536,'
        ' "sharedMemPerBlockOptin": 98304, "sharedMemPerMultiprocessor": 98304\n    }'
    )
    meta = {
        "distributedInfo": '{"backend": "nccl", "rank": 1, "world_size": 2, "pg_count": 1, '
        '"pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": '
        '"cuda:nccl", "pg_size": 2, "ranks": [0, 1]}], "nccl_version": "2.20.5"}',
        "record_shapes": "1",
        "cuda_runtime_version": "12010",
        "trace_id": '"ABC [x] {y} \\"z\\" traceEvents"',
    }
    text = '\n  {\n    "schemaVersion": 1,\n    "deviceProperties": [' + device + "\n    ],"
    text += "".join(f'\n      "{k}": {v},' for k, v in meta.items())
    if unit is not None:
        text += f'\n  "displayTimeUnit": "{unit}",'
    text += f'\n  "baseTimeNanoseconds": {BASE},\n  "traceEvents": ['
    text += ",".join(_event(e) for e in events)
    end = 1e6  # after every event of these tests
    text += (
        ',\n  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n    "pid": "", '
        f'"tid": "", "ts": {end:.3f}\n  }}\n  ],'
    )
    if tail:
        # metadata after the array: lists and objects, brackets inside strings
        text += (
            '\n  "distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2, '
            '"pg_config": [{"pg_name": "0", "ranks": [0, 1]}], "nccl_version": "unknown"},'
            '\n      "WARNING": ["CUPTI [bug] {x}: 3 events ]", "Memory ], [ {"],'
            '\n      "INFO": ["Traces Recorded:"],'
        )
    text += '\n  "traceName": "/tmp/rank1.pt.trace.json"\n}'
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode()


def _x(cat: Any, name: Any, pid: Any, tid: Any, ts: float, dur: float, **args: Any) -> dict:
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                          "ts": ts, "dur": dur}  # fmt: skip
    if args:
        ev["args"] = args
    return ev


def step_events() -> list[dict[str, Any]]:
    """ProfilerStep#7: an aten op launching a kernel on stream 7, and a copy; fractional ts."""
    return [
        _x("user_annotation", "ProfilerStep#7", PID, TID, 100.125, 900.5, **{"External id": 1}),
        _x("cpu_op", "aten::mm", PID, TID, 110.001, 50.25,
           **{"External id": 2, "Input Dims": [[4, 8], [8, 4]], "Sequence number": 9}),
        _x("cuda_runtime", "cudaLaunchKernel", PID, TID, 120.5, 4.75,
           **{"External id": 2, "cbid": 211, "correlation": 40}),
        {"ph": "s", "id": 40, "pid": PID, "tid": TID, "ts": 120.5, "cat": "ac2g",
         "name": "ac2g"},
        _x("kernel", "volta_sgemm_32x32_sliced1x4_nn", 0, 7, 130.002, 8.998,
           **{"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": 40,
              "registers per thread": 90, "shared memory": 8192, "grid": [1, 1, 1],
              "block": [256, 1, 1], "est. achieved occupancy %": 6, "External id": 2}),
        _x("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 0, 7, 150.0, 2.5,
           **{"device": 0, "stream": 7, "correlation": 41, "bytes": 64}),
        {"name": "thread_name", "ph": "M", "ts": 100.0, "pid": 0, "tid": 7,
         "args": {"name": "stream 7 "}},
    ]  # fmt: skip


def _tables_equal(a: TraceTables, b: TraceTables) -> None:
    for name in TABLE_FIELDS:
        assert getattr(a, name).equals(getattr(b, name)), name


# --------------------------------------------------------------------------- issue 14 (a)


@pytest.mark.parametrize("chunk", [1 << 20, 300, 64])
@pytest.mark.parametrize("bom", [False, True])
def test_pytorch2_trace_with_metadata_on_both_sides(tmp_path: Path, chunk: int, bom: bool) -> None:
    """Issue 14 (a): displayTimeUnit "ns", metadata before traceEvents, fractional ts, and
    lists after the array (it used to fail "truncated or garbled JSON in traceEvents")."""
    p = tmp_path / "rank1.pt.trace.json"
    p.write_bytes(pytorch2_trace(step_events(), bom=bom))
    assert detect(p) is KinetoImporter
    t = KinetoImporter(chunk_bytes=chunk).read(p)
    (k,) = t.kernels.to_pylist()
    # ts/dur are microseconds whatever displayTimeUnit says
    assert (k["start_ns"], k["dur_ns"], k["end_ns"]) == (130_002, 8_998, 139_000)
    assert (k["device"], k["stream"], k["correlation_id"], k["iteration"]) == (0, 7, 40, 7)
    assert (k["grid_x"], k["block_x"], k["registers"], k["shared_bytes"]) == (1, 256, 90, 8192)
    assert (k["process_id"], k["thread_id"]) == (PID, TID)
    (op,) = t.ops.to_pylist()
    assert (op["start_ns"], op["dur_ns"], op["iteration"]) == (110_001, 50_250, 7)
    assert json.loads(op["input_shapes"]) == [[4, 8], [8, 4]]
    (mc,) = t.memcpy.to_pylist()
    assert (mc["kind"], mc["bytes"], mc["start_ns"], mc["dur_ns"]) == ("DtoH", 64, 150_000, 2_500)
    m = t.meta
    assert m["clock"]["display_time_unit"] == "ns" and m["clock"]["unit"] == "us"
    assert m["clock"]["base_time_ns"] == BASE
    assert (m["rank"], m["world_size"]) == (1, 2)  # distributedInfo after the array wins
    assert m["devices"][0]["name"] == "Tesla V100-SXM2-32GB"
    assert m["trace_name"] == "/tmp/rank1.pt.trace.json"
    assert m["event_count"] == 8 and m["odd_values"] == {} and m["dropped_rows"] == {}


def test_display_time_unit_never_scales_times(tmp_path: Path) -> None:
    """Chrome's trace format, HTA and Perfetto's trace processor read ts/dur as us always."""
    tables = {}
    for unit in ("ns", "ms", None):
        p = tmp_path / f"{unit}.json"
        p.write_bytes(pytorch2_trace(step_events(), unit=unit))
        tables[unit] = KinetoImporter().read(p)
        assert tables[unit].meta["clock"]["display_time_unit"] == unit
    _tables_equal(tables["ns"], tables["ms"])
    _tables_equal(tables["ns"], tables[None])


def _json_counts(path: Path) -> dict[str, tuple[int, int]]:
    """Rows and total dur (ns) per table, counted with Python's json module."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc = json.loads(data)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    table_of = {"cpu_op": "ops", "kernel": "kernels", "gpu_memcpy": "memcpy",
                "gpu_memset": "memcpy", "cuda_runtime": "api_calls", "cuda_driver": "api_calls",
                "cuda_sync": "api_calls", "user_annotation": "annotations",
                "gpu_user_annotation": "annotations"}  # fmt: skip
    out = {name: (0, 0) for name in ("ops", "kernels", "memcpy", "api_calls", "annotations")}
    for e in events:
        name = table_of.get(e.get("cat"))
        if e.get("ph") == "X" and name is not None:
            rows, dur = out[name]
            out[name] = (rows + 1, dur + round(e["dur"] * 1000))
    return out


@pytest.mark.parametrize(
    "name",
    [
        "hta_event_sync_multi_stream.json.gz",
        "hta_mi250_rocm6.2_train.json.gz",
        "kineto_docs_after_fix_trace.json",
        "cpu_all_options.json.gz",
        "cpu_mlp.json.gz",
    ],
)
@pytest.mark.parametrize("chunk", [1 << 20, 500])
def test_real_traces_import_every_event(name: str, chunk: int) -> None:
    """Real traces of every layout: rows and durations equal what json.load finds."""
    path = FIXTURES / name
    t = KinetoImporter(chunk_bytes=chunk).read(path)
    for table, (rows, dur) in _json_counts(path).items():
        got = getattr(t, table)
        assert got.num_rows == rows, table
        assert sum(got.column("dur_ns").to_pylist()) == pytest.approx(dur, abs=rows), table
    assert t.meta["odd_values"] == {} and t.meta["dropped_rows"] == {}


def test_hta_trace_with_log_lists_after_trace_events() -> None:
    """The real trace that reproduced issue 14 (a): "INFO": [...] after traceEvents."""
    t = KinetoImporter().read(FIXTURES / "hta_event_sync_multi_stream.json.gz")
    assert t.meta["event_count"] == 149
    # traceName follows the log list: read only if the array's end was found right
    assert t.meta["trace_name"] == "event_sync_trace.json"
    assert sorted(set(t.kernels.column("stream").to_pylist())) == [20, 24, 28]


def test_kineto_docs_trace_cuda_sync_and_graph_kernel() -> None:
    t = KinetoImporter().read(FIXTURES / "kineto_docs_after_fix_trace.json")
    (k,) = t.kernels.to_pylist()
    assert (k["start_ns"], k["dur_ns"], k["stream"], k["correlation_id"]) == (
        88511388202785, 20, 1, 1,
    )  # fmt: skip
    assert (k["process_id"], k["thread_id"]) == (514683, 514683)
    kinds = {(a["name"], a["kind"]) for a in t.api_calls.to_pylist()}
    assert kinds == {("cudaLaunchKernel", "launch"), ("Stream Wait Event", "sync"),
                     ("Event Sync", "sync")}  # fmt: skip
    assert len(t.meta["devices"]) == 8 and t.meta["clock"]["display_time_unit"] == "ms"


def test_rocm_kineto_trace() -> None:
    t = KinetoImporter().read(FIXTURES / "hta_mi250_rocm6.2_train.json.gz")
    assert t.meta["flavour"] == "rocm"
    assert t.kernels.num_rows == 14
    assert {a for a in t.api_calls.column("name").to_pylist() if "Launch" in a} <= {
        "hipLaunchKernel", "hipExtModuleLaunchKernel"}  # fmt: skip


# --------------------------------------------------------------------------- issue 14 (b)


def triton_events(kernel_grid: Any = (512, 1, 1)) -> list[dict[str, Any]]:
    """torch.compile: Inductor's record_function (cat cpu_op) carries grid as *text*; the
    launch is a driver call (cuLaunchKernel) and the kernel keeps Triton's name."""
    name = "triton_poi_fused_add_mul_0"
    return [
        _x("user_annotation", "ProfilerStep#3", PID, TID, 1000.0, 500.0, **{"External id": 1}),
        _x("cpu_op", name, PID, TID, 1010.5, 20.0,
           **{"External id": 5, "kernel_file": "/tmp/torchinductor_u/ab/cab.py",
              "kernel_hash": "cab", "kernel_backend": "triton", "grid": "grid(512,)",
              "stream": 0, "num_warps": 4, "num_stages": 1,
              "kernel_kwargs": "XBLOCK=1024"}),
        _x("cuda_driver", "cuLaunchKernel", PID, TID, 1015.0, 6.0,
           **{"External id": 5, "cbid": 307, "correlation": 77}),
        _x("kernel", name, 0, 7, 1030.0, 3.5,
           **{"device": 0, "stream": 7, "correlation": 77, "External id": 5,
              "registers per thread": 18, "shared memory": 0,
              "grid": list(kernel_grid) if isinstance(kernel_grid, tuple) else kernel_grid,
              "block": [128, 1, 1]}),
    ]  # fmt: skip


def test_triton_trace(tmp_path: Path) -> None:
    """Issue 14 (b): it used to fail "Expected `array | null`, got `str` - at $[3].args.grid"."""
    p = tmp_path / "compiled.json"
    p.write_bytes(pytorch2_trace(triton_events()))
    t = KinetoImporter().read(p)
    (k,) = t.kernels.to_pylist()
    assert (k["name"], k["grid_x"], k["grid_y"], k["block_x"]) == (
        "triton_poi_fused_add_mul_0", 512, 1, 128,
    )  # fmt: skip
    assert (k["iteration"], k["process_id"], k["correlation_id"]) == (3, PID, 77)
    (launch,) = t.api_calls.to_pylist()
    assert (launch["domain"], launch["kind"]) == ("cuda_driver", "launch")
    # the op's text grid is never read (ops have no grid): nothing odd to report
    assert t.meta["odd_values"] == {} and t.ops.num_rows == 1
    analyzed = analyze_trace(t)
    assert analyzed.op_map.column("op_name").to_pylist() == ["triton_poi_fused_add_mul_0"]


@pytest.mark.parametrize(
    ("grid", "xyz", "odd"),
    [
        ("[64, 2, 1]", (64, 2, 1), {}),
        ("(64, 2)", (64, 2, None), {}),
        ({"x": 64, "y": 2, "z": 1}, (64, 2, 1), {}),
        (64, (64, None, None), {}),
        ("grid(512,)", (None, None, None), {"args.grid": 1}),
        ([64, "two", 1], (None, None, None), {"args.grid": 1}),
        ([1, 2, 3, 4], (None, None, None), {"args.grid": 1}),
        (True, (None, None, None), {"args.grid": 1}),
    ],
)
def test_grid_variants(tmp_path: Path, grid: Any, xyz: tuple[Any, ...], odd: dict) -> None:
    p = tmp_path / "grid.json"
    p.write_bytes(pytorch2_trace(triton_events(kernel_grid=grid)))
    t = KinetoImporter().read(p)
    (k,) = t.kernels.to_pylist()
    assert (k["grid_x"], k["grid_y"], k["grid_z"]) == xyz
    assert t.meta["odd_values"] == odd and t.kernels.num_rows == 1


def test_cuda_graph_launch(tmp_path: Path) -> None:
    """cudaGraphLaunch: one launch call, several kernels sharing its correlation id."""
    evs = [
        _x("user_annotation", "ProfilerStep#0", PID, TID, 0.0, 100.0),
        _x("cpu_op", "CUDAGraph::replay", PID, TID, 5.0, 30.0, **{"External id": 3}),
        _x("cuda_runtime", "cudaGraphLaunch", PID, TID, 10.0, 12.0,
           **{"External id": 3, "cbid": 311, "correlation": 90}),
    ] + [
        _x("kernel", f"graph_kernel_{i}", 0, 7, 40.0 + 5 * i, 4.0,
           **{"device": 0, "stream": 7, "correlation": 90, "graph id": 1,
              "graph node id": 100 + i, "grid": [8, 1, 1], "block": [64, 1, 1]})
        for i in range(3)
    ]  # fmt: skip
    p = tmp_path / "graph.json"
    p.write_bytes(pytorch2_trace(evs))
    t = KinetoImporter().read(p)
    ks = t.kernels.to_pylist()
    assert [k["name"] for k in ks] == ["graph_kernel_0", "graph_kernel_1", "graph_kernel_2"]
    assert {(k["correlation_id"], k["process_id"], k["thread_id"], k["iteration"]) for k in ks} == {
        (90, PID, TID, 0)
    }
    assert t.api_calls.column("kind").to_pylist() == ["launch"]
    analyzed = analyze_trace(t)
    assert set(analyzed.op_map.column("op_name").to_pylist()) == {"CUDAGraph::replay"}


# --------------------------------------------------------------------------- other variants


def test_events_without_args_and_metadata_events(tmp_path: Path) -> None:
    evs = [
        _x("cpu_op", "aten::relu", PID, TID, 1.0, 2.0),
        _x("kernel", "relu_kernel", 0, 7, 3.0, 1.0),
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": PID,
         "tid": TID, "ts": 2.0, "args": {"Bytes": 64}},
        {"ph": "C", "name": "counter", "pid": 0, "ts": 2.0, "args": {"value": 3}},
    ]  # fmt: skip
    p = tmp_path / "noargs.json"
    p.write_bytes(pytorch2_trace(evs))
    t = KinetoImporter().read(p)
    (k,) = t.kernels.to_pylist()
    assert (k["device"], k["stream"], k["correlation_id"], k["external_id"]) == (0, 7, None, None)
    assert t.ops.column("external_id").to_pylist() == [None]
    assert t.meta["events_by_phase"] == {"C": 1, "M": 1, "X": 2, "i": 2}
    assert t.meta["odd_values"] == {} and t.meta["dropped_rows"] == {}


def test_several_devices_in_one_file_stay_apart(tmp_path: Path) -> None:
    """GPU tracks: pid = device, args.device when given; hex stream strings (ROCm)."""
    evs = [
        _x("kernel", "k0", 0, 7, 1.0, 1.0, **{"device": 0, "stream": 7, "correlation": 1}),
        _x("kernel", "k1", 1, 7, 1.0, 2.0, **{"device": 1, "stream": 7, "correlation": 2}),
        _x("kernel", "k3", 3, "0x1a", 1.0, 3.0),  # no args: device from pid, stream from tid
        _x("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 1, 9, 5.0, 1.0,
           **{"device": 1, "stream": 9, "bytes": 16}),
    ]  # fmt: skip
    p = tmp_path / "multi.json"
    p.write_bytes(pytorch2_trace(evs))
    t = KinetoImporter().read(p)
    assert [(k["name"], k["device"], k["stream"]) for k in t.kernels.to_pylist()] == [
        ("k0", 0, 7), ("k1", 1, 7), ("k3", 3, 26),
    ]  # fmt: skip
    assert t.memcpy.column("device").to_pylist() == [1]
    metrics = analyze_trace(t).metrics
    assert sorted(metrics["gpu_active_ratio_per_device"]) == ["0", "1", "3"]


def test_value_variants_are_read_and_odd_values_counted(tmp_path: Path) -> None:
    """Numbers as text, integral floats, hex streams are read; what cannot be read is null
    and counted per field; events that cannot be placed in time are left out, counted."""
    evs = [
        _x("user_annotation", "ProfilerStep#1", PID, TID, "0.5", 1000),
        _x("cpu_op", "aten::add", str(PID), TID, "10.1235", "2.0004",
           **{"External id": "12"}),
        _x("cuda_runtime", "cudaLaunchKernel", PID, float(TID), 20.0, 1.0,
           **{"External id": 12.0, "correlation": "0x50"}),
        _x("kernel", "good", 0, 7, 30.0, 5.0,
           **{"correlation": 80, "stream": "0x7", "registers per thread": 32.0,
              "shared memory": "1024", "grid": "[2, 1, 1]", "block": [32, 1, 1]}),
        _x("kernel", "odd", 0, 7, 40.0, 5.0,
           **{"correlation": "eighty", "stream": [7], "registers per thread": True,
              "External id": 1.5, "grid": "grid(2,)", "block": {"w": 1}}),
        _x("kernel", "no-ts", 0, 7, "soon", 5.0),
        _x("kernel", "no-dur", 0, 7, 50.0, None),
        _x("kernel", "negative", 0, 7, 60.0, -1.0),
        _x("kernel", ["not", "a", "name"], 0, 7, 70.0, 1.0),
        _x(["kernel"], "odd-category", 0, 7, 80.0, 1.0),
    ]  # fmt: skip
    evs.append({"ph": "X", "cat": "kernel", "name": "odd-args", "pid": 0, "tid": 7, "ts": 90.0,
                "dur": 1.0, "args": "none"})  # fmt: skip
    p = tmp_path / "variants.json"
    end = b'\n  {\n    "name": "Record Window End"'
    p.write_bytes(pytorch2_trace(evs).replace(end, b"\n  7," + end))  # not an event at all
    t = KinetoImporter().read(p)
    (op,) = t.ops.to_pylist()
    assert (op["start_ns"], op["dur_ns"], op["process_id"], op["external_id"]) == (
        10_124, 2_000, PID, 12,
    )  # fmt: skip
    (api,) = t.api_calls.to_pylist()
    assert (api["thread_id"], api["external_id"], api["correlation_id"]) == (TID, 12, 80)
    good, odd, odd_args = t.kernels.to_pylist()
    assert (good["stream"], good["registers"], good["shared_bytes"], good["grid_x"]) == (
        7, 32, 1024, 2,
    )  # fmt: skip
    assert good["process_id"] == PID  # found its launch through correlation "0x50"
    assert (odd["correlation_id"], odd["stream"], odd["registers"], odd["external_id"]) == (
        None,
        7,
        None,
        None,
    )  # fmt: skip  (stream null -> the track's tid)
    assert (odd["grid_x"], odd["block_x"], odd_args["external_id"]) == (None, None, None)
    assert t.meta["odd_values"] == {
        "args": 1, "args.External id": 1, "args.block": 1, "args.correlation": 1,
        "args.grid": 1, "args.registers per thread": 1, "args.stream": 1, "cat": 1,
    }  # fmt: skip
    assert t.meta["dropped_rows"] == {
        "dur: missing, not a number or out of range": 1,
        "dur: negative": 1,
        "name: not a string": 1,
        "traceEvents: entry is not an object": 1,
        "ts: missing, not a number or out of range": 1,
    }
    line = summary_line([t.meta])
    assert line is not None and line.startswith("8 odd values set to null")


def test_non_standard_json_is_repaired_and_counted(tmp_path: Path) -> None:
    """What Python's json reads but msgspec refuses: NaN/Infinity, numbers beyond a double,
    bad UTF-8, lone surrogates. The piece that holds them is repaired; counts say what was."""
    evs = step_events()
    evs[4]["args"]["est. achieved occupancy %"] = 1.5
    evs[1]["name"] = "aten::mm SURROGATE"
    text = pytorch2_trace(evs)
    text = text.replace(b'"est. achieved occupancy %": 1.5', b'"est. achieved occupancy %": NaN')
    text = text.replace(b'"bytes": 64', b'"bytes": -Infinity')
    text = text.replace(b'"shared memory": 8192', b'"shared memory": 1e999')
    text = text.replace(b"SURROGATE", b"\\ud800")
    text = text.replace(b"ProfilerStep#7", b"ProfilerStep#7\xff", 1)  # not a step any more
    p = tmp_path / "nonstd.json"
    p.write_bytes(text)
    for chunk in (1 << 20, 200):
        t = KinetoImporter(chunk_bytes=chunk).read(p)
        assert t.kernels.num_rows == 1 and t.memcpy.column("bytes").to_pylist() == [None]
        assert t.kernels.column("shared_bytes").to_pylist() == [None]
        assert t.ops.column("node_name").to_pylist() == ["aten::mm \ufffd"]
        assert t.annotations.column("name").to_pylist() == ["ProfilerStep#7\ufffd"]
        assert t.meta["odd_values"] == {
            "json: NaN/Infinity number": 2,
            "json: number out of range": 1,
            "json: invalid UTF-8 text": 1,
            "json: lone UTF-16 surrogate escape": 1,
        }


@pytest.mark.parametrize(
    "cut",
    [
        b'"baseTimeNanoseconds"',  # in the header
        b'"correlation": 40',  # inside an event
        b"  ],",  # right after the array closes
        b'"WARNING"',  # inside the metadata after the array
        b'"traceName"',  # before the last key
    ],
)
@pytest.mark.parametrize("chunk", [1 << 20, 128])
def test_truncated_is_still_a_one_line_error(tmp_path: Path, cut: bytes, chunk: int) -> None:
    text = pytorch2_trace(step_events())
    p = tmp_path / "cut.json"
    p.write_bytes(text[: text.index(cut) + len(cut) // 2])
    with pytest.raises(InputError, match=r"cut\.json.*(truncated|garbled)") as exc:
        KinetoImporter(chunk_bytes=chunk).read(p)
    assert "\n" not in str(exc.value)


def test_garbage_after_the_object_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "junk.json"
    p.write_bytes(pytorch2_trace(step_events()) + b"\n{junk")
    with pytest.raises(InputError, match=r"junk\.json"):
        KinetoImporter().read(p)


def test_split_read_with_metadata_after_the_array(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two-process read of a large file equals the serial one, odd values included."""
    monkeypatch.setattr("aaco.importers.kineto.PARALLEL_MIN_BYTES", 0)
    evs = step_events() * 40 + triton_events(kernel_grid="grid(1,)")
    p = tmp_path / "big.json"
    p.write_bytes(pytorch2_trace(evs).replace(b'"bytes": 64', b'"bytes": NaN'))
    serial = KinetoImporter(workers=1, chunk_bytes=4096).read(p)
    split = KinetoImporter(workers=2, chunk_bytes=4096).read(p)
    assert "workers" in split.meta
    _tables_equal(serial, split)
    assert (
        serial.meta["odd_values"]
        == split.meta["odd_values"]
        == {
            "args.grid": 1,
            "json: NaN/Infinity number": 40,
        }
    )
    assert split.meta["rank"] == 1


# --------------------------------------------------------------------------- crash regressions


def test_regression_corrupt_gzip_is_one_line(tmp_path: Path) -> None:
    """Fuzzing: a flipped bit in a gzip stream made read_head raise zlib.error."""
    raw = bytearray(gzip.compress(pytorch2_trace(step_events()), mtime=0))
    raw[10] ^= 1 << 2
    p = tmp_path / "t.json.gz"
    p.write_bytes(bytes(raw))
    assert read_head(p) == b""
    with pytest.raises(InputError, match=r"t\.json\.gz") as exc:
        import_paths([p])
    assert "\n" not in str(exc.value)


def test_regression_input_dims_not_utf8(tmp_path: Path) -> None:
    """Fuzzing: Input Dims are kept raw, so an invalid UTF-8 byte there reached .decode()."""
    evs = step_events()
    evs[1]["args"]["Input Dims"] = ["SHAPE"]
    p = tmp_path / "dims.json"
    p.write_bytes(pytorch2_trace(evs).replace(b"SHAPE", b"a\xffb"))
    t = KinetoImporter().read(p)
    assert t.ops.column("input_shapes").to_pylist() == ['["a\ufffdb"]']


# --------------------------------------------------------------------------- the counting


def test_to_int() -> None:
    assert [to_int(v) for v in (7, 7.0, "0x1a", " 12 ", "007", "1e3", -3)] == [
        7, 7, 26, 12, 7, 1000, -3,
    ]  # fmt: skip
    assert [to_int(v) for v in (7.5, True, None, "x", [1], float("nan"), 1 << 63)] == [None] * 7


def test_collecting_nests_and_merges() -> None:
    with collecting() as outer:
        note_null("a")
        with collecting() as inner:
            note_null("a", 2)
        assert inner.nulled == {"a": 2}
    assert outer.meta() == {"odd_values": {"a": 3}, "dropped_rows": {}}
    note_null("nobody listens")  # outside any read: ignored
    odd = OddValues()
    odd.merge({"odd_values": {"x": 1}, "dropped_rows": {"y": 2}})
    assert odd.meta() == {"odd_values": {"x": 1}, "dropped_rows": {"y": 2}}
    assert summary_line([{}, {"odd_values": {}}]) is None
    assert summary_line([{"dropped_rows": {"r": 1}}, {"dropped_rows": {"r": 2, "s": 1}}]) == (
        "4 rows dropped (r 3, s 1)"
    )


# --------------------------------------------------------------------------- the CLI


def test_cli_import_odd_trace_exits_0_with_one_note(tmp_path: Path) -> None:
    p = tmp_path / "triton.json"
    p.write_bytes(pytorch2_trace(triton_events(kernel_grid="grid(512,)")))
    proc = aaco("import", str(p), "--output", str(tmp_path / "s"), "--format", "none")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("imported into ") and len(lines) == 2, proc.stderr
    assert lines[1].startswith("note: 1 odd value set to null (args.grid 1); details in ")
    bundle = Path(lines[0].removeprefix("imported into "))
    record = json.loads((bundle / "profiler" / "import.json").read_text())
    assert record["odd_values"] == {"args.grid": 1} and record["dropped_rows"] == {}
    assert record["warnings"] == [f"{p}: 1 odd value set to null (args.grid 1)"]


def test_cli_import_truncated_trace_exits_2_with_one_line(tmp_path: Path) -> None:
    text = pytorch2_trace(step_events())
    p = tmp_path / "cut.json"
    p.write_bytes(text[: len(text) - 40])
    proc = aaco("import", str(p), "--output", str(tmp_path / "s"))
    assert_one_line_error(proc, 2, "cut.json", "truncated")


# --------------------------------------------------------------------------- other importers

OTHER = Path(__file__).parent / "fixtures"


def test_ort_profile_event_without_usable_time_is_left_out(tmp_path: Path) -> None:
    from aaco.importers.ort_trace import OrtTraceImporter

    lines = (OTHER / "ort" / "rocm_ep_profile.json").read_text().splitlines()
    node = next(i for i, ln in enumerate(lines) if '"cat" : "Node"' in ln and "_kernel_time" in ln)
    lines[node] = lines[node].replace('"ts" :90011', '"ts" :"soon"')
    size = next(i for i, ln in enumerate(lines) if '"output_size" : "' in ln and i != node)
    lines[size] = re.sub(r'"output_size" : "\d+"', '"output_size" : "big"', lines[size])
    p = tmp_path / "ort.json"
    p.write_text("\n".join(lines) + "\n")
    whole = OrtTraceImporter().read(OTHER / "ort" / "rocm_ep_profile.json")
    t = OrtTraceImporter().read(p)
    assert t.ops.num_rows == whole.ops.num_rows - 1
    assert t.meta["dropped_rows"] == {"Node event: ts/dur missing, negative or not a number": 1}
    assert t.meta["odd_values"] == {"args.output_size": 1}
    nulls = whole.ops.column("output_bytes").null_count
    assert t.ops.column("output_bytes").null_count == nulls + 1


def test_rocprofv3_odd_agent_and_counter_values(tmp_path: Path) -> None:
    from aaco.importers.rocprofv3 import read_rocprofv3_dir

    run = tmp_path / "run"
    shutil.copytree(OTHER / "rocprof" / "v3" / "run", run)
    copy = run / "node1" / "4242_memory_copy_trace.csv"
    copy.write_text(copy.read_text().replace('"Agent 2","Agent 0",9', '"the GPU","Agent 0",9'))
    cc = run / "node1" / "4242_counter_collection.csv"
    text = cc.read_text().replace('"SQ_WAVES",4096', '"SQ_WAVES",lots', 1)
    cc.write_text(text.replace('"SQ_INSTS_VALU",123456.0', '"SQ_INSTS_VALU",nan', 1))
    t = read_rocprofv3_dir(run)
    whole = read_rocprofv3_dir(OTHER / "rocprof" / "v3" / "run")
    assert t.memcpy.column("src_device").to_pylist()[1] is None
    assert t.memcpy.num_rows == whole.memcpy.num_rows
    assert t.kernel_counters.num_rows == whole.kernel_counters.num_rows - 2
    assert t.meta["odd_values"] == {"Agent_Id": 1, "Counter_Value": 2}
    assert t.meta["dropped_rows"] == {"Counter_Value: empty or not a number": 2}


def test_rocprofv3_json_odd_values_convert_record_by_record(tmp_path: Path) -> None:
    from aaco.importers.rocprofv3_json import read_rocprofv3_json

    src = OTHER / "rocprof" / "json" / "5150_results.json"
    doc = json.loads(src.read_text())
    proc = doc["rocprofiler-sdk-tool"][0]
    dispatches = proc["buffer_records"]["kernel_dispatch"]
    dispatches[0]["dispatch_info"]["queue_id"] = {"handle": "q0"}  # text: null, counted
    dispatches[0]["thread_id"] = [1]
    dispatches[0]["dispatch_info"]["private_segment_size"] = float("nan")  # json writes NaN
    dispatches.append({"start_timestamp": "later", "end_timestamp": 9})  # left out
    dispatches.append(17)  # not a record
    p = tmp_path / "odd_results.json"
    p.write_text(json.dumps(doc))
    whole = read_rocprofv3_json(src)
    t = read_rocprofv3_json(p)
    assert t.kernels.num_rows == whole.kernels.num_rows
    k = t.kernels.to_pylist()[0]
    assert (k["queue"], k["thread_id"], k["scratch_bytes"]) == (None, None, None)
    assert k["name"] == whole.kernels.to_pylist()[0]["name"]
    assert t.meta["odd_values"] == {
        "json: NaN/Infinity number": 1,
        "kernel_dispatch.dispatch_info.queue_id.handle": 1,
        "kernel_dispatch.start_timestamp": 1,
        "kernel_dispatch.thread_id": 1,
    }
    assert t.meta["dropped_rows"] == {
        "kernel_dispatch: record not readable": 1,
        "kernel_dispatch: start/end missing or not a number": 1,
    }


def test_rocpd_text_that_is_not_utf8(tmp_path: Path) -> None:
    """Fuzzing: SQLite TEXT is not checked for UTF-8; a bad byte made sqlite3 raise."""
    from tests.importers.test_rocpd import DATA, make_db

    from aaco.importers.rocpd import read_rocpd

    db = make_db(tmp_path / "r.db", DATA.replace("'gemm_kernel'", "CAST(x'67656dff' AS TEXT)"))
    t = read_rocpd(db)
    assert t.kernels.column("name").to_pylist()[0] == "gem\ufffd"


def test_ns_values_in_ts_are_out_of_range_not_a_crash(tmp_path: Path) -> None:
    """A tool that writes ns into ts (1.7e18) meets the format's us: beyond int64 ns, so
    those events are left out and counted; the others are read."""
    evs = step_events()
    evs.append(_x("kernel", "from_the_future", 0, 7, 1.7e18, 5.0))
    p = tmp_path / "ns.json"
    p.write_bytes(pytorch2_trace(evs))
    t = KinetoImporter().read(p)
    assert t.kernels.column("name").to_pylist() == ["volta_sgemm_32x32_sliced1x4_nn"]
    assert t.meta["dropped_rows"] == {"ts: missing, not a number or out of range": 1}


def test_huge_digit_strings_are_odd_values_not_a_crash(tmp_path: Path) -> None:
    """Python refuses int() of text over 4300 digits (ValueError): such text is just odd."""
    assert to_int("9" * 5000) is None
    evs = triton_events(kernel_grid="[" + "9" * 5000 + "]")
    evs[1]["ts"] = "1" * 5000
    p = tmp_path / "digits.json"
    p.write_bytes(pytorch2_trace(evs))
    t = KinetoImporter().read(p)
    assert t.kernels.column("grid_x").to_pylist() == [None] and t.ops.num_rows == 0
    assert t.meta["odd_values"] == {"args.grid": 1}
    assert t.meta["dropped_rows"] == {"ts: missing, not a number or out of range": 1}


@pytest.mark.parametrize("chunk", [1 << 20, 150])
def test_category_and_phase_that_are_not_text(tmp_path: Path, chunk: int) -> None:
    """A number or null as cat/ph is an absent one: the event is counted, never tabled; a
    number is an odd value (counted in every piece it appears in), null is just absent."""
    evs = step_events()
    for i in range(3):
        evs.append(_x(5, f"numeric_cat_{i}", 0, 7, 1.0, 1.0))
        evs.append(_x(None, f"null_cat_{i}", 0, 7, 1.0, 1.0))
        ev = _x("kernel", f"numeric_ph_{i}", 0, 7, 1.0, 1.0)
        ev["ph"] = 7
        evs.append(ev)
    p = tmp_path / "labels.json"
    p.write_bytes(pytorch2_trace(evs))
    t = KinetoImporter(chunk_bytes=chunk).read(p)
    assert t.kernels.column("name").to_pylist() == ["volta_sgemm_32x32_sliced1x4_nn"]
    assert t.meta["odd_values"] == {"cat": 3, "ph": 3}
    assert t.meta["event_count"] == 8 + 9
    tabled = {"cpu_op", "cuda_runtime", "kernel", "gpu_memcpy", "user_annotation", "ac2g"}
    assert set(t.meta["events_by_category"]) <= tabled


def test_regression_ort_time_beyond_a_double_in_ns(tmp_path: Path) -> None:
    """Fuzzing: a finite dur of 1e306 us overflowed to inf when scaled to ns (OverflowError)."""
    from aaco.importers.ort_trace import OrtTraceImporter

    text = (OTHER / "ort" / "rocm_ep_profile.json").read_text()
    p = tmp_path / "ort.json"
    p.write_text(text.replace('"dur" :30,', '"dur" :1e306,', 1))
    t = OrtTraceImporter().read(p)
    assert t.meta["dropped_rows"] == {"Node event: ts/dur missing, negative or not a number": 1}


def test_regression_rocprofv3_json_time_beyond_int64(tmp_path: Path) -> None:
    """Found by a mutation campaign: a timestamp beyond int64 (msgspec decodes any int)
    reached pa.array and raised OverflowError; that dispatch is left out and counted."""
    from aaco.importers.rocprofv3_json import read_rocprofv3_json

    src = OTHER / "rocprof" / "json" / "5150_results.json"
    doc = json.loads(src.read_text())
    dispatch = doc["rocprofiler-sdk-tool"][0]["buffer_records"]["kernel_dispatch"][0]
    dispatch["end_timestamp"] = 1 << 70
    p = tmp_path / "far_results.json"
    p.write_text(json.dumps(doc))
    t = read_rocprofv3_json(p)
    assert t.kernels.num_rows == read_rocprofv3_json(src).kernels.num_rows - 1
    assert t.meta["dropped_rows"] == {"kernel_dispatch: start/end beyond int64": 1}


def test_regression_rocpd_rows_without_a_name(tmp_path: Path) -> None:
    """Found by a mutation campaign: a NULL region name crashed api_kind (AttributeError) and
    a NULL kernel name crashed ``aaco import``'s kernel classification. The tables require a
    name, so such a kernel, region or counter row is left out and counted."""
    from tests.importers.test_rocpd import DATA, make_db

    from aaco.importers.rocpd import read_rocpd

    data = DATA.replace("'hipLaunchKernel'", "NULL").replace("'relu_kernel'", "NULL")
    db = make_db(tmp_path / "900_results.db", data.replace("'SQ_WAVES', 16", "NULL, 16"))
    t = read_rocpd(db)
    assert t.kernels.column("name").to_pylist() == ["gemm_kernel"]
    assert t.api_calls.num_rows == 0 and t.annotations.column("name").to_pylist() == ["step 0"]
    assert t.kernel_counters.num_rows == 0  # one counter nameless, the other's kernel nameless
    assert t.meta["dropped_rows"] == {
        "kernel_pmc_events: name missing": 1,
        "kernel_pmc_events: pmc_name missing": 1,
        "kernels: name missing": 1,
        "regions: name missing": 1,
    }
    analyze_trace(import_paths([db]))  # what `aaco import` does next
