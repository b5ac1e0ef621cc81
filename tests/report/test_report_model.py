from __future__ import annotations

from aaco.report.model import coverage_warnings
from aaco.report.terminal import bar, clip
from aaco.report.text import fmt_bytes, fmt_ms


def test_coverage_warnings_explain_each_case() -> None:
    assert coverage_warnings({}) == []
    assert (
        coverage_warnings(
            {"coverage": 1.02, "coverage_same_pass": 0.97, "profiler_inflation": 1.03}
        )
        == []
    )
    low = coverage_warnings({"coverage": 0.6, "coverage_same_pass": 0.6, "profiler_inflation": 1.0})
    assert len(low) == 1 and "overhead outside operators" in low[0] and "40%" in low[0]
    # a pass that ran faster: cross-pass coverage is meaningless, the same-pass one is fine
    fast = coverage_warnings(
        {"coverage": 0.42, "coverage_same_pass": 0.96, "profiler_inflation": 0.44}
    )
    assert len(fast) == 1 and "56% faster" in fast[0]
    slow = coverage_warnings(
        {"coverage": 1.6, "coverage_same_pass": 0.8, "profiler_inflation": 1.62}
    )
    assert "62% slower" in slow[0] and "profiler's own bookkeeping" in slow[1]
    overlap = coverage_warnings(
        {"coverage": 1.5, "coverage_same_pass": 1.4, "profiler_inflation": 1.05}
    )
    assert "overlap" in overlap[0]


def test_formatting_helpers() -> None:
    assert fmt_ms(None) == "unknown"
    assert (
        fmt_ms(123.456) == "123.5" and fmt_ms(1.23456) == "1.235" and fmt_ms(0.012345) == "0.0123"
    )
    assert (
        fmt_bytes(None) == "unknown" and fmt_bytes(512) == "512 B" and fmt_bytes(1536) == "1.5 KiB"
    )
    assert (
        bar(100, width=10) == "█" * 10 and bar(0, width=10) == "" and bar(55, width=10) == "█████▌"
    )


def test_terminal_renders_untrusted_names_literally() -> None:
    from aaco.report.terminal import render_report

    report = {
        "model": {"name": "[bold]evil[/bold]", "parameter_count": None, "node_count": None},
        "backend": {
            "name": "cpu",
            "provider": "CPUExecutionProvider",
            "providers_active": None,
            "batch": None,
        },
        "session": {"id": "x", "tag": "[red]tag", "error": None},
        "status": "completed",
        "summary": {
            "latency_ms": None,
            "throughput": None,
            "iterations_per_s": None,
            "warmup": None,
            "profile": {"profiled_iterations": 1, "coverage": None},
        },
        "top_ops": [
            {
                "name": "[link=http://x]node[/link]",
                "op_type": "[i]Conv",
                "ms_per_iter": 1.0,
                "pct": 100.0,
                "calls": 1,
            }
        ],
        "top_op_types": [{"op_type": "[i]Conv", "pct": 100.0}],
        "telemetry": None,
        "warnings": ["[blink]w"],
    }
    text = render_report(report, width=160)
    for literal in (
        "[bold]evil[/bold]",
        "[red]tag",
        "[link=http://x]node[/link]",
        "[i]Conv",
        "[blink]w",
    ):
        assert literal in text, literal
    assert "latency: unknown" in text and "batch    unknown" in text


def test_clip_keeps_both_ends_of_a_name() -> None:
    assert clip("/conv1/Conv +2 fused", 40) == "/conv1/Conv +2 fused"
    label = "/layer4/layer4.0/downsample/downsample.0/Conv +1 fused"
    short = clip(label, 40)
    assert len(short) == 40 and short.startswith("/layer4/") and short.endswith("Conv +1 fused")
    assert "…" in short
