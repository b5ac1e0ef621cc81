"""Tests of aaco.importers.ort_profile on hand-made profiles and on real ORT sessions."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tests.onnx_models import conv_chain, f32, gelu_mlp, make_model, unnamed_chain, vi

from aaco.analysis.graph import load_model_proto, map_optimized_to_original, node_names
from aaco.errors import InputError
from aaco.importers.ort_profile import OrtProfile, parse_ort_profile
from aaco.session.schema import KERNELS, MEMCPY, OPS, ORT_RUNS

Level = ort.GraphOptimizationLevel
Event = dict[str, Any]


# --------------------------------------------------------------------------- writing profiles


def _ort_value(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _ort_line(ev: Event) -> str:
    """One event the way ORT's profiler writes it (profiler.cc)."""
    args = ",".join(f'"{k}" : {_ort_value(v)}' for k, v in ev.get("args", {}).items())
    return (
        f'{{"cat" : "{ev["cat"]}","pid" :{ev.get("pid", 7)},"tid" :{ev.get("tid", 7)},'
        f'"dur" :{ev["dur"]},"ts" :{ev["ts"]},"ph" : "X","name" :"{ev["name"]}",'
        f'"args" : {{{args}}}}}'
    )


def write_profile(path: Path, events: Sequence[Event], layout: str = "ort") -> Path:
    if layout == "ort":
        text = "[\n" + ",\n".join(_ort_line(e) for e in events) + "\n]\n"
    elif layout == "lines":  # one event per line, but spaced the way json.dumps does
        text = (
            "[\n"
            + ",\n".join(json.dumps({"ph": "X", "pid": 7, "tid": 7, **e}) for e in events)
            + "\n]\n"
        )
    elif layout == "compact":
        text = json.dumps([{"ph": "X", "pid": 7, "tid": 7, **e} for e in events])
    else:
        text = json.dumps([{"ph": "X", "pid": 7, "tid": 7, **e} for e in events], indent=2)
    path.write_text(text)
    return path


def node(name: str, ts: float, dur: float, **args: Any) -> Event:
    base = {
        "op_name": "Relu",
        "provider": "CPUExecutionProvider",
        "node_index": "0",
        "activation_size": "96",
        "parameter_size": "0",
        "output_size": "96",
        "input_type_shape": [{"float": [2, 3, 4]}],
        "output_type_shape": [{"float": [2, 3, 4]}],
        "thread_scheduling_stats": {
            "main_thread": {"thread_pool_name": "session-1-intra-op", "block_size": [1]},
            "sub_threads": {"1402": {"num_run": 0, "core": -1}},
        },
        "mem_in_use_delta": "0",
    }
    base.update(args)
    return {"cat": "Node", "ts": ts, "dur": dur, "name": f"{name}_kernel_time", "args": base}


def session(name: str, ts: float, dur: float) -> Event:
    return {"cat": "Session", "ts": ts, "dur": dur, "name": name, "args": {}}


# Times in µs. ORT writes model_run after the node events it encloses.
HAND_MADE: list[Event] = [
    session("model_loading_uri", 0, 100),
    session("session_initialization", 100, 2000),
    node("early", 2200, 5),  # before any run: dropped
    {"cat": "Node", "ts": 2999, "dur": 1, "name": "a_fence_before", "args": {}},
    node("a", 3000, 10, op_name="Conv", node_index="4", parameter_size="1728"),
    node("b", 3011, 20.4),
    session("SequentialExecutor::Execute", 2995, 40),
    session("model_run", 2990, 50),
    node("between", 3500, 5),  # between runs: dropped
    node("a", 4000, 1.2346, op_name="Conv", node_index="4", parameter_size="1728"),
    node("b", 4002.5, 7),
    {
        "cat": "Kernel",
        "ts": 4003,
        "dur": 2,
        "name": "relu_kernel",
        "args": {"parent_name": "b", "op_name": "Relu", "stream": "0"},
    },
    session("model_run", 3995, 20),
    node("a", 5000, 3, op_name="Conv", node_index="4", parameter_size="1728"),
    session("model_run", 4990, 30.0004),
]


