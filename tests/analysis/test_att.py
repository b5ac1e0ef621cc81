"""ATT instruction analysis (aaco.analysis.att) and its report lines (aaco.report.att): the
classification table, and figures known by construction (docs/metrics.md, "ATT instruction
analysis")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from aaco.analysis.att import (
    CLASSES,
    classify_instructions,
    classify_mnemonic,
    summarize_att,
    summary_to_dict,
)
from aaco.importers.registry import import_paths
from aaco.report.att import format_att
from aaco.session.schema import ATT_INSTRUCTIONS

ATT = Path(__file__).resolve().parents[1] / "importers" / "fixtures" / "att"
UI = ATT / "constructed" / "run" / "ui_output_agent_2_dispatch_7"
REAL = ATT / "real" / "ui_output_agent_14537_dispatch_1"


@pytest.mark.parametrize(
    ("mnemonic", "klass"),
    [
        # matrix cores, CDNA and RDNA: never VALU
        ("v_mfma_f32_32x32x8f16", "matrix"),
        ("v_mfma_f32_16x16x32_bf16", "matrix"),
        ("v_mfma_scale_f32_32x32x64_f8f6f4", "matrix"),
        ("v_smfmac_f32_16x16x32_f16", "matrix"),
        ("v_wmma_f32_16x16x16_f16", "matrix"),
        ("v_swmmac_f32_16x16x32_f16", "matrix"),
        # vector ALU
        ("v_add_f32_e32", "valu"),
        ("v_fmac_f32_e32", "valu"),
        ("v_accvgpr_read_b32", "valu"),
        ("v_dot2_f32_f16", "valu"),
        ("v_readfirstlane_b32", "valu"),
        # scalar ALU
        ("s_add_u32", "salu"),
        ("s_mov_b64", "salu"),
        ("s_cmp_lg_u32", "salu"),
        ("s_and_saveexec_b64", "salu"),
        ("s_getpc_b64", "salu"),
        # scalar memory
        ("s_load_dwordx4", "smem"),
        ("s_load_b64", "smem"),
        ("s_buffer_load_dword", "smem"),
        ("s_store_dword", "smem"),
        ("s_dcache_wb", "smem"),
        ("s_memtime", "smem"),
        # vector memory: buffer_* counts (rocm-perf-lab missed it)
        ("buffer_load_dwordx4", "vmem_load"),
        ("buffer_load_dword", "vmem_load"),
        ("global_load_dwordx4", "vmem_load"),
        ("global_load_lds_dwordx4", "vmem_load"),
        ("flat_load_dword", "vmem_load"),
        ("scratch_load_dword", "vmem_load"),
        ("tbuffer_load_format_x", "vmem_load"),
        ("image_sample", "vmem_load"),
        ("buffer_store_dwordx4", "vmem_store"),
        ("global_store_dword", "vmem_store"),
        ("flat_store_b32", "vmem_store"),
        ("scratch_store_dword", "vmem_store"),
        ("global_atomic_add_f32", "vmem_atomic"),
        ("buffer_atomic_cmpswap", "vmem_atomic"),
        # LDS
        ("ds_read_b128", "lds"),
        ("ds_write_b128", "lds"),
        ("ds_bpermute_b32", "lds"),
        ("ds_load_b128", "lds"),
        # control flow
        ("s_branch", "branch"),
        ("s_cbranch_scc1", "branch"),
        ("s_cbranch_execz", "branch"),
        ("s_endpgm", "branch"),
        ("s_setpc_b64", "branch"),
        ("s_swappc_b64", "branch"),
        ("s_call_b64", "branch"),
        # waits, barriers, fences
        ("s_waitcnt", "sync"),
        ("s_waitcnt_vscnt", "sync"),
        ("s_wait_loadcnt", "sync"),
        ("s_barrier", "sync"),
        ("s_barrier_signal", "sync"),
        ("s_sleep", "sync"),
        ("s_nop", "sync"),
        ("s_delay_alu", "sync"),
        ("buffer_wbinvl1_vol", "sync"),
        ("buffer_inv", "sync"),
        ("buffer_wbl2", "sync"),
        ("global_wb", "sync"),
        # export, other
        ("exp", "export"),
        ("export", "export"),
        ("s_sendmsg", "other"),
        ("s_setprio", "other"),
        ("s_ttracedata", "other"),
        ("label_0012:", "other"),
        ("", "other"),
        (None, "other"),
    ],
)
def test_classification_table(mnemonic: str | None, klass: str) -> None:
    assert classify_mnemonic(mnemonic) == klass
    assert klass in CLASSES


def test_classification_ignores_case_and_space() -> None:
    assert classify_mnemonic("  V_MFMA_F32_32X32X8F16 ") == "matrix"


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    base = {"source": "rocprofv3-att", "agent_id": 1, "dispatch_id": 5}
    return ATT_INSTRUCTIONS.from_rows([{**base, **r} for r in rows])


def _row(text: str, hits: int | None, lat: int | None, stall: int | None, idle: int | None,
         **kw: Any) -> dict[str, Any]:  # fmt: skip
    return {"instruction": text, "hits": hits, "latency_cycles": lat, "stall_cycles": stall,
            "idle_cycles": idle, **kw}  # fmt: skip


#: 4 instructions whose figures are worked out by hand in the tests below
KNOWN = [
    _row("v_mfma_f32_32x32x8f16 a[0:15], v[0:1], v[2:3], a[0:15]", 10, 400, 100, 0,
         address=16, source_location="gemm.hip:26", kernel_name="gemm"),
    _row("buffer_load_dwordx4 v[2:5], v1, s[0:3], 0 offen", 20, 200, 50, 100, address=8,
         kernel_name="gemm"),
    _row("s_waitcnt vmcnt(0)", 10, 300, 300, 0, address=12, kernel_name="gemm"),
    _row("ds_read_b128 v[0:3], v4", 0, 0, 0, 0, address=20, kernel_name="gemm"),
]  # fmt: skip


def test_classify_instructions_fills_nulls_and_keeps_values() -> None:
    t = _table(
        [
            _row("v_mfma_f32_32x32x8f16 a[0:15]", 1, 1, 0, 0),
            _row("ds_read_b128 v[0:3], v4", 1, 1, 0, 0, mnemonic="ds_read_b128"),
            _row("s_nop 0", 1, 1, 0, 0, instruction_class="other"),  # kept as given
        ]
    )
    out = classify_instructions(t)
    assert out.schema.equals(ATT_INSTRUCTIONS.schema)
    assert out.column("mnemonic").to_pylist() == ["v_mfma_f32_32x32x8f16", "ds_read_b128", "s_nop"]
    assert out.column("instruction_class").to_pylist() == ["matrix", "lds", "other"]
    assert classify_instructions(ATT_INSTRUCTIONS.empty()).num_rows == 0


def test_figures_known_by_construction() -> None:
    s = summarize_att(_table(KNOWN))
    # sums: hits 10+20+10+0, latency 400+200+300, stall 100+50+300, idle 100
    assert (s.instructions, s.executed_instructions, s.hits) == (4, 3, 40)
    assert (s.latency_cycles, s.stall_cycles, s.idle_cycles) == (900, 450, 100)
    assert s.stall_fraction == pytest.approx(450 / 900)  # 0.5
    assert s.idle_fraction == pytest.approx(100 / (900 + 100))  # 0.1
    assert s.ipc == pytest.approx(40 / (900 + 100))  # 0.04 instructions per wave-cycle
    assert s.matrix_hit_share == pytest.approx(10 / 40)
    assert s.matrix_cycle_share == pytest.approx(400 / 900)
    assert s.rows_with_unknown_counts == 0
    by = {c.instruction_class: c for c in s.classes}
    assert [c.instruction_class for c in s.classes] == ["matrix", "vmem_load", "lds", "sync"]
    assert (by["vmem_load"].hits, by["vmem_load"].hit_share) == (20, 0.5)
    assert by["vmem_load"].latency_share == pytest.approx(200 / 900)
    assert by["vmem_load"].stall_fraction == pytest.approx(50 / 200)
    assert by["vmem_load"].idle_cycles == 100
    assert by["sync"].stall_fraction == 1.0
    assert (by["lds"].instructions, by["lds"].hits, by["lds"].stall_fraction) == (1, 0, None)
    # hotspots by latency; the never-executed ds_read is none
    assert [(h.rank, h.address) for h in s.hotspots] == [(1, 16), (2, 12), (3, 8)]
    top = s.hotspots[0]
    assert (top.instruction_class, top.source_location, top.kernel_name) == (
        "matrix",
        "gemm.hip:26",
        "gemm",
    )
    assert top.latency_share == pytest.approx(400 / 900)
    assert top.stall_fraction == pytest.approx(0.25)
    assert top.cycles_per_hit == pytest.approx(40.0)
    (d,) = s.dispatches
    assert (d.agent_id, d.dispatch_id, d.kernels, d.hits) == (1, 5, ("gemm",), 40)
    assert d.ipc == pytest.approx(0.04) and d.matrix_hit_share == pytest.approx(0.25)
    assert [h.rank for h in summarize_att(_table(KNOWN), top_n=1).hotspots] == [1]


def test_unknown_counts_are_left_out_of_the_figures_that_need_them() -> None:
    rows = [
        *KNOWN,
        # hits unknown: its latency counts, its instructions cannot
        _row("v_add_f32 v0, v1, v2", None, 100, 20, 0),
        # idle unknown: out of the idle fraction and IPC, in the stall fraction
        _row("v_add_f32 v3, v1, v2", 5, 100, 30, None),
    ]
    s = summarize_att(_table(rows))
    assert s.rows_with_unknown_counts == 2
    assert (s.hits, s.latency_cycles, s.stall_cycles, s.idle_cycles) == (45, 1100, 500, 100)
    assert s.stall_fraction == pytest.approx(500 / 1100)
    assert s.idle_fraction == pytest.approx(100 / (1000 + 100))  # rows with idle: latency 1000
    assert s.ipc == pytest.approx(40 / (900 + 100))  # rows with hits, latency and idle
    assert s.matrix_hit_share == pytest.approx(10 / 45)


def test_dispatches_are_summarised_apart() -> None:
    rows = [
        _row("v_mfma_f32_16x16x16f16 a[0:3]", 4, 40, 0, 10, dispatch_id=2, kernel_name="b"),
        _row("s_endpgm", 2, 10, 0, 0, dispatch_id=1, kernel_name="a"),
        _row("s_endpgm", 4, 10, 0, 0, dispatch_id=2, kernel_name="b"),
    ]
    s = summarize_att(_table(rows))
    assert [(d.dispatch_id, d.hits, d.kernels) for d in s.dispatches] == [
        (1, 2, ("a",)),
        (2, 8, ("b",)),
    ]
    assert s.dispatches[0].ipc == pytest.approx(2 / 10)
    assert s.dispatches[1].ipc == pytest.approx(8 / 60)
    assert s.dispatches[1].matrix_hit_share == pytest.approx(0.5)
    assert s.ipc == pytest.approx(10 / 70)


def test_an_empty_table_has_no_figures() -> None:
    s = summarize_att(ATT_INSTRUCTIONS.empty())
    assert (s.instructions, s.hits, s.latency_cycles) == (0, 0, 0)
    assert (s.stall_fraction, s.idle_fraction, s.ipc, s.matrix_hit_share) == (None,) * 4
    assert (s.classes, s.hotspots, s.dispatches) == ((), (), ())
    d = summary_to_dict(s)
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    lines = format_att(s)
    assert lines[-1].strip().startswith("no instructions")


def test_the_ipc_denominator_is_the_wave_time_of_the_wave_files() -> None:
    # The constructed trace's instructions do not overlap, so the latency + idle cycles
    # of code.json add up to the waves' lifetimes in the wave files: the IPC is the waves'
    # instructions over their cycles.
    s = summarize_att(import_paths([UI]).att_instructions)
    waves = [json.loads(p.read_text()) for p in sorted(UI.glob("se*_sm*_sl*_wv*.json"))]
    executed = sum(len(w["wave"]["instructions"]) for w in waves)
    cycles = sum(w["wave"]["end"] - w["wave"]["begin"] for w in waves)
    assert (executed, cycles) == (4 * 26, 4 * 812)
    assert s.hits == executed and s.latency_cycles + s.idle_cycles == cycles
    assert s.ipc == pytest.approx(executed / cycles)
    # make.py: MFMA 2 executions x 4 waves, 128 cycles each, a quarter of them stalled
    matrix = next(c for c in s.classes if c.instruction_class == "matrix")
    assert (matrix.hits, matrix.latency_cycles, matrix.stall_cycles) == (8, 1024, 256)
    assert s.matrix_hit_share == pytest.approx(8 / 104)
    assert s.matrix_cycle_share == pytest.approx(1024 / 3068)
    assert s.stall_fraction == pytest.approx(1548 / 3068)
    assert s.hotspots[0].instruction.startswith("v_mfma_f32_32x32x8f16")
    assert s.hotspots[0].source_location == "/src/mfma.h:40 /src/gemm.hip:26"


def test_real_capture_is_dominated_by_the_wait_on_its_loads() -> None:
    s = summarize_att(import_paths([REAL]).att_instructions)
    assert (s.hits, s.latency_cycles, s.stall_cycles, s.idle_cycles) == (
        16800,
        1812228,
        1447208,
        172784,
    )
    assert s.ipc == pytest.approx(16800 / (1812228 + 172784))
    top = s.hotspots[0]
    assert (top.instruction, top.instruction_class, top.source_location) == (
        "s_waitcnt vmcnt(0)",
        "sync",
        "/src/tiny_kernel.cpp:8",
    )
    assert top.latency_share == pytest.approx(1258456 / 1812228)
    assert s.matrix_hit_share == 0.0


def test_summary_is_json_ready_and_reads_the_same_from_its_dict() -> None:
    s = summarize_att(_table(KNOWN))
    d = summary_to_dict(s)
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert d["classes"][0]["instruction_class"] == "matrix"
    assert d["hotspots"][0]["rank"] == 1
    assert format_att(s) == format_att(json.loads(json.dumps(d)))


def test_report_lines() -> None:
    lines = format_att(summarize_att(_table(KNOWN)))
    text = "\n".join(lines)
    assert lines[0].startswith("ATT instruction analysis")
    assert "  agent 1, dispatch 5: gemm" in lines
    assert "executed 40 instructions at 4 addresses (3 executed), 900 latency cycles" in text
    assert "stall 50.0% of latency, idle 10.0% of wave time, IPC 0.040 per wave-cycle" in text
    assert "matrix cores: 25.0% of executed instructions, 44.4% of latency cycles" in text
    assert any(ln.split()[:3] == ["matrix", "(MFMA/WMMA)", "10"] for ln in lines)
    assert any("1.  44.4%  v_mfma_f32_32x32x8f16" in ln and "gemm.hip:26" in ln for ln in lines)
    assert all(isinstance(ln, str) and "\n" not in ln for ln in lines)
