"""rocprofv3 advanced thread trace (``code.json``) importer, and ``aaco import`` of an ATT
output folder end to end. Fixtures: tests/importers/fixtures/att/README.md."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.cli.test_cli import aaco

from aaco.errors import InputError
from aaco.importers.base import TABLE_FIELDS, read_head
from aaco.importers.registry import detect, import_paths
from aaco.importers.rocprofv3_att import Rocprofv3AttImporter, mnemonic_of, read_att_code
from aaco.ingest import ingest_traces
from aaco.pipeline import import_into, import_new
from aaco.session.bundle import Session
from aaco.session.schema import ATT_INSTRUCTIONS

FIXTURES = Path(__file__).parent / "fixtures"
REAL_DIR = FIXTURES / "att" / "real" / "ui_output_agent_14537_dispatch_1"
REAL = REAL_DIR / "code.json"
RUN = FIXTURES / "att" / "constructed" / "run"
UI = RUN / "ui_output_agent_2_dispatch_7"
ROCPROF_RUN = FIXTURES / "rocprof" / "v3" / "run"
HEADER = "ISA, _, LineNumber, Source, Codeobj, Vaddr, Hit, Latency, Stall, Idle"


def _write(path: Path, doc: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, separators=(",", ":")))
    return path


def _code(
    rows: Sequence[object], header: str | None = HEADER, **extra: object
) -> dict[str, object]:
    doc: dict[str, object] = {"code": rows, **extra}
    if header is not None:
        doc["header"] = header
    doc["version"] = "3.0.0"
    return doc


# --------------------------------------------------------------------------- real capture


def test_real_mi210_capture_is_read_row_for_row() -> None:
    assert Rocprofv3AttImporter.sniff(REAL, read_head(REAL))
    t = read_att_code(REAL)
    rows = t.att_instructions.to_pylist()
    # 26 rows: the kernel label and 25 instructions
    assert len(rows) == 25
    first = rows[0]
    assert first == {
        "source": "rocprofv3-att",
        "agent_id": 14537,
        "dispatch_id": 1,
        "kernel_name": "axpy(float*, float const*, float, int)",
        "kernel_symbol": "_Z4axpyPfPKffi",
        "code_object_id": 2,
        "address": 6400,
        "code_line": 1,
        "instruction": "s_load_dword s2, s[4:5], 0x24",
        "mnemonic": "s_load_dword",
        "instruction_class": None,  # classified by the import's analysis
        "source_location": (
            "/opt/rocm-7.2.0/lib/llvm/bin/../../../include/hip/amd_detail/amd_hip_runtime.h:264"
        ),
        "source_file": "/opt/rocm-7.2.0/lib/llvm/bin/../../../include/hip/amd_detail/"
        "amd_hip_runtime.h",
        "source_line": 264,
        "hits": 672,
        "latency_cycles": 49156,
        "stall_cycles": 46468,
        "idle_cycles": 30636,
    }
    wait = rows[21]
    assert (wait["instruction"], wait["code_line"], wait["address"]) == (
        "s_waitcnt vmcnt(0)",
        22,
        6512,
    )
    assert (wait["latency_cycles"], wait["stall_cycles"], wait["idle_cycles"]) == (
        1258456,
        1258456,
        0,
    )
    assert (wait["source_file"], wait["source_line"]) == ("/src/tiny_kernel.cpp", 8)
    assert {r["kernel_name"] for r in rows} == {"axpy(float*, float const*, float, int)"}
    assert sum(r["hits"] for r in rows) == 16800
    assert t.meta["version"] == "3.0.0"
    assert t.meta["kernel_labels"] == 1
    assert (t.meta["odd_values"], t.meta["dropped_rows"]) == ({}, {})
    ATT_INSTRUCTIONS.conform(t.att_instructions)


def test_mnemonic_is_the_first_word_lower_case() -> None:
    assert mnemonic_of("  V_MFMA_F32_32x32x8F16 a[0:15], v[0:1]") == "v_mfma_f32_32x32x8f16"
    assert mnemonic_of("s_endpgm") == "s_endpgm"
    assert mnemonic_of("   ") is None


# --------------------------------------------------------------------------- sniffing


def test_sniffed_by_content_not_name(tmp_path: Path) -> None:
    renamed = tmp_path / "instructions.txt"
    shutil.copyfile(REAL, renamed)
    assert detect(renamed) is Rocprofv3AttImporter
    # the header alone (rows of another order or none at all) is enough
    empty = _write(tmp_path / "a" / "code.json", {"code": None, "header": HEADER})
    assert Rocprofv3AttImporter.sniff(empty, read_head(empty))


@pytest.mark.parametrize(
    "doc",
    [
        {"code": "print('hello')"},
        {"code": [1, 2, 3]},
        {"code": [["a", "b"]], "language": "python"},
        {"name": "code", "header": "ISA"},
        [["s_nop 0", 0, 1, "", 1, 0, 1, 1, 0, 0]],
    ],
)
def test_other_json_named_code_json_is_not_sniffed(tmp_path: Path, doc: object) -> None:
    path = _write(tmp_path / "code.json", doc)
    assert not Rocprofv3AttImporter.sniff(path, read_head(path))
    assert detect(path) is None


def test_the_other_att_files_are_nobodys(tmp_path: Path) -> None:
    # wave, occupancy, wave-state and file-index JSON, and the stats CSV: skipped, not misread
    for f in [*UI.iterdir(), *RUN.glob("*.csv")]:
        if f.name != "code.json":
            assert detect(f) is None, f.name


# --------------------------------------------------------------------------- columns


def test_columns_are_taken_by_header_name(tmp_path: Path) -> None:
    header = "ISA, _, LineNumber, Source, Codeobj, Vaddr, Latency, Hit, Idle, Stall, Extra"
    rows = [
        ["; _Z1kv", 0, 0, "k()", 3, 256, 0, 0, 0, 0, 0],
        ["v_add_f32 v0, v1, v2", 0, 1, "k.cpp:3", 3, 256, 900, 9, 40, 300, 7],
    ]
    t = read_att_code(_write(tmp_path / "code.json", _code(rows, header)))
    r = t.att_instructions.to_pylist()[0]
    assert (r["hits"], r["latency_cycles"], r["stall_cycles"], r["idle_cycles"]) == (
        9,
        900,
        300,
        40,
    )
    assert r["kernel_name"] == "k()"


def test_a_column_the_header_lacks_is_null_not_odd(tmp_path: Path) -> None:
    header = "ISA, _, LineNumber, Source, Codeobj, Vaddr, Hit, Latency, Stall"
    rows = [["s_nop 0", 0, 1, "", 1, 0, 2, 8, 0]]
    t = read_att_code(_write(tmp_path / "code.json", _code(rows, header)))
    r = t.att_instructions.to_pylist()[0]
    assert (r["hits"], r["latency_cycles"], r["idle_cycles"]) == (2, 8, None)
    assert r["source_location"] is None  # "" = no line table
    assert t.meta["missing_columns"] == ["Idle"]
    assert t.meta["odd_values"] == {}


def test_a_header_without_isa_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "code.json", _code([["x", 1]], "Text, Hit"))
    with pytest.raises(InputError, match="no ISA column") as exc:
        read_att_code(path)
    assert "\n" not in str(exc.value) and path.name in str(exc.value)


def test_no_header_reads_the_documented_order(tmp_path: Path) -> None:
    rows = [["ds_read_b128 v[0:3], v4", 0, 1, "k.cpp:9", 1, 64, 3, 30, 6, 1]]
    t = read_att_code(_write(tmp_path / "code.json", _code(rows, header=None)))
    r = t.att_instructions.to_pylist()[0]
    assert (r["hits"], r["latency_cycles"], r["stall_cycles"], r["idle_cycles"]) == (3, 30, 6, 1)


def test_kernels_are_placed_by_their_labels(tmp_path: Path) -> None:
    rows = [
        ["; _Z1av", 0, 0, "a()", 1, 0, 0, 0, 0, 0],
        ["s_nop 0", 0, 1, "", 1, 0, 1, 1, 0, 0],
        ["s_endpgm", 0, 2, "", 1, 4, 1, 1, 0, 0],
        ["; _Z1bv", 0, 3, "", 1, 256, 0, 0, 0, 0],  # no demangled name: the symbol
        ["s_endpgm", 0, 4, "", 1, 256, 1, 1, 0, 0],
        ["s_endpgm", 0, 5, "", 2, 8, 1, 1, 0, 0],  # another code object, no label
    ]
    t = read_att_code(_write(tmp_path / "code.json", _code(rows)))
    got = [(r["kernel_name"], r["kernel_symbol"]) for r in t.att_instructions.to_pylist()]
    assert got == [("a()", "_Z1av"), ("a()", "_Z1av"), ("_Z1bv", "_Z1bv"), (None, None)]
    assert t.meta["kernels"] == ["_Z1bv", "a()"]
    # outside a ui_output_agent_* folder the ids are unknown
    assert t.att_instructions.column("agent_id").null_count == 4


# --------------------------------------------------------------------------- leniency


def test_odd_rows_are_nulled_or_dropped_and_counted(tmp_path: Path) -> None:
    rows = [
        ["v_add_f32 v0, v1, v2", 0, 1, "k.cpp:3", 1, 0, 4, 40, 8, 0],
        "not a row",
        [17, 0, 2, "", 1, 4, 1, 1, 1, 1],  # instruction text is a number
        ["v_mul_f32 v0, v1, v2", 0, 3, "k.cpp:4", 1, 8, "x", -5, "7", 2.0],
        ["s_endpgm", 0, 4, ["k.cpp:5"], 1, 12],  # short row, source a list
    ]
    t = read_att_code(_write(tmp_path / "code.json", _code(rows)))
    got = [
        (r["instruction"], r["hits"], r["latency_cycles"], r["stall_cycles"], r["idle_cycles"])
        for r in t.att_instructions.to_pylist()
    ]
    assert got == [
        ("v_add_f32 v0, v1, v2", 4, 40, 8, 0),
        ("v_mul_f32 v0, v1, v2", None, None, 7, 2),  # "7" and 2.0 read generously
        ("s_endpgm", None, None, None, None),
    ]
    assert t.meta["dropped_rows"] == {
        "code: instruction text missing or not text": 1,
        "code: row not an array": 1,
    }
    assert t.meta["odd_values"] == {
        "code.hit": 2,
        "code.idle": 1,
        "code.latency": 2,
        "code.source": 1,
        "code.stall": 1,
    }


@pytest.mark.parametrize("odd", [None, "x", [], {}, 1.5, -1, True, 2**70, ""])
def test_any_cell_of_any_type_costs_that_cell_only(tmp_path: Path, odd: object) -> None:
    rows = json.loads(REAL.read_text())["code"]
    for col in range(10):
        spoiled = [list(r) for r in rows]
        spoiled[5][col] = odd
        path = _write(tmp_path / f"c{col}" / "code.json", _code(spoiled))
        t = read_att_code(path)
        ATT_INSTRUCTIONS.conform(t.att_instructions)
        json.dumps(t.meta, allow_nan=False)
        # the instruction text is the only cell whose loss costs the row
        lost = col == 0 and not isinstance(odd, str)
        assert t.att_instructions.num_rows == 25 - lost, (col, odd)
        assert sum(t.meta["dropped_rows"].values()) == lost


def test_nan_is_read_as_null_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "code.json"
    path.write_text(
        '{"code":[["s_nop 0",0,1,"",1,0,NaN,4,0,0]],"header":"' + HEADER + '","version":"3.0.0"}'
    )
    r = read_att_code(path).att_instructions.to_pylist()[0]
    assert (r["hits"], r["latency_cycles"]) == (None, 4)


def test_no_wave_on_the_traced_cu_gives_no_rows(tmp_path: Path) -> None:
    # what the att tool writes when the traced CU ran no wave of the dispatch
    ui = tmp_path / "ui_output_agent_9_dispatch_3"
    path = _write(ui / "code.json", {"code": None, "header": HEADER, "version": "3.0.0"})
    t = read_att_code(path)
    assert t.att_instructions.num_rows == 0
    assert (t.meta["agent_id"], t.meta["dispatch_id"], t.meta["instructions"]) == (9, 3, 0)
    merged = import_paths([ui])
    assert merged.att_instructions.num_rows == 0 and merged.meta["skipped"] == []


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.97])
def test_truncated_is_one_line_error(tmp_path: Path, cut: float) -> None:
    data = REAL.read_bytes()
    path = tmp_path / "code.json"
    path.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(InputError, match="truncated or malformed JSON") as exc:
        read_att_code(path)
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)


def test_empty_garbled_and_foreign_content_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "code.json"
    for data, msg in (
        (b"", "empty file"),
        (b'{"code": [["s_nop 0", 0, 1,, ]]}', "truncated or malformed JSON"),
        (b"[1, 2, 3]", "not a JSON object"),
        (b'{"name": "x"}', 'no "code" rows'),
        (b'{"code": 5, "header": "' + HEADER.encode() + b'"}', "not a list of rows"),
    ):
        path.write_bytes(data)
        with pytest.raises(InputError, match=msg):
            read_att_code(path)


def test_gzip_file(tmp_path: Path) -> None:
    path = tmp_path / "ui_output_agent_14537_dispatch_1" / "code.json.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(REAL.read_bytes(), mtime=0))
    assert detect(path) is Rocprofv3AttImporter
    t = read_att_code(path)
    assert t.att_instructions.num_rows == 25 and t.meta["dispatch_id"] == 1


# --------------------------------------------------------------------------- folders, bundles


def test_an_att_output_folder_imports_its_code_json_and_skips_the_rest() -> None:
    t = import_paths([RUN])
    assert t.att_instructions.num_rows == 17
    (meta,) = t.meta["sources"]
    assert (meta["importer"], meta["agent_id"], meta["dispatch_id"]) == ("rocprofv3-att", 2, 7)
    assert (meta["gfxip"], meta["traced_waves"]) == (9, 4)
    skipped = sorted(Path(p).name for p in t.meta["skipped"])
    assert skipped == sorted(
        [f.name for f in UI.iterdir() if f.name != "code.json"]
        + ["stats_ui_output_agent_2_dispatch_7.csv"]
    )
    assert t.event_count == 17


def test_ingest_classifies_and_writes_the_table(tmp_path: Path) -> None:
    record = ingest_traces(tmp_path, [UI])
    assert record["rows"]["att_instructions"] == 17
    table = pq.read_table(tmp_path / ATT_INSTRUCTIONS.path)
    assert table.schema.equals(ATT_INSTRUCTIONS.schema, check_metadata=False)
    classes = table.column("instruction_class").to_pylist()
    assert classes[:4] == ["smem", "sync", "valu", "vmem_load"]
    assert classes.count("matrix") == 1 and None not in classes


def test_an_import_without_att_writes_no_att_table(tmp_path: Path) -> None:
    record = ingest_traces(tmp_path, [ROCPROF_RUN])
    assert "att_instructions" not in record["rows"]
    assert not (tmp_path / ATT_INSTRUCTIONS.path).exists()
    assert set(record["rows"]) == set(TABLE_FIELDS) - {"att_instructions"}


def test_replacing_an_att_import_removes_its_table(tmp_path: Path) -> None:
    session = import_new([REAL_DIR], tmp_path / "s", argv=["aaco", "import"])
    assert session.table("att_instructions") is not None
    replaced = import_into(session.path, [ROCPROF_RUN], replace=True)
    assert replaced.table("att_instructions") is None


@pytest.mark.parametrize("module", [False, True], ids=["aaco", "python-m-aaco"])
def test_cli_import_of_an_att_folder(tmp_path: Path, module: bool) -> None:
    root = tmp_path / "sessions"
    proc = aaco("import", str(RUN), "--output", str(root), "--format", "none", module=module)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith("imported into ")
    assert "Traceback" not in proc.stderr
    session = Session.load(root / "latest")
    assert session.status == "completed" and session.meta["kind"] == "import"
    assert session.meta["backend"]["name"] == "rocprofv3-att"
    table = session.table("att_instructions")
    assert table is not None and table.num_rows == 17
    assert sum(table.column("hits").to_pylist()) == 104
    record = json.loads((session.path / "profiler" / "import.json").read_text())
    assert record["rows"]["att_instructions"] == 17
    assert record["importers"] == ["rocprofv3-att"]