@pytest.fixture(params=["ort", "lines", "compact", "indented"])
def hand_made(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The same events in ORT's line layout and as other JSON writers lay them out."""
    layout: str = request.param
    return write_profile(tmp_path / f"profile_{layout}.json", HAND_MADE, layout)


def _rows(table: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


# --------------------------------------------------------------------------- hand-made


def test_times_become_rounded_nanoseconds(hand_made: Path) -> None:
    prof = parse_ort_profile(hand_made)
    rows = _rows(prof.ops)
    assert [(r["iteration"], r["node_name"], r["start_ns"], r["dur_ns"]) for r in rows] == [
        (0, "a", 3_000_000, 10_000),
        (0, "b", 3_011_000, 20_400),
        (1, "a", 4_000_000, 1_235),  # 1.2346 µs rounds up, not truncated
        (1, "b", 4_002_500, 7_000),
        (2, "a", 5_000_000, 3_000),
    ]
    assert _rows(prof.runs) == [
        {
            "iteration": 0,
            "start_ns": 2_990_000,
            "dur_ns": 50_000,
            "node_ns": 30_400,
            "node_count": 2,
            "wall_ns": None,  # only the worker knows wall times
        },
        {
            "iteration": 1,
            "start_ns": 3_995_000,
            "dur_ns": 20_000,
            "node_ns": 8_235,
            "node_count": 2,
            "wall_ns": None,  # only the worker knows wall times
        },
        {
            "iteration": 2,
            "start_ns": 4_990_000,
            "dur_ns": 30_000,
            "node_ns": 3_000,
            "node_count": 1,
            "wall_ns": None,  # only the worker knows wall times
        },
    ]
    assert prof.session_events == {
        "model_loading_uri": 100_000,
        "session_initialization": 2_000_000,
    }
    assert prof.run_count_total == 3


def test_args_become_columns(hand_made: Path) -> None:
    first = _rows(parse_ort_profile(hand_made).ops)[0]
    assert first == {
        "source": "onnxruntime",
        "iteration": 0,
        "node_name": "a",
        "op_type": "Conv",
        "provider": "CPUExecutionProvider",
        "node_index": 4,
        "start_ns": 3_000_000,
        "dur_ns": 10_000,
        "nested_ns": 0,
        "thread_id": 7,
        "input_shapes": '[{"float":[2,3,4]}]',
        "output_shapes": '[{"float":[2,3,4]}]',
        "activation_bytes": 96,
        "parameter_bytes": 1728,
        "output_bytes": 96,
        "original_nodes": None,
        "process_id": None,
        "external_id": None,
    }


def test_tables_follow_the_declared_schemas(hand_made: Path) -> None:
    prof = parse_ort_profile(hand_made)
    assert prof.ops.schema.equals(OPS.schema, check_metadata=True)
    assert prof.runs.schema.equals(ORT_RUNS.schema, check_metadata=True)


def test_layouts_parse_to_the_same_tables(tmp_path: Path) -> None:
    tables = [
        parse_ort_profile(write_profile(tmp_path / f"{lay}.json", HAND_MADE, lay), skip_runs=1)
        for lay in ("ort", "lines", "compact", "indented")
    ]
    for other in tables[1:]:
        assert other.ops.equals(tables[0].ops)
        assert other.runs.equals(tables[0].runs)


def test_skip_runs_drops_runs_and_renumbers(hand_made: Path) -> None:
    prof = parse_ort_profile(hand_made, skip_runs=1)
    assert [(r["iteration"], r["node_name"]) for r in _rows(prof.ops)] == [
        (0, "a"),
        (0, "b"),
        (1, "a"),
    ]
    assert [r["iteration"] for r in _rows(prof.runs)] == [0, 1]
    assert _rows(prof.runs)[0]["start_ns"] == 3_995_000
    assert prof.run_count_total == 3

    none_left = parse_ort_profile(hand_made, skip_runs=5)
    assert none_left.ops.num_rows == 0
    assert none_left.runs.num_rows == 0
    assert none_left.run_count_total == 3
    with pytest.raises(ValueError):
        parse_ort_profile(hand_made, skip_runs=-1)


def test_original_map_fills_original_nodes(hand_made: Path) -> None:
    prof = parse_ort_profile(hand_made, original_map={"a": ["conv", "bn"], "b": None})
    by_name = {r["node_name"]: r["original_nodes"] for r in _rows(prof.ops)}
    assert by_name == {"a": ["conv", "bn"], "b": None}


@pytest.mark.parametrize("layout", ["ort", "lines", "compact"])
def test_shapes_given_as_text_are_stored_compact(tmp_path: Path, layout: str) -> None:
    # Older ORT builds write the type/shape args as JSON text inside a string.
    events = [
        node("a", 10, 1, input_type_shape='[{"float": [1, 2]}]', output_type_shape="odd"),
        session("model_run", 5, 10),
    ]
    row = _rows(parse_ort_profile(write_profile(tmp_path / "p.json", events, layout)).ops)[0]
    assert row["input_shapes"] == '[{"float":[1,2]}]'
    assert row["output_shapes"] == "odd"


def test_empty_profile_gives_empty_tables(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text("[\n]\n")
    prof = parse_ort_profile(path)
    assert prof == OrtProfile(ops=OPS.empty(), runs=ORT_RUNS.empty(), session_events={})


def test_overlapping_runs_keep_their_own_nodes(tmp_path: Path) -> None:
    # Two threads calling Run at once: the later run starts before the earlier one ends.
    events = [
        node("a", 110, 5),
        node("b", 160, 5),  # after run 1 started, run 0 still going
        node("c", 260, 5),  # after run 0 ended, run 1 still going
        session("model_run", 100, 100),
        session("model_run", 150, 150),
    ]
    prof = parse_ort_profile(write_profile(tmp_path / "p.json", events))
    assert [(r["node_name"], r["iteration"]) for r in _rows(prof.ops)] == [
        ("a", 0),
        ("b", 1),
        ("c", 1),
    ]


def test_many_events_parse_like_json(tmp_path: Path) -> None:
    """The fast line reader agrees with plain JSON decoding on a larger profile."""
    rng = np.random.default_rng(0)
    events: list[Event] = []
    ts = 1000.0
    for run in range(20):
        start = ts
        for k in range(200):
            dur = float(rng.integers(1, 50)) + (0.5 if k % 3 == 0 else 0.0)
            shape = [{"float": [1, int(rng.integers(1, 64)), 7, 7]}]
            events.append(
                node(
                    f"n{k}",
                    ts,
                    dur,
                    node_index=str(k),
                    input_type_shape=shape,
                    op_name=f"Op{k % 7}",
                )
            )
            ts += dur + 1
        events.append(session("model_run", start - 1, ts - start + 1))
        ts += 10 + run
    fast = parse_ort_profile(write_profile(tmp_path / "ort.json", events, "ort"), skip_runs=2)
    slow = parse_ort_profile(write_profile(tmp_path / "json.json", events, "compact"), skip_runs=2)
    assert fast.ops.num_rows == 18 * 200
    assert fast.ops.equals(slow.ops)
    assert fast.runs.equals(slow.runs)
    durs = fast.ops.column("dur_ns").to_pylist()
    assert all(isinstance(d, int) and d % 500 == 0 for d in durs)


# --------------------------------------------------------------------------- errors


def _expect_input_error(path: Path, *fragments: str) -> str:
    with pytest.raises(InputError) as err:
        parse_ort_profile(path)
    message = str(err.value)
    assert str(path) in message
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_missing_file(tmp_path: Path) -> None:
    _expect_input_error(tmp_path / "nope.json", "no such")


def test_directory(tmp_path: Path) -> None:
    _expect_input_error(tmp_path, "directory")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("hello, I am not JSON\n", "not a JSON array"),
        ('{"traceEvents": []}', "a JSON object"),
        ("[1, 2, 3]", "no usable event"),
        ('[{"cat": "Node", "name": "x"}]', "no usable event"),
        ('[\n{"ph": "X", "ts": 1, "name": "a"} junk,\n{"ph": "X"}\n]\n', "invalid JSON"),
        ('[{"ph": "X", "ts": "soon", "name": "model_run", "cat": "Session"}]', "no usable event"),
        ("[]\n[]", "after the closing"),
    ],
    ids=["empty", "text", "object", "numbers", "no-ts", "garbage", "bad-ts", "trailing"],
)
def test_not_an_ort_profile(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(text)
    message = _expect_input_error(path, fragment)
    assert "expected an ONNX Runtime profile" in message


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(b"[\n" + bytes(range(128, 256)) + b"\n]\n")
    _expect_input_error(path, "UTF-8")


@pytest.mark.parametrize("layout", ["ort", "lines", "compact", "indented"])
def test_truncated_profiles_are_reported(tmp_path: Path, layout: str) -> None:
    full = write_profile(tmp_path / "full.json", HAND_MADE, layout).read_text()
    last_event = full.rindex("model_run")
    cuts = {
        "no-bracket": full.rstrip().removesuffix("]"),
        "mid-event": full[:last_event],
        "mid-string": full[: last_event + 4],
        "mid-args": full[: full.index("thread_scheduling_stats") + 30],
        "after-comma": full[: full.index("model_loading_uri") + 60].rsplit(",", 1)[0] + ",",
    }
    for label, text in cuts.items():
        path = tmp_path / f"cut-{label}.json"
        path.write_text(text)
        _expect_input_error(path, "truncated")


# --------------------------------------------------------------------------- real ORT


def gather_model() -> onnx.ModelProto:
    """int64 token ids with symbolic batch and sequence -> Gather -> ReduceSum."""
    table = f32("table", [100, 4], 1)
    axis = numpy_helper.from_array(np.asarray([1], np.int64), "axis")
    return make_model(
        [
            helper.make_node("Gather", ["table", "ids"], ["emb"], name="lookup", axis=0),
            helper.make_node("ReduceSum", ["emb", "axis"], ["y"], name="sum", keepdims=0),
        ],
        [vi("ids", TensorProto.INT64, ["batch", "seq"])],
        [vi("y", TensorProto.FLOAT, ["batch", 4])],
        [table, axis],
    )


Profiled = tuple[Path, onnx.ModelProto, onnx.ModelProto]


@pytest.fixture
def profiled(tmp_path: Path) -> Callable[..., Profiled]:
    """Run a model under ORT profiling; give back the profile, the model and ORT's graph."""

    def run(model: onnx.ModelProto, feeds: dict[str, Any], runs: int, level: Any) -> Profiled:
        src = tmp_path / "model.onnx"
        onnx.save(model, src)
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        so.enable_profiling = True
        so.profile_file_prefix = str(tmp_path / "ort_profile")
        so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
        so.log_severity_level = 3  # the NCHWc "hardware specific" notice is expected
        sess = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            sess.run(None, feeds)
        profile = Path(sess.end_profiling())
        return profile, model, load_model_proto(tmp_path / "optimized.onnx")

    return run


def _image(batch: int = 2) -> dict[str, Any]:
    return {"x": np.random.default_rng(0).standard_normal((batch, 3, 16, 16)).astype(np.float32)}


def _check_runs(prof: OrtProfile, optimized_nodes: int, runs: int) -> None:
    assert prof.runs.num_rows == runs
    assert prof.runs.column("iteration").to_pylist() == list(range(runs))
    assert sorted(set(prof.ops.column("iteration").to_pylist())) == list(range(runs))
    for run in _rows(prof.runs):
        assert 0 < run["node_ns"] <= run["dur_ns"]
        assert run["node_count"] == optimized_nodes


def test_real_profile_of_fused_convs(profiled: Callable[..., Profiled]) -> None:
    path, original, optimized = profiled(conv_chain(), _image(), 4, Level.ORT_ENABLE_EXTENDED)
    mapping = map_optimized_to_original(original, optimized)
    prof = parse_ort_profile(path, skip_runs=1, original_map=mapping)

    assert prof.run_count_total == 4
    _check_runs(prof, optimized_nodes=3, runs=3)
    assert set(prof.ops.column("node_name").to_pylist()) == set(
        node_names(optimized.graph, original.graph)
    )
    assert set(prof.session_events) == {"model_loading_uri", "session_initialization"}
    assert all(v > 0 for v in prof.session_events.values())

    conv1 = next(r for r in _rows(prof.ops) if r["node_name"] == "conv1")
    assert conv1["op_type"] == "FusedConv"
    assert conv1["provider"] == "CPUExecutionProvider"
    assert conv1["original_nodes"] == ["conv1", "bn1", "relu1"]
    assert json.loads(conv1["input_shapes"]) == [
        {"float": [2, 3, 16, 16]},
        {"float": [8, 3, 3, 3]},
        {"float": [8]},
    ]
    assert json.loads(conv1["output_shapes"]) == [{"float": [2, 8, 16, 16]}]
    assert conv1["activation_bytes"] == 2 * 3 * 16 * 16 * 4
    assert conv1["parameter_bytes"] == (8 * 3 * 3 * 3 + 8) * 4
    assert conv1["output_bytes"] == 2 * 8 * 16 * 16 * 4
    assert conv1["thread_id"] is not None


def test_real_profile_at_full_optimization(profiled: Callable[..., Profiled]) -> None:
    path, original, optimized = profiled(conv_chain(), _image(), 3, Level.ORT_ENABLE_ALL)
    mapping = map_optimized_to_original(original, optimized)
    prof = parse_ort_profile(path, skip_runs=1, original_map=mapping)
    names = node_names(optimized.graph, original.graph)
    _check_runs(prof, optimized_nodes=len(names), runs=2)
    assert set(prof.ops.column("node_name").to_pylist()) == set(names)
    for row in _rows(prof.ops):
        assert row["original_nodes"] == mapping[row["node_name"]]


def test_real_profile_of_bias_gelu(profiled: Callable[..., Profiled]) -> None:
    feeds = {"x": np.ones((3, 8, 16), np.float32)}
    path, original, optimized = profiled(
        gelu_mlp(identity=False), feeds, 3, Level.ORT_ENABLE_EXTENDED
    )
    prof = parse_ort_profile(path, original_map=map_optimized_to_original(original, optimized))
    _check_runs(prof, optimized_nodes=len(optimized.graph.node), runs=3)
    gelu = next(r for r in _rows(prof.ops) if r["op_type"] == "BiasGelu")
    assert gelu["original_nodes"] == ["bias", "div", "erf", "add1", "mul", "mulhalf"]


def test_real_profile_with_int64_input_and_symbolic_dims(
    profiled: Callable[..., Profiled],
) -> None:
    ids = np.random.default_rng(0).integers(0, 100, size=(3, 5), dtype=np.int64)
    path, _, optimized = profiled(gather_model(), {"ids": ids}, 2, Level.ORT_ENABLE_ALL)
    prof = parse_ort_profile(path)
    _check_runs(prof, optimized_nodes=len(optimized.graph.node), runs=2)
    lookup = next(r for r in _rows(prof.ops) if r["node_name"] == "lookup")
    assert lookup["op_type"] == "Gather"
    # The profile records the concrete dims of this run, not the symbolic ones.
    assert json.loads(lookup["input_shapes"]) == [{"float": [100, 4]}, {"int64": [3, 5]}]
    assert json.loads(lookup["output_shapes"]) == [{"float": [3, 5, 4]}]


def test_real_profile_names_unnamed_nodes_like_the_graph(
    profiled: Callable[..., Profiled],
) -> None:
    feeds = {"x": np.ones((2, 3), np.float32)}
    path, original, optimized = profiled(unnamed_chain(), feeds, 2, Level.ORT_ENABLE_ALL)
    prof = parse_ort_profile(path, original_map=map_optimized_to_original(original, optimized))
    names = prof.ops.column("node_name").to_pylist()
    assert set(names) == set(node_names(optimized.graph, original.graph))
    assert set(names) == {"Relu_0", "Neg_1", "Abs_3"}  # ORT's own <op>_<index> names
    assert {r["node_name"]: r["original_nodes"] for r in _rows(prof.ops)} == {
        "Relu_0": ["Relu_0"],
        "Neg_1": ["Neg_1"],
        "Abs_3": ["Abs_3"],
    }


def test_real_profile_cut_short_is_truncated(
    profiled: Callable[..., Profiled], tmp_path: Path
) -> None:
    path, _, _ = profiled(conv_chain(), _image(), 2, Level.ORT_ENABLE_EXTENDED)
    text = path.read_text()
    assert parse_ort_profile(path).runs.num_rows == 2
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    _expect_input_error(cut, "truncated")


# --------------------------------------------------------------------------- GPU Kernel events

GPU_FIXTURES = Path(__file__).parent / "fixtures" / "ort"
CONV_KERNEL = (
    "_Z23implicit_convolve_sgemmIffLi128ELi5ELi5ELi3ELi3ELi3ELi1ELb0ELb0ELb1EEviiiPKT_iPT0_S2_"
    "18kernel_conv_paramsyiffiS2_S5_bii"
)


def test_cuda_kernel_events_become_kernel_rows() -> None:
    prof = parse_ort_profile(GPU_FIXTURES / "cuda_ep_profile.json")
    k = prof.kernels
    assert k.schema == KERNELS.schema
    assert k.num_rows == 8
    first = k.slice(0, 4).to_pylist()
    assert [r["name"] for r in first] == [
        CONV_KERNEL,
        "_ZN11onnxruntime4cuda26_UnaryElementWiseSimpleNoPadIffNS0_6OP_ReluIfEEEEvPKT_PT0_T1_i",
        "ampere_sgemm_32x32_sliced1x4_tn",
        "_ZN11onnxruntime4cuda13_BinaryElementWiseIfffNS0_6OP_AddIfffEELb1ELb1ELi256ELi4EEEviPKT0_"
        "PKT1_PT_RKT2_i",
    ]
    # start = the parent node's start (ORT's kernel ts is parent ts + 1, 2 ... us)
    assert [r["start_ns"] for r in first] == [60_060_000, 60_160_000, 60_182_000, 60_182_000]
    assert [r["dur_ns"] for r in first] == [31_000, 4_000, 9_000, 2_000]
    assert [r["end_ns"] for r in first] == [60_091_000, 60_164_000, 60_191_000, 60_184_000]
    assert [r["grid_x"] for r in first] == [16, 64, 1, 1]
    assert [r["block_x"] for r in first] == [128, 256, 128, 256]
    assert {(r["grid_y"], r["grid_z"], r["block_y"], r["block_z"]) for r in first} == {(1, 1, 1, 1)}
    assert {r["stream"] for r in first} == {7}
    assert {r["thread_id"] for r in first} == {31337}
    assert {r["time_is_gpu"] for r in first} == {False}
    assert {r["source"] for r in first} == {"onnxruntime"}
    for col in ("device", "correlation_id", "external_id", "process_id", "family", "registers"):
        assert k.column(col).null_count == 8, col
    assert k.column("iteration").to_pylist() == [0] * 4 + [1] * 4
    starts = [61_060_000, 61_160_000, 61_182_000, 61_182_000]
    assert k.column("start_ns").to_pylist()[4:] == starts


def test_cuda_copies_become_memcpy_rows_and_init_copies_are_dropped() -> None:
    prof = parse_ort_profile(GPU_FIXTURES / "cuda_ep_profile.json", skip_runs=1)
    c = prof.memcpy
    assert c.schema == MEMCPY.schema
    assert c.to_pylist() == [
        {"source": "onnxruntime", "name": "MemcpyHostToDevice", "kind": "HtoD", "bytes": None,
         "start_ns": 61_012_000, "end_ns": 61_015_000, "dur_ns": 3_000, "device": None,
         "stream": 7, "src_device": None, "dst_device": None, "correlation_id": None,
         "external_id": None, "iteration": 0},
        {"source": "onnxruntime", "name": "MemcpyDeviceToHost", "kind": "DtoH", "bytes": None,
         "start_ns": 61_226_000, "end_ns": 61_228_000, "dur_ns": 2_000, "device": None,
         "stream": 7, "src_device": None, "dst_device": None, "correlation_id": None,
         "external_id": None, "iteration": 0},
    ]  # fmt: skip
    assert prof.kernels.num_rows == 4  # the skipped run's kernels go with it
    assert prof.kernels.column("iteration").to_pylist() == [0] * 4


def test_rocm_kernel_events() -> None:
    prof = parse_ort_profile(GPU_FIXTURES / "rocm_ep_profile.json")
    k = prof.kernels.to_pylist()
    stream = 0x55D0C1E3A2B0
    assert [r["name"] for r in k] == [
        "Cijk_Ailk_Bljk_SB_MT64x64x16_MI32x32x2x1_SN_1LDSB0_GRVW4",
        "void onnxruntime::rocm::_UnaryElementWise<float>(float const*, float*, int)",
    ]
    assert [r["stream"] for r in k] == [stream, stream]
    # ROCm grid sizes: blocks or work-items depending on the launch API, so unknown
    assert [(r["grid_x"], r["grid_y"], r["grid_z"]) for r in k] == [(None, None, None)] * 2
    assert [(r["block_x"], r["block_y"], r["block_z"]) for r in k] == [(256, 1, 1)] * 2
    # parent by file order and op_name; the second kernel's op_name (Sigmoid) is not its
    # preceding node's (Relu): no parent, its own ts, no thread
    assert [(r["start_ns"], r["thread_id"]) for r in k] == [(90_050_000, 4712), (90_121_000, None)]
    assert [r["iteration"] for r in k] == [0, 0]
    c = prof.memcpy.select(["name", "kind", "bytes", "start_ns", "dur_ns", "stream"]).to_pylist()
    assert c == [
        {"name": "hipMemcpyAsync", "kind": "HtoD", "bytes": None, "start_ns": 90_011_000,
         "dur_ns": 4_000, "stream": stream},
        {"name": "hipMemsetAsync", "kind": "memset", "bytes": 2048, "start_ns": 90_050_000,
         "dur_ns": 2_000, "stream": stream},
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["cuda_ep_profile.json", "rocm_ep_profile.json"])
def test_kernel_events_parse_the_same_in_any_layout(tmp_path: Path, name: str) -> None:
    src = GPU_FIXTURES / name
    fast = parse_ort_profile(src)
    indented = tmp_path / "indented.json"
    indented.write_text(json.dumps(json.loads(src.read_text()), indent=2))
    slow = parse_ort_profile(indented)
    assert slow.kernels.equals(fast.kernels)
    assert slow.memcpy.equals(fast.memcpy)
    assert slow.ops.equals(fast.ops)


def test_parent_name_wins_over_file_order(tmp_path: Path) -> None:
    events = [
        {"cat": "Node", "name": "a_kernel_time", "ts": 10, "dur": 5, "tid": 3,
         "args": {"op_name": "Add"}},
        {"cat": "Node", "name": "b_kernel_time", "ts": 20, "dur": 5, "tid": 3,
         "args": {"op_name": "Add"}},
        # written after b but naming a (with ORT's event-name suffix)
        {"cat": "Kernel", "name": "k", "ts": 21, "dur": 2, "pid": -1, "tid": -1,
         "args": {"op_name": "Add", "parent_name": "a_kernel_time", "stream": "1"}},
        {"cat": "Kernel", "name": "k2", "ts": 22, "dur": 2, "pid": -1, "tid": -1,
         "args": {"op_name": "Add", "stream": "1"}},
        {"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
    ]  # fmt: skip
    path = tmp_path / "p.json"
    path.write_text("[\n" + ",\n".join(_ort_line(e) for e in events) + "\n]\n")
    k = parse_ort_profile(path).kernels
    assert k.column("start_ns").to_pylist() == [10_000, 20_000]
    assert k.column("thread_id").to_pylist() == [3, 3]


def test_gzipped_profile(tmp_path: Path) -> None:
    src = GPU_FIXTURES / "cuda_ep_profile.json"
    gz = tmp_path / "p.json.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    assert parse_ort_profile(gz) == parse_ort_profile(src)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(src.read_bytes())[:-200])
    _expect_input_error(cut, "truncated")


def test_subgraph_nodes_are_not_counted_twice(tmp_path: Path) -> None:
    """ORT profiles the nodes of an If body inside the If node's own time: the If row keeps
    its own time in dur_ns, its body's time goes to nested_ns, so the rows add up to the
    run once (a real ONNX Runtime profile of a real If model)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import GraphProto, TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])

    def branch(op: str) -> GraphProto:
        nodes = [helper.make_node("MatMul", ["x", "x"], ["m"], name=f"{op}_mm"),
                 helper.make_node(op, ["m"], ["out"], name=f"{op}_act")]  # fmt: skip
        return helper.make_graph(nodes, op, [], [helper.make_tensor_value_info("out", 1, None)])

    node = helper.make_node(
        "If", ["c"], ["y"], name="cond", then_branch=branch("Relu"), else_branch=branch("Tanh")
    )
    m = helper.make_model(helper.make_graph([node], "g", [x, c], [y]),
                          opset_imports=[helper.make_opsetid("", 17)], ir_version=9)  # fmt: skip
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "p")
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {"x": np.ones((64, 64), np.float32), "c": np.array(True)}
    for _ in range(3):
        sess.run(None, feeds)
    prof = parse_ort_profile(Path(sess.end_profiling()))
    rows = prof.ops.to_pylist()
    ifs = [r for r in rows if r["op_type"] == "If"]
    body = [r for r in rows if r["node_name"].startswith("Relu_")]
    assert len(ifs) == 3 and len(body) == 6
    for it in range(3):
        parent = next(r for r in ifs if r["iteration"] == it)
        children = [r for r in body if r["iteration"] == it]
        # what was taken out of the If is exactly its body's time
        assert parent["nested_ns"] == sum(r["dur_ns"] for r in children) > 0
        assert all(r["nested_ns"] == 0 for r in children)
        assert parent["start_ns"] <= min(r["start_ns"] for r in children)
    # every nanosecond once: the nodes' time is within each run's time
    for run in prof.runs.to_pylist():
        assert run["node_ns"] <= run["dur_ns"]
