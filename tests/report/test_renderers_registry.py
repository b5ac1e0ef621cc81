"""The renderer registry: built-in names, unknown names, the format an output file's extension
asks for, and a third-party renderer selected with ``aaco report --format``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from aaco.cli import app
from aaco.errors import UsageError
from aaco.report.base import Renderer
from aaco.report.html import HtmlRenderer
from aaco.report.json import JsonRenderer
from aaco.report.perfetto import PerfettoRenderer
from aaco.report.renderers import (
    REGISTRY,
    create_renderer,
    get_renderer_class,
    guess_renderer_from_outfile,
    renderer_names,
)
from aaco.report.terminal import TerminalRenderer
from aaco.session.bundle import Session

BUNDLE = Path(__file__).resolve().parents[1] / "session" / "fixtures" / "bundle_v1"


class ShoutRenderer(Renderer):
    """A third party's renderer: the model's name, loudly."""

    name = "shout"
    output_file_extension = ".shout"

    def render(self, session: Session) -> str:
        return f"{str(session.meta['model']['name']).upper()}!\n"


class MarkdownRenderer(Renderer):
    name = "markdown"
    output_file_extension = ".md"

    def render(self, session: Session) -> str:
        return f"# {session.session_id}\n"


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    return Path(shutil.copytree(BUNDLE, tmp_path / "bundle"))


def test_the_built_ins_are_listed_first_in_order() -> None:
    assert renderer_names()[:4] == ["terminal", "json", "html", "perfetto"]
    assert get_renderer_class("terminal") is TerminalRenderer
    assert get_renderer_class("json") is JsonRenderer
    assert get_renderer_class("html") is HtmlRenderer
    assert get_renderer_class("perfetto") is PerfettoRenderer


def test_an_unknown_name_is_a_usage_error_naming_the_valid_ones() -> None:
    with pytest.raises(UsageError) as caught:
        get_renderer_class("pdf")
    message = str(caught.value)
    assert "'pdf'" in message
    for name in ("terminal", "json", "html", "perfetto"):
        assert name in message


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("report.json", "json"),
        ("out/report.html", "html"),
        ("REPORT.HTM", "html"),
        ("report.txt", "terminal"),
        ("report.md", None),  # no markdown renderer is built in
        ("report.pdf", None),
        ("report", None),
        ("trace.json.gz", None),
    ],
)
def test_the_extension_picks_the_format(path: str, name: str | None) -> None:
    assert guess_renderer_from_outfile(path) == name
    assert guess_renderer_from_outfile(Path(path)) == name


def test_markdown_is_guessed_once_a_renderer_is_registered() -> None:
    with REGISTRY.registered("markdown", MarkdownRenderer):
        assert guess_renderer_from_outfile("notes.md") == "markdown"
    assert guess_renderer_from_outfile("notes.md") is None
    assert "markdown" not in renderer_names()


def test_only_a_renderer_that_takes_them_gets_the_terminal_options() -> None:
    terminal = create_renderer("terminal", width=130, color=True)
    assert isinstance(terminal, TerminalRenderer)
    assert (terminal.width, terminal.color) == (130, True)
    assert isinstance(create_renderer("json", width=130, color=True), JsonRenderer)


def test_a_third_party_renderer_is_selectable_from_the_command_line(bundle: Path) -> None:
    runner = CliRunner()
    with REGISTRY.registered("shout", ShoutRenderer):
        assert "shout" in renderer_names()
        result = runner.invoke(app, ["report", "--session", str(bundle), "--format", "shout"])
        assert result.exit_code == 0, result.output
        assert result.stdout == "TINY-CONVNET!\n"
        assert "shout" in runner.invoke(app, ["report", "--help"]).stdout
    result = runner.invoke(app, ["report", "--session", str(bundle), "--format", "shout"])
    assert result.exit_code == 2
    assert "'shout' is not one of 'terminal', 'json', 'html', 'perfetto'" in result.output


@pytest.mark.parametrize(
    ("args", "looks_like"),
    [
        (["-o", "r.json"], "json"),
        (["-o", "r.html"], "html"),
        (["-o", "r.txt"], "terminal"),
        (["-o", "r.out"], "terminal"),  # an extension no renderer claims: the default
        (["-o", "r.json", "-f", "terminal"], "terminal"),  # --format wins
        (["-o", "r.txt", "--format", "json"], "json"),
    ],
)
def test_report_output_extension_picks_the_default_format(
    bundle: Path, tmp_path: Path, args: list[str], looks_like: str
) -> None:
    args = [a if not a.startswith("r.") else str(tmp_path / a) for a in args]
    result = CliRunner().invoke(app, ["report", "--session", str(bundle), *args])
    assert result.exit_code == 0, result.output
    text = Path(args[1]).read_text()
    if looks_like == "json":
        assert json.loads(text)["model"]["name"] == "tiny-convnet"
    elif looks_like == "html":
        assert text.lstrip().lower().startswith("<!doctype html")
    else:
        assert "tiny-convnet" in text and not text.lstrip().startswith(("{", "<"))
