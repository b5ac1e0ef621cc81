"""Renderers of diff, history and check results: verdict line first, untrusted names escaped."""

from __future__ import annotations

import copy

from tests.sessions_fixtures import Sessions

from aaco.regress.diff import diff_sessions
from aaco.report.regress import render_diff_markdown, render_diff_terminal, verdict_line
from aaco.session.bundle import Session


def test_verdict_first_and_hostile_names_escaped(regress_sessions: Sessions) -> None:
    diff = diff_sessions(
        Session.load(regress_sessions.base), Session.load(regress_sessions.slow), threshold=0.25
    )
    assert diff["summary"] == verdict_line(diff)
    hostile = copy.deepcopy(diff)
    movers = hostile["evidence"]["operators"]["top_movers"]
    movers[0]["name"] = "<script>alert(1)</script>|[bold red]x[/]"
    movers[0]["label"] = movers[0]["name"] + " +1 fused"  # shown; the name beside it when wide
    text = render_diff_terminal(hostile, width=200)
    assert text.splitlines()[0] == diff["summary"]
    assert "[bold red]x[/]" in text  # shown as text, not taken as markup
    md = render_diff_markdown(hostile)
    assert md.startswith("### ") and diff["summary"] in md
    assert "<script>" not in md and "&lt;script&gt;" in md and "\\|[bold red]" in md
    assert "| p10 |" in md and "| p50 |" in md
