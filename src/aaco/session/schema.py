"""Every Parquet table of the session bundle, declared once: columns, Arrow types, units, meaning.

Writers build tables with :func:`TableSpec.from_columns` (or check them with
:meth:`TableSpec.conform`); readers get them back through :class:`aaco.Session`.
docs/schema.md is generated from this module (``python scripts/gen_schema_docs.py``) and a
test checks that it is up to date.

Clock convention: every ``*_ns`` timestamp column named ``ts_ns``/``start_ns``/``end_ns`` is
on the host's monotonic clock (``time.perf_counter_ns()``, CLOCK_MONOTONIC on Linux, shared
by all processes of one boot) unless its description says otherwise, so iteration
timestamps and telemetry samples align without conversion. ``session.json`` records the
offset to wall-clock time (``clock.epoch_offset_ns``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from aaco.errors import BundleError


@dataclass(frozen=True)
class Column:
    """One column: name, Arrow type, unit ('' when dimensionless) and a one-line meaning."""

    name: str
    type: pa.DataType
    unit: str
    doc: str
    nullable: bool = True


@dataclass(frozen=True)
class TableSpec:
    """A bundle table: its path inside the bundle and its columns."""

    name: str
    path: str
    doc: str
    columns: tuple[Column, ...]

    @property
    def schema(self) -> pa.Schema:
        fields = [pa.field(c.name, c.type, nullable=c.nullable) for c in self.columns]
        return pa.schema(fields, metadata={b"aaco.table": self.name.encode()})

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def from_columns(self, data: Mapping[str, Any]) -> pa.Table:
        """Build the table from a mapping of column name to values (lists or arrays).

        Missing columns are an error: a writer that cannot know a value puts nulls in.
        """
        missing = [c.name for c in self.columns if c.name not in data]
        extra = sorted(set(data) - set(self.column_names))
        if missing or extra:
            raise ValueError(f"table {self.name}: missing columns {missing}, unknown {extra}")
        arrays = [_as_array(data[c.name], c.type) for c in self.columns]
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def from_rows(self, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
        """Build the table from row dictionaries (convenient for small tables)."""
        return self.from_columns({c.name: [r.get(c.name) for r in rows] for c in self.columns})

    def empty(self) -> pa.Table:
        return self.schema.empty_table()

    def conform(self, table: pa.Table) -> pa.Table:
        """Check a table against the declared schema and cast it to the declared types.

        A nullable column the table lacks (one added to the format after the table was
        written) reads as nulls: unknown, which is what an older bundle knows of it.
        """
        names = table.column_names
        missing = [c.name for c in self.columns if c.name not in names and not c.nullable]
        if missing:
            raise BundleError(f"table {self.name} lacks columns {missing}")
        try:
            cols = [
                table.column(c.name).cast(c.type)
                if c.name in names
                else pa.nulls(table.num_rows, c.type)
                for c in self.columns
            ]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise BundleError(f"table {self.name} has a column of the wrong type: {exc}") from exc
        return pa.Table.from_arrays(cols, schema=self.schema)


def _as_array(values: Any, typ: pa.DataType) -> pa.Array | pa.ChunkedArray:
    # Arrow data is cast in C++; pa.array() would walk it element by element in Python.
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values if values.type == typ else values.cast(typ)
    return pa.array(values, type=typ)


def _c(name: str, typ: pa.DataType, unit: str, doc: str, nullable: bool = True) -> Column:
    return Column(name, typ, unit, doc, nullable)


_str = pa.string()
_i64 = pa.int64()
_i32 = pa.int32()
_f64 = pa.float64()
_bool = pa.bool_()
_strs = pa.list_(pa.string())

INFERENCE_ITERS = TableSpec(
    name="inference_iters",
    path="metrics/inference_iters.parquet",
    doc="One row per timed `session.run` call of the unprofiled timing loop.",
    columns=(
        _c("phase", _str, "", "`warmup` or `measured`", nullable=False),
        _c("iteration", _i32, "", "index within its phase, from 0", nullable=False),
        _c("start_ns", _i64, "ns", "monotonic time just before the call", nullable=False),
        _c("end_ns", _i64, "ns", "monotonic time just after the call returned", nullable=False),
        _c("latency_ns", _i64, "ns", "end_ns - start_ns", nullable=False),
        _c(
            "preprocess_ns",
            _i64,
            "ns",
            "time of the host-side preprocessing step inside the iteration (runner option "
            "`--preprocess`), included in latency_ns; null when there was none",
        ),
    ),
)

OPS = TableSpec(
    name="ops",
    path="profiler/ops.parquet",
    doc=(
        "One row per operator execution: ONNX Runtime `Node` events (`source` `onnxruntime`) "
        "and framework ops read from traces (`source` `pytorch` for Kineto `cpu_op` events, "
        "e.g. `aten::addmm`; `node_name` and `op_type` are then both the op name)."
    ),
    columns=(
        _c("source", _str, "", "where the row came from: `onnxruntime` or `pytorch`", False),
        _c("iteration", _i32, "", "profiled iteration index, from 0 (profiling warmup dropped)"),
        _c("node_name", _str, "", "node name in the optimized graph ORT executed", False),
        _c("op_type", _str, "", "operator type, e.g. `Conv`, `FusedConv`, `MatMul`"),
        _c("provider", _str, "", "execution provider that ran the node"),
        _c(
            "node_index",
            _i32,
            "",
            "ORT's internal node index, not a position in the saved optimized graph "
            "(join graph_nodes on node_name)",
        ),
        _c(
            "start_ns",
            _i64,
            "ns",
            "start on the trace's clock: relative to the start of the profile for ORT, "
            "the trace's own timestamps for imported traces (not monotonic)",
        ),
        _c(
            "dur_ns",
            _i64,
            "ns",
            "time of the operator itself (ORT: its kernel's time less the time of the nodes "
            "of its If/Loop/Scan bodies, which have rows of their own: `nested_ns`)",
            False,
        ),
        _c(
            "nested_ns",
            _i64,
            "ns",
            "time of the operator rows nested inside this one and left out of `dur_ns` "
            "(ORT: the nodes its subgraphs ran); 0 when none; null when not computed "
            "(imported traces, whose framework ops nest: see `outermost_ops`)",
        ),
        _c("thread_id", _i64, "", "OS thread id that ran the node"),
        _c("input_shapes", _str, "", "JSON list of {dtype: shape} per input, as ORT reports"),
        _c("output_shapes", _str, "", "JSON list of {dtype: shape} per output"),
        _c("activation_bytes", _i64, "B", "bytes of non-weight inputs (ORT activation_size)"),
        _c("parameter_bytes", _i64, "B", "bytes of weight inputs (ORT parameter_size)"),
        _c("output_bytes", _i64, "B", "bytes of outputs (ORT output_size)"),
        _c(
            "original_nodes",
            _strs,
            "",
            "nodes of the original model this node stands for; "
            "null when the mapping cannot be known",
        ),
        _c("process_id", _i64, "", "OS process id (imported traces; null for ORT rows)"),
        _c(
            "external_id",
            _i64,
            "",
            "Kineto `External id`: shared by a framework op, the runtime calls it made and "
            "their kernels; null when the source has none",
        ),
    ),
)

ORT_RUNS = TableSpec(
    name="ort_runs",
    path="profiler/ort_runs.parquet",
    doc="One row per `model_run` event of the ONNX Runtime profile (profiled pass).",
    columns=(
        _c("iteration", _i32, "", "profiled iteration index, from 0", False),
        _c("start_ns", _i64, "ns", "start, relative to the start of the profile", False),
        _c("dur_ns", _i64, "ns", "duration of `model_run` inside ORT", False),
        _c("node_ns", _i64, "ns", "sum of node kernel durations inside this run", False),
        _c("node_count", _i32, "", "node executions inside this run", False),
        _c(
            "wall_ns",
            _i64,
            "ns",
            "wall time of the `session.run` call of this run, timed by the worker like the "
            "measured iterations; null when the profile came from elsewhere",
        ),
    ),
)

GRAPH_NODES = TableSpec(
    name="graph_nodes",
    path="model/graph_nodes.parquet",
    doc="One row per node of the model's graph (main graph), after ONNX shape inference.",
    columns=(
        _c("graph", _str, "", "`original` (the file given) or `optimized` (what ORT ran)", False),
        _c("node_index", _i32, "", "position in the graph's node list", False),
        _c("node_name", _str, "", "node name (generated `<op_type>_<index>` when empty)", False),
        _c("op_type", _str, "", "operator type", False),
        _c("domain", _str, "", "operator domain (`` for ai.onnx)"),
        _c("inputs", _strs, "", "input tensor names"),
        _c("outputs", _strs, "", "output tensor names"),
        _c("input_shapes", _str, "", "JSON list of shapes (dims are ints, strings or null)"),
        _c("output_shapes", _str, "", "JSON list of shapes"),
        _c("input_dtypes", _strs, "", "element types of inputs (`float`, `int64`, ...)"),
        _c("output_dtypes", _strs, "", "element types of outputs"),
        _c("attributes", _str, "", "JSON object summarising the attributes (tensors elided)"),
        _c(
            "original_nodes",
            _strs,
            "",
            "original nodes this node stands for: itself on original rows; on optimized "
            "rows the fused group, null when it cannot be known",
        ),
    ),
)

GRAPH_EDGES = TableSpec(
    name="graph_edges",
    path="model/graph_edges.parquet",
    doc="One row per (producer, consumer, tensor) of the original graph.",
    columns=(
        _c("tensor", _str, "", "tensor name", False),
        _c("producer", _str, "", "producing node name; null for graph inputs and initializers"),
        _c("consumer", _str, "", "consuming node name; null for graph outputs"),
        _c("kind", _str, "", "`activation`, `initializer`, `graph_input` or `graph_output`", False),
        _c("dtype", _str, "", "element type"),
        _c("shape", _str, "", "JSON shape list (ints, strings for symbolic dims, null)"),
        _c("bytes", _i64, "B", "tensor size when every dim is known, else null"),
    ),
)

SYSTEM_EVENTS = TableSpec(
    name="system_events",
    path="telemetry/system_events.parquet",
    doc="One row per telemetry sample of the worker process and of the system (psutil).",
    columns=(
        _c("ts_ns", _i64, "ns", "monotonic time of the sample", False),
        _c(
            "proc_cpu_pct",
            _f64,
            "%",
            "worker CPU use since the previous sample (100 = one core); null on the "
            "first row and on a final row less than half a period after the previous one",
        ),
        _c("proc_rss_bytes", _i64, "B", "worker resident set size"),
        _c("proc_threads", _i32, "", "worker thread count"),
        _c(
            "proc_ctx_voluntary",
            _i64,
            "",
            "worker voluntary context switches summed over all its threads, cumulative",
        ),
        _c(
            "proc_ctx_involuntary",
            _i64,
            "",
            "worker involuntary context switches summed over all its threads, cumulative",
        ),
        _c("proc_minor_faults", _i64, "", "worker minor page faults, cumulative"),
        _c("proc_major_faults", _i64, "", "worker major page faults, cumulative"),
        _c("sys_cpu_pct", _f64, "%", "system CPU use since the previous sample (100 = all cores)"),
        _c(
            "sys_cpu_pct_per_core",
            pa.list_(_f64),
            "%",
            "per-core CPU use since previous sample, online CPUs in /proc/stat order",
        ),
        _c("load_1m", _f64, "", "1-minute load average"),
        _c(
            "cpu_freq_mhz",
            _f64,
            "MHz",
            "mean current CPU frequency; null when not readable, or skipped "
            "on this row to keep the sampler cheap",
        ),
    ),
)

_SRC_DOC = "importer that produced the row, e.g. `kineto`, `rocprofv3-csv`, `onnxruntime`"
_CORR_DOC = (
    "runtime correlation id linking the launching API call to this GPU activity "
    "(CUPTI/roctracer/rocprofiler); null when unknown"
)
_EXT_DOC = "Kineto `External id` of the framework op that launched it; null when unknown"

KERNELS = TableSpec(
    name="kernels",
    path="profiler/kernels.parquet",
    doc=(
        "One row per GPU kernel execution (dispatch) read from a kernel trace. Timestamps "
        "are on the trace's own clock (rocprofv3: ns since boot; Kineto: the trace's "
        "microseconds converted to ns; ORT `Kernel` events: relative to the parent node, "
        "see `time_is_gpu`)."
    ),
    columns=(
        _c("source", _str, "", _SRC_DOC, False),
        _c("name", _str, "", "kernel name as the tool reported it (mangled or not)", False),
        _c(
            "short_name",
            _str,
            "",
            "demangled, template arguments and parameters dropped "
            "(`at::native::elementwise_kernel`)",
        ),
        _c(
            "family",
            _str,
            "",
            "kernel family: gemm, conv, attention, norm, softmax, reduce, elementwise, "
            "data_movement, memcpy, communication, other",
        ),
        _c("library", _str, "", "vendor library when recognisable (rocBLAS, cuBLAS, MIOpen ...)"),
        _c("dtype", _str, "", "data type recognisable from the name (fp16, bf16, fp32 ...)"),
        _c("start_ns", _i64, "ns", "start of execution on the device", False),
        _c("end_ns", _i64, "ns", "end of execution on the device", False),
        _c("dur_ns", _i64, "ns", "end_ns - start_ns", False),
        _c(
            "time_is_gpu",
            _bool,
            "",
            "true when start/end are device timestamps on the trace's clock; false when "
            "only the duration is real (ORT `Kernel` events)",
            False,
        ),
        _c("device", _i32, "", "device index (Kineto pid / rocprofv3 agent)"),
        _c("stream", _i64, "", "stream id (HIP/CUDA stream; Kineto tid)"),
        _c("queue", _i64, "", "hardware queue id (rocprofv3 Queue_Id)"),
        _c("correlation_id", _i64, "", _CORR_DOC),
        _c("external_id", _i64, "", _EXT_DOC),
        _c("dispatch_id", _i64, "", "dispatch id (rocprofv3)"),
        _c("process_id", _i64, "", "OS process id of the launching process"),
        _c("thread_id", _i64, "", "OS thread id of the launching thread"),
        _c("grid_x", _i64, "", "grid size in blocks/workgroups along x (work-items / block)"),
        _c("grid_y", _i64, "", "grid size in blocks/workgroups along y"),
        _c("grid_z", _i64, "", "grid size in blocks/workgroups along z"),
        _c("block_x", _i64, "", "block/workgroup size in threads/work-items along x"),
        _c("block_y", _i64, "", "block/workgroup size along y"),
        _c("block_z", _i64, "", "block/workgroup size along z"),
        _c("registers", _i32, "", "registers per thread (CUDA) / architected VGPRs (AMD)"),
        _c("accum_vgpr", _i32, "", "accumulation VGPRs (AMD CDNA)"),
        _c("sgpr", _i32, "", "scalar registers (AMD)"),
        _c("shared_bytes", _i64, "B", "shared memory / LDS per block"),
        _c("scratch_bytes", _i64, "B", "scratch (private segment) memory per work-item"),
        _c(
            "iteration",
            _i32,
            "",
            "iteration (ProfilerStep / ORT run / marker window) that contains the kernel; "
            "null when the trace marks none",
        ),
    ),
)

API_CALLS = TableSpec(
    name="api_calls",
    path="profiler/api_calls.parquet",
    doc=(
        "One row per host runtime call (CUDA runtime/driver, HIP, HSA): kernel launches, "
        "memory copies, synchronisation and the rest. Timestamps on the trace's clock."
    ),
    columns=(
        _c("source", _str, "", _SRC_DOC, False),
        _c("domain", _str, "", "`cuda_runtime`, `cuda_driver`, `hip`, `hsa`, `marker` ...", False),
        _c("name", _str, "", "function name, e.g. `cudaLaunchKernel`, `hipLaunchKernel`", False),
        _c(
            "kind",
            _str,
            "",
            "`launch`, `memcpy`, `memset`, `sync`, `alloc` or `other`, from the name",
            False,
        ),
        _c("process_id", _i64, "", "OS process id"),
        _c("thread_id", _i64, "", "OS thread id"),
        _c("start_ns", _i64, "ns", "call start", False),
        _c("end_ns", _i64, "ns", "call end", False),
        _c("dur_ns", _i64, "ns", "end_ns - start_ns", False),
        _c("correlation_id", _i64, "", _CORR_DOC),
        _c("external_id", _i64, "", _EXT_DOC),
        _c(
            "device",
            _i32,
            "",
            "device a device-side event belongs to (Kineto `cuda_sync` on a GPU track: "
            "`Stream Sync`, `Event Sync`, `Stream Wait Event`...); null for host calls",
        ),
        _c(
            "stream",
            _i64,
            "",
            "stream a device-side sync waited on (4294967295 or -1: none); null for host calls",
        ),
        _c(
            "wait_stream",
            _i64,
            "",
            "device-side syncs: the stream whose work was waited for (Kineto `wait_on_stream`, "
            "nsys synchronization records); null when unknown or none",
        ),
        _c(
            "wait_correlation_id",
            _i64,
            "",
            "device-side event syncs: correlation id of the event-record call whose event was "
            "waited on (Kineto `wait_on_cuda_event_record_corr_id`); null when unknown or none",
        ),
    ),
)

MEMCPY = TableSpec(
    name="memcpy",
    path="profiler/memcpy.parquet",
    doc="One row per device memory copy or memset executed on a GPU engine.",
    columns=(
        _c("source", _str, "", _SRC_DOC, False),
        _c("name", _str, "", "name as the tool reported it", False),
        _c(
            "kind",
            _str,
            "",
            "`HtoD`, `DtoH`, `DtoD`, `HtoH`, `PtoP`, `memset` or `unknown`",
            False,
        ),
        _c("bytes", _i64, "B", "bytes copied or set; null when the tool does not say"),
        _c("start_ns", _i64, "ns", "start on the device", False),
        _c("end_ns", _i64, "ns", "end on the device", False),
        _c("dur_ns", _i64, "ns", "end_ns - start_ns", False),
        _c("device", _i32, "", "device index that executed it"),
        _c("stream", _i64, "", "stream id"),
        _c("src_device", _i32, "", "source agent/device when known"),
        _c("dst_device", _i32, "", "destination agent/device when known"),
        _c("correlation_id", _i64, "", _CORR_DOC),
        _c("external_id", _i64, "", _EXT_DOC),
        _c("iteration", _i32, "", "iteration containing it, null when unknown"),
    ),
)

KERNEL_COUNTERS = TableSpec(
    name="kernel_counters",
    path="profiler/kernel_counters.parquet",
    doc="Hardware counter values per kernel dispatch (rocprofv3 counter collection), long format.",
    columns=(
        _c("source", _str, "", _SRC_DOC, False),
        _c("correlation_id", _i64, "", _CORR_DOC),
        _c("dispatch_id", _i64, "", "dispatch id"),
        _c("device", _i32, "", "device index"),
        _c("kernel_name", _str, "", "kernel name", False),
        _c("counter", _str, "", "counter name, e.g. `SQ_WAVES`", False),
        _c("value", _f64, "", "counter value for this dispatch (summed over dimensions)", False),
    ),
)

ANNOTATIONS = TableSpec(
    name="annotations",
    path="profiler/annotations.parquet",
    doc=(
        "Ranges marked by the application or profiler: PyTorch `ProfilerStep#N` and "
        "`record_function` ranges, GPU-side user annotations, roctx/NVTX markers."
    ),
    columns=(
        _c("source", _str, "", _SRC_DOC, False),
        _c(
            "kind",
            _str,
            "",
            "`step` (one iteration), `user` (host range), `gpu_user` (device range), `marker`",
            False,
        ),
        _c("name", _str, "", "range name", False),
        _c("process_id", _i64, "", "OS process id"),
        _c("thread_id", _i64, "", "OS thread id (host ranges)"),
        _c("device", _i32, "", "device (device ranges)"),
        _c("stream", _i64, "", "stream (device ranges)"),
        _c("start_ns", _i64, "ns", "start on the trace's clock", False),
        _c("dur_ns", _i64, "ns", "duration", False),
        _c("step", _i32, "", "N of `ProfilerStep#N` (kind `step`), else null"),
    ),
)

OP_KERNEL_MAP = TableSpec(
    name="op_kernel_map",
    path="attribution/op_to_kernel_map.parquet",
    doc=(
        "One row per kernel of `profiler/kernels.parquet`: the operator that launched it, "
        "and how that was established. Unattributed kernels have null op columns."
    ),
    columns=(
        _c("kernel_row", _i64, "", "row index in profiler/kernels.parquet", False),
        _c("kernel_name", _str, "", "kernel name", False),
        _c("family", _str, "", "kernel family"),
        _c("dur_ns", _i64, "ns", "kernel duration", False),
        _c("op_row", _i64, "", "row index in profiler/ops.parquet; null when unattributed"),
        _c("op_name", _str, "", "node / framework op name; null when unattributed"),
        _c("op_type", _str, "", "operator type"),
        _c(
            "method",
            _str,
            "",
            "`parent_node` (ORT), `external_id` / `correlation` (Kineto), `correlation` + "
            "`time_window` (rocprofv3), `marker`, or null when unattributed",
        ),
        _c("launch_row", _i64, "", "row index in profiler/api_calls.parquet of the launch call"),
        _c(
            "launch_delay_ns",
            _i64,
            "ns",
            "kernel start - launch call end; null when the launch call is unknown",
        ),
    ),
)

KERNEL_GROUPS = TableSpec(
    name="kernel_groups",
    path="attribution/kernel_groups.parquet",
    doc="Per operator (name and type): its kernels, GPU time, CPU time and launch overhead.",
    columns=(
        _c("op_name", _str, "", "node / framework op name", False),
        _c("op_type", _str, "", "operator type"),
        _c("op_calls", _i64, "", "executions of the op in the trace", False),
        _c("kernel_count", _i64, "", "kernels attributed to it", False),
        _c("kernels_per_call", _f64, "", "kernel_count / op_calls"),
        _c("gpu_time_ns", _i64, "ns", "sum of attributed kernel durations", False),
        _c("cpu_time_ns", _i64, "ns", "sum of the op's host durations", False),
        _c(
            "launch_overhead_ns",
            _i64,
            "ns",
            "sum of the durations of the launch API calls of its kernels; null when no "
            "launch call is known",
        ),
        _c("top_kernel", _str, "", "short name of its longest kernel (by total time)"),
        _c("families", _strs, "", "kernel families seen, most time first"),
    ),
)

OP_COSTS = TableSpec(
    name="op_costs",
    path="metrics/op_costs.parquet",
    doc="Work and memory traffic of each node of the original graph, from its inferred "
    "shapes (docs/metrics.md, 'Work and traffic per operator').",
    columns=(
        _c("node_name", _str, "", "node name, as in graph_nodes (original graph)", False),
        _c("op_type", _str, "", "operator type", False),
        _c("domain", _str, "", "operator domain (`` for ai.onnx)"),
        _c(
            "dtype",
            _str,
            "",
            "element type the node computes in: the integer type of a quantized operator's "
            "operands (int8/uint8), else its first float input, else its first input",
        ),
        _c(
            "cost_model",
            _str,
            "",
            "formula family used: `conv`, `gemm`, `attention`, `rnn`, "
            "`elementwise`, `reduction`, `normalization`, `softmax`, `pooling`, `resize`, "
            "`einsum`, `sort`, `fft`, `linalg`, `tree_ensemble`, `svm`, `control_flow`, "
            "`data_movement`, `unknown`",
            False,
        ),
        _c(
            "flops",
            _i64,
            "FLOP",
            "floating-point (or integer, for quantized ops) operations "
            "per execution, multiply-add = 2; null when unknown",
        ),
        _c("macs", _i64, "", "multiply-accumulates (GEMM/conv family), else null"),
        _c(
            "input_bytes",
            _i64,
            "B",
            "bytes of activation inputs read (each once); null when a shape is unknown",
        ),
        _c("weight_bytes", _i64, "B", "bytes of initializer inputs read (each once)"),
        _c("output_bytes", _i64, "B", "bytes of outputs written"),
        _c("bytes", _i64, "B", "input + weight + output bytes; null when any is unknown"),
        _c("intensity", _f64, "FLOP/B", "flops / bytes; null when either is unknown or bytes is 0"),
        _c(
            "flops_known",
            _bool,
            "",
            "false for ops without a FLOP formula (bytes only); true for data movement "
            "and control flow (0 FLOPs)",
            False,
        ),
        _c("note", _str, "", "why a value is unknown, or what the formula assumed"),
    ),
)

ROOFLINE = TableSpec(
    name="roofline",
    path="metrics/roofline.parquet",
    doc="One row per operator (level `node`) or kernel (level `kernel`): measured time, work, "
    "traffic and where it sits against the ceilings (docs/metrics.md, 'Roofline').",
    columns=(
        _c("level", _str, "", "`node` or `kernel`", False),
        _c(
            "name", _str, "", "node name (executed node, fused ones included) or kernel name", False
        ),
        _c("op_type", _str, "", "operator type (node level) or kernel family"),
        _c("dtype", _str, "", "element type used to pick the compute ceiling"),
        _c("calls_per_iter", _f64, "", "executions per iteration"),
        _c(
            "time_ns",
            _f64,
            "ns",
            "median time per iteration (sum over its calls); on a GPU the attributed kernel "
            "time, null when unknown",
        ),
        _c("time_share", _f64, "", "time_ns / total operator time per iteration (0-1)"),
        _c("flops", _f64, "FLOP", "work per iteration; null when unknown"),
        _c("bytes", _f64, "B", "memory traffic per iteration; null when unknown"),
        _c("intensity", _f64, "FLOP/B", "flops / bytes"),
        _c("achieved_flops_per_s", _f64, "FLOP/s", "flops / time"),
        _c("achieved_bytes_per_s", _f64, "B/s", "bytes / time"),
        _c("peak_flops_per_s", _f64, "FLOP/s", "compute ceiling used (for dtype)"),
        _c("peak_bytes_per_s", _f64, "B/s", "memory-bandwidth ceiling used"),
        _c("ridge_intensity", _f64, "FLOP/B", "peak_flops_per_s / peak_bytes_per_s"),
        _c(
            "attainable_flops_per_s",
            _f64,
            "FLOP/s",
            "min(peak_flops_per_s, intensity x peak_bytes_per_s)",
        ),
        _c("bound", _str, "", "`memory` (intensity < ridge) or `compute`; null when unknown"),
        _c(
            "efficiency",
            _f64,
            "",
            "achieved / attainable FLOP/s (memory-bound rows: achieved "
            "/ peak bytes/s); 0-1, may exceed 1 when a ceiling is underestimated",
        ),
        _c("headroom", _f64, "", "attainable / achieved: the speed-up the roof allows (>= 1)"),
        _c("ceiling_source", _str, "", "`calibrated`, `published` or `counters`"),
        _c(
            "memory_level",
            _str,
            "",
            "memory level whose bandwidth is the row's roof (`L1`, `L2`, `L3`, `DRAM`): the "
            "nearest that holds its bytes per call; null when the ceilings have no levels",
        ),
        _c(
            "above_roof",
            _bool,
            "",
            "achieved FLOP/s or bytes/s more than 10 % above its roof: a ceiling problem, "
            "its efficiency is no evidence; null without a roof",
        ),
    ),
)

# -- LLM serving (aaco llm bench / aaco llm run): docs/metrics.md "Serving" --------------------
_POINT_DOC = "sweep point (0 for a run without --sweep), index into serving.points"
SERVING_REQUESTS = TableSpec(
    name="serving_requests",
    path="serving/requests.parquet",
    doc=(
        "One row per request of `aaco llm bench` (or generated sequence of `aaco llm run`). "
        "Times are the client's monotonic clock (`perf_counter_ns`); the derived `*_ns` "
        "columns follow docs/metrics.md and are null when unknown (a failed request, a "
        "stream without the token kind)."
    ),
    columns=(
        _c("point", _i32, "", _POINT_DOC, nullable=False),
        _c("request", _i32, "", "index within its point, in dispatch order", nullable=False),
        _c("phase", _str, "", "`warmup` (excluded from every figure) or `measured`", False),
        _c(
            "intended_ns",
            _i64,
            "ns",
            "when the schedule meant to send it (open loop: the absolute arrival schedule; "
            "closed loop: when its concurrency slot became free)",
        ),
        _c(
            "submit_ns",
            _i64,
            "ns",
            "when the client began the request (before taking a connection and writing it)",
        ),
        _c(
            "sent_ns",
            _i64,
            "ns",
            "when the request's body was written to the socket: latencies count from here",
            nullable=False,
        ),
        _c("first_token_ns", _i64, "ns", "first chunk carrying generated tokens of any kind"),
        _c("first_content_ns", _i64, "ns", "first chunk carrying answer content or a tool call"),
        _c("first_reasoning_ns", _i64, "ns", "first chunk carrying reasoning content"),
        _c("end_ns", _i64, "ns", "the end of the response (`[DONE]`, the body's end or the error)"),
        _c("status", _str, "", "`ok`, `error` (HTTP or protocol error) or `cancelled`", False),
        _c("http_status", _i32, "", "the HTTP status code; null when none came"),
        _c("error", _str, "", "the error, one line; null when ok"),
        _c("max_tokens", _i32, "tokens", "output tokens requested (`max_tokens`)"),
        _c("prompt_tokens", _i32, "tokens", "input tokens: the server's usage, else re-tokenized"),
        _c(
            "output_tokens", _i32, "tokens", "output tokens used by every figure (see token_source)"
        ),
        _c(
            "token_source",
            _str,
            "",
            "where output_tokens came from: `usage` (the server's), `chunks` (per-chunk usage or "
            "one token per chunk), `retokenized` (the tokenizer over the text); null unknown",
        ),
        _c(
            "usage_tokens",
            _i32,
            "tokens",
            "completion_tokens of the server's usage; null when absent",
        ),
        _c("chunk_tokens", _i32, "tokens", "sum of tokens per chunk where each is known"),
        _c("retokenized_tokens", _i32, "tokens", "the tokenizer's count of the output text"),
        _c("chunks", _i32, "", "chunks that carried generated tokens"),
        _c("output_chars", _i32, "", "characters of generated text (content + reasoning)"),
        _c("ttft_ns", _i64, "ns", "first_content_ns - sent_ns"),
        _c("ttfr_ns", _i64, "ns", "first_reasoning_ns - sent_ns"),
        _c("e2e_ns", _i64, "ns", "end_ns - sent_ns (ok requests)"),
        _c(
            "tpot_ns",
            _f64,
            "ns",
            "(end_ns - first_token_ns) / (output_tokens - tokens of the first chunk); null when "
            "the denominator is not positive",
        ),
        _c(
            "dispatch_delay_ns",
            _i64,
            "ns",
            "sent_ns - intended_ns: how late the request went out (the client's own send "
            "cost included)",
        ),
        _c("ttft_intended_ns", _i64, "ns", "first_content_ns - intended_ns"),
        _c("e2e_intended_ns", _i64, "ns", "end_ns - intended_ns"),
    ),
)

SERVING_CHUNKS = TableSpec(
    name="serving_chunks",
    path="serving/chunks.parquet",
    doc=(
        "One row per streamed chunk (SSE event) of each request, in arrival order; role-only "
        "and usage-only chunks are kept with their kind so nothing is silently dropped."
    ),
    columns=(
        _c("point", _i32, "", _POINT_DOC, nullable=False),
        _c("request", _i32, "", "the request's index (serving_requests.request)", False),
        _c("chunk", _i32, "", "index within the request, from 0", nullable=False),
        _c("t_ns", _i64, "ns", "when the client read the chunk (monotonic)", nullable=False),
        _c(
            "kind",
            _str,
            "",
            "`content`, `reasoning`, `tool` (tool-call delta), `role` (role only), `usage` "
            "(usage only), `empty` (no text)",
            nullable=False,
        ),
        _c(
            "tokens",
            _i32,
            "tokens",
            "tokens the chunk carries: from per-chunk (continuous) usage, else the tokenizer, "
            "else 1 when the usage total equals the token-carrying chunks; null unknown",
        ),
        _c("chars", _i32, "", "characters of generated text in the chunk"),
    ),
)

SERVER_METRICS = TableSpec(
    name="server_metrics",
    path="serving/server_metrics.parquet",
    doc=(
        "Samples of the server's Prometheus `/metrics` (vLLM, SGLang, TGI) scraped during the "
        "run on the client's clock; only the series AACO knows (running/waiting requests, "
        "KV-cache usage, prefix-cache queries/hits, token counters)."
    ),
    columns=(
        _c("t_ns", _i64, "ns", "monotonic time the scrape's response arrived", nullable=False),
        _c("name", _str, "", "the metric's name as the server exposes it", nullable=False),
        _c("labels", _str, "", "its labels as `k=v` pairs joined by `,`, sorted"),
        _c("value", _f64, "", "the sample's value (unit as the server defines it)"),
        _c("metric", _str, "", "AACO's vendor-neutral name (`running`, `waiting`, ...)"),
    ),
)

_GPU_DOC_NULL = "; null when the source does not report it"

GPU_TELEMETRY = TableSpec(
    name="gpu_telemetry",
    path="telemetry/gpu.parquet",
    doc=(
        "One row per sample per GPU, from NVML (`nvml`), the amdsmi library (`amdsmi`) or the "
        "`amd-smi` / `rocm-smi` command (`amd-smi`, `rocm-smi`), on the same monotonic clock "
        "as the iterations. Cumulative counters (energy, violation time, XGMI bytes) are kept "
        "raw so that the measured window's totals are differenced between its ends."
    ),
    columns=(
        _c("ts_ns", _i64, "ns", "monotonic time of the sample", False),
        _c("device", _i32, "", "device index as the source numbers it", False),
        _c("source", _str, "", "`nvml`, `amdsmi`, `amd-smi` or `rocm-smi`", False),
        _c("name", _str, "", "device name (product)"),
        _c(
            "has_watched_process",
            pa.bool_(),
            "",
            "the watched process (or a child) holds a context on this device; null when the "
            "source cannot list processes",
        ),
        _c(
            "util_gpu_pct",
            _f64,
            "%",
            "GPU busy (NVML utilization.gpu, AMD gfx_activity)" + _GPU_DOC_NULL,
        ),
        _c(
            "util_mem_pct",
            _f64,
            "%",
            "memory controller busy (NVML utilization.memory, AMD umc_activity)" + _GPU_DOC_NULL,
        ),
        _c("sm_clock_mhz", _f64, "MHz", "SM / graphics (gfx, sclk) clock" + _GPU_DOC_NULL),
        _c("sm_clock_max_mhz", _f64, "MHz", "the SM / graphics clock's maximum" + _GPU_DOC_NULL),
        _c("mem_clock_mhz", _f64, "MHz", "memory clock (mclk)" + _GPU_DOC_NULL),
        _c("mem_clock_max_mhz", _f64, "MHz", "the memory clock's maximum" + _GPU_DOC_NULL),
        _c(
            "power_w",
            _f64,
            "W",
            "instantaneous power (NVML instant field, or nvmlDeviceGetPowerUsage on GPUs "
            "where it is instantaneous: before Ampere, and GA100; AMD socket power)"
            + _GPU_DOC_NULL,
        ),
        _c(
            "power_avg_w",
            _f64,
            "W",
            "power averaged by the driver (NVML average field, or nvmlDeviceGetPowerUsage on "
            "Ampere (except GA100) and later: a 1 s average; AMD average socket power)"
            + _GPU_DOC_NULL,
        ),
        _c("power_limit_w", _f64, "W", "enforced power cap" + _GPU_DOC_NULL),
        _c(
            "energy_j",
            _f64,
            "J",
            "the device's cumulative energy counter converted to joules (NVML total energy, "
            "AMD energy accumulator x resolution); raw, may wrap" + _GPU_DOC_NULL,
        ),
        _c(
            "energy_wrap_j",
            _f64,
            "J",
            "the energy the counter holds before it wraps to 0; null when it does not wrap "
            "within a run or the width is unknown",
        ),
        _c("temp_c", _f64, "degC", "edge / GPU core temperature" + _GPU_DOC_NULL),
        _c("temp_hotspot_c", _f64, "degC", "hotspot (junction) temperature" + _GPU_DOC_NULL),
        _c("temp_mem_c", _f64, "degC", "memory (HBM) temperature" + _GPU_DOC_NULL),
        _c("mem_used_bytes", _i64, "B", "device memory used" + _GPU_DOC_NULL),
        _c("mem_total_bytes", _i64, "B", "device memory total" + _GPU_DOC_NULL),
        _c("pcie_tx_bytes_per_s", _f64, "B/s", "PCIe transmit throughput" + _GPU_DOC_NULL),
        _c("pcie_rx_bytes_per_s", _f64, "B/s", "PCIe receive throughput" + _GPU_DOC_NULL),
        _c("xgmi_read_bytes", _i64, "B", "XGMI bytes read, cumulative (AMD)" + _GPU_DOC_NULL),
        _c("xgmi_write_bytes", _i64, "B", "XGMI bytes written, cumulative (AMD)" + _GPU_DOC_NULL),
        _c(
            "throttle_reasons",
            _i64,
            "",
            "the source's raw clock-event / throttle bitmask (NVML clocksEventReasons, AMD "
            "indep_throttle_status, else the ASIC-specific throttle_status)" + _GPU_DOC_NULL,
        ),
        _c(
            "throttle_names",
            pa.list_(_str),
            "",
            "the active reasons of the bitmask in AACO's vocabulary (`power_cap`, `sw_thermal`, "
            "`hw_thermal`, `hw_slowdown`, `hw_power_brake`, `sw_power`, `sync_boost`, `prochot`, "
            "`other`); idle and application-clock settings are not throttling and are left out",
        ),
        _c(
            "violation_power_ns",
            _i64,
            "ns",
            "cumulative time the clocks were held down by the power limit (NVML violation "
            "counter, AMD accumulated PPT violation)" + _GPU_DOC_NULL,
        ),
        _c(
            "violation_thermal_ns",
            _i64,
            "ns",
            "cumulative time the clocks were held down by a thermal limit" + _GPU_DOC_NULL,
        ),
        _c("gpm_sm_activity_pct", _f64, "%", "GPM SM activity (Hopper and later)" + _GPU_DOC_NULL),
        _c(
            "gpm_sm_occupancy_pct", _f64, "%", "GPM SM occupancy (Hopper and later)" + _GPU_DOC_NULL
        ),
        _c(
            "gpm_tensor_activity_pct",
            _f64,
            "%",
            "GPM tensor-core activity (any precision)" + _GPU_DOC_NULL,
        ),
        _c("gpm_dram_bw_util_pct", _f64, "%", "GPM DRAM bandwidth utilisation" + _GPU_DOC_NULL),
    ),
)

SCHED_THREADS = TableSpec(
    name="sched_threads",
    path="telemetry/sched_threads.parquet",
    doc=(
        "One row per sample per thread of the watched process, from "
        "`/proc/PID/task/TID/schedstat`, `stat` and `status` (no root needed). Counters are "
        "cumulative since the thread started; the measured window's figures are differences."
    ),
    columns=(
        _c("ts_ns", _i64, "ns", "monotonic time of the sample", False),
        _c("pid", _i64, "", "the watched process", False),
        _c("tid", _i64, "", "the thread", False),
        _c("comm", _str, "", "the thread's name"),
        _c("run_ns", _i64, "ns", "time spent running on a CPU, cumulative (schedstat field 1)"),
        _c(
            "wait_ns",
            _i64,
            "ns",
            "time spent runnable but waiting on a run queue, cumulative (schedstat field 2)",
        ),
        _c("timeslices", _i64, "", "timeslices run on a CPU, cumulative (schedstat field 3)"),
        _c("ctx_voluntary", _i64, "", "voluntary context switches, cumulative"),
        _c("ctx_involuntary", _i64, "", "involuntary context switches (preemptions), cumulative"),
        _c("last_cpu", _i32, "", "CPU the thread last ran on (stat field 39)"),
    ),
)

SCHED_SYSTEM = TableSpec(
    name="sched_system",
    path="telemetry/sched_system.parquet",
    doc=(
        "One row per sample of the machine's scheduler state around the watched process: "
        "pressure stall information (`/proc/pressure/*`, cumulative µs), run-queue length "
        "and the busy share of the CPUs the process may run on."
    ),
    columns=(
        _c("ts_ns", _i64, "ns", "monotonic time of the sample", False),
        _c("psi_cpu_some_us", _i64, "us", "PSI cpu `some` total, cumulative; null without PSI"),
        _c("psi_cpu_full_us", _i64, "us", "PSI cpu `full` total, cumulative; null without it"),
        _c("psi_memory_some_us", _i64, "us", "PSI memory `some` total, cumulative"),
        _c("psi_memory_full_us", _i64, "us", "PSI memory `full` total, cumulative"),
        _c("psi_io_some_us", _i64, "us", "PSI io `some` total, cumulative"),
        _c("psi_io_full_us", _i64, "us", "PSI io `full` total, cumulative"),
        _c("procs_running", _i32, "", "runnable tasks on the machine (/proc/stat procs_running)"),
        _c("procs_blocked", _i32, "", "tasks blocked on I/O (/proc/stat procs_blocked)"),
        _c("affinity", pa.list_(_i32), "", "CPUs the watched process may run on"),
        _c(
            "affinity_busy_pct",
            _f64,
            "%",
            "busy share of those CPUs since the previous sample (100 = all of them busy); "
            "null on the first row",
        ),
        _c(
            "other_cpu_pct",
            _f64,
            "%",
            "CPU time other tasks used on those CPUs since the previous sample, in % of one "
            "core (their busy time minus the watched process's CPU time); null on the first row",
        ),
        _c(
            "steal_pct",
            _f64,
            "%",
            "share of those CPUs' time the hypervisor ran something else while they had work "
            "(/proc/stat steal) since the previous sample; 0 on bare metal, null on the first row",
        ),
    ),
)

_ATT_SOURCE_DOC = (
    "the source line the compiler assigned, as the decoder wrote it (`file:line`; several when "
    "inlined, the innermost first); null when the code object has no line table (no `-g`)"
)

ATT_INSTRUCTIONS = TableSpec(
    name="att_instructions",
    path="profiler/att_instructions.parquet",
    doc=(
        "One row per instruction address of each kernel dispatch traced by rocprofv3's "
        "advanced thread trace (`rocprofv3 --att`), read from the decoder's `code.json` "
        "(folder `ui_output_agent_<agent>_dispatch_<dispatch>/`). Counts and cycles are "
        "totals over the traced waves only: one CU (WGP) per traced shader engine and the "
        "SIMDs `--att-simd-select` chose, in shader-clock cycles."
    ),
    columns=(
        _c("source", _str, "", "importer that produced the row: `rocprofv3-att`", False),
        _c(
            "agent_id",
            _i64,
            "",
            "the agent of the folder name `ui_output_agent_<agent>_dispatch_<dispatch>` "
            "(rocprofiler's agent id, not a GPU index); null when the folder is not so named",
        ),
        _c(
            "dispatch_id",
            _i64,
            "",
            "the dispatch of that folder name (rocprofiler dispatch id, as in "
            "`kernels.dispatch_id`); null when the folder is not so named",
        ),
        _c(
            "kernel_name",
            _str,
            "",
            "the kernel the instruction belongs to: demangled name of the closest kernel label "
            "(`; <symbol>` row) at or below its address in the same code object, else the "
            "symbol; null when code.json labels none",
        ),
        _c("kernel_symbol", _str, "", "that kernel's symbol (mangled) as the label gives it"),
        _c("code_object_id", _i64, "", "rocprofiler code object load id (`Codeobj`)"),
        _c("address", _i64, "", "the instruction's address in its code object (ELF vaddr)"),
        _c(
            "code_line",
            _i32,
            "",
            "the row's `LineNumber` in code.json: the index the wave files "
            "(`se*_sm*_sl*_wv*.json`) refer to",
        ),
        _c(
            "instruction",
            _str,
            "",
            "ISA text as disassembled, e.g. `buffer_load_dwordx4 v[2:5], v1, s[0:3], 0 offen`",
            False,
        ),
        _c("mnemonic", _str, "", "opcode: the text's first word, lower case"),
        _c(
            "instruction_class",
            _str,
            "",
            "`matrix`, `valu`, `salu`, `smem`, `vmem_load`, `vmem_store`, `vmem_atomic`, `lds`, "
            "`branch`, `sync`, `export` or `other`, from the mnemonic (docs/metrics.md, ATT "
            "instruction analysis)",
        ),
        _c("source_location", _str, "", _ATT_SOURCE_DOC),
        _c("source_file", _str, "", "the file of the first `file:line` of source_location"),
        _c("source_line", _i32, "", "the line of the first `file:line` of source_location"),
        _c("hits", _i64, "", "executions summed over the traced waves (`Hit`); 0: not executed"),
        _c(
            "latency_cycles",
            _i64,
            "cycles",
            "total latency, summed over executions: stall + issue cycles (gfx9) or stall + "
            "execute cycles (gfx10 and later)",
        ),
        _c(
            "stall_cycles",
            _i64,
            "cycles",
            "cycles the instruction could not issue (unit busy, back pressure), summed; part "
            "of latency_cycles",
        ),
        _c(
            "idle_cycles",
            _i64,
            "cycles",
            "gaps between the previous instruction's completion and this one's start "
            "(dependency, arbitration loss, instruction cache miss), summed; not part of "
            "latency_cycles; null when the file has no `Idle` column",
        ),
    ),
)

ALL_TABLES: tuple[TableSpec, ...] = (
    INFERENCE_ITERS,
    OPS,
    ORT_RUNS,
    GRAPH_NODES,
    GRAPH_EDGES,
    SYSTEM_EVENTS,
    KERNELS,
    API_CALLS,
    MEMCPY,
    KERNEL_COUNTERS,
    ANNOTATIONS,
    OP_KERNEL_MAP,
    KERNEL_GROUPS,
    OP_COSTS,
    ROOFLINE,
    SERVING_REQUESTS,
    SERVING_CHUNKS,
    SERVER_METRICS,
    GPU_TELEMETRY,
    SCHED_THREADS,
    SCHED_SYSTEM,
    ATT_INSTRUCTIONS,
    # -- ATT tables (issue 19): add here --
    # -- profile tables (issue 19): add here --
)
TABLES: dict[str, TableSpec] = {t.name: t for t in ALL_TABLES}


def render_markdown() -> str:
    """docs/schema.md, generated from the declarations above."""
    lines = [
        "# Session bundle tables",
        "",
        "Generated from `src/aaco/session/schema.py` by `python scripts/gen_schema_docs.py`; "
        "do not edit by hand.",
        "",
    ]
    doc = __doc__ or ""
    lines += [doc.split("\n\n", 2)[2].strip() if doc.count("\n\n") >= 2 else "", ""]
    for spec in ALL_TABLES:
        lines += [f"## `{spec.path}` ({spec.name})", "", spec.doc, ""]
        lines += ["| column | type | unit | nullable | meaning |", "|---|---|---|---|---|"]
        for c in spec.columns:
            unit = c.unit or "-"
            lines.append(
                f"| `{c.name}` | {c.type} | {unit} | {'yes' if c.nullable else 'no'} | {c.doc} |"
            )
        lines.append("")
    return "\n".join(lines)
