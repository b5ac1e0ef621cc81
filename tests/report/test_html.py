"""The self-contained HTML report on real sessions: sections, missing-data lines, escaping."""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.test_cli import aaco
from tests.sessions_fixtures import HOSTILE, Sessions

from aaco.report.html import HtmlRenderer
from aaco.session.bundle import Session, iter_sessions


def _hostile(root: Path) -> Path:
    return next(p for p in iter_sessions(root) if Session.load(p).meta.get("tag") == HOSTILE)


def test_sections_charts_and_missing_lines(regress_sessions: Sessions) -> None:
    html = HtmlRenderer().render(Session.load(regress_sessions.slow))
    for section in (
        "summary",
        "latency",
        "time",
        "roofline",
        "timeline",
        "regression",
        "environment",
    ):
        assert f'<section id="{section}">' in html
    for chart in ("latency-hist", "latency-timeline", "ops-bars", "icicle"):
        assert f'<svg id="{chart}"' in html
    assert 'id="telemetry-process-CPU"' in html  # unified timeline next to the latency
    assert "Kernels: no GPU kernel trace" in html  # CPU run: says what is missing
    assert "warmup" in html  # the shaded warmup band
    # self-contained: no external scripts, styles, images or fonts
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"(?!data:)", html)
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html


def test_untrusted_names_render_as_text(web_root: Path) -> None:
    html = HtmlRenderer().render(Session.load(_hostile(web_root)))
    assert HOSTILE not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>bold</b>" not in html and "relu &amp; &lt;b&gt;bold&lt;/b&gt;" in html
    # the only script element is the report's own
    assert html.count("<script>") == 1


def test_cli_writes_html_into_the_bundle_and_to_a_file(
    regress_sessions: Sessions, tmp_path: Path
) -> None:
    s = regress_sessions.same
    assert (s / "report" / "report.html").is_file()  # written by aaco run
    out = tmp_path / "r.html"
    proc = aaco("report", "--session", str(s), "--format", "html", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "</html>" in text
    proc = aaco("report", "--session", str(s), "--format", "html")
    assert proc.returncode == 0 and "report.html" in proc.stderr


def test_regression_section_shows_a_diff(regress_sessions: Sessions) -> None:
    s = regress_sessions
    assert aaco("diff", "-b", str(s.base), "-s", str(s.slow), "-t", "25%").returncode == 1
    html = HtmlRenderer().render(Session.load(s.slow))
    assert 'class="verdict REGRESSION"' in html and 'id="movers"' in html
