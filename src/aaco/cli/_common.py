"""What every command shares: printing, the terminal's width and colour, the sessions root,
repeated options, the report printed after a command, and the mapping of errors to exit codes."""

# Library modules are imported inside the commands (each marked "lazy: why"), not at the top
# of the command modules: ``aaco --help`` imports every command module, and most of the
# library pulls in rich, scipy, onnx, yaml, jinja2 or importlib.metadata (tens to hundreds of
# ms each) or onnxruntime, torch, fastapi (more). Only aaco.errors and aaco.session.bundle,
# which ``import aaco`` loads anyway, are imported at the top.

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from aaco.errors import AacoError, RunError

if TYPE_CHECKING:  # the bundle module imports pyarrow: not for `aaco --help`
    from aaco.session.bundle import Session

F = TypeVar("F", bound=Callable[..., Any])

#: click settings of every command
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

#: the formats of the report printed after ``run``, ``analyze`` and ``import``
PRINTED_FORMATS = ("terminal", "json", "none")


# --- output ------------------------------------------------------------------------------


def out(text: str) -> None:
    """``text`` on stdout, ending in one newline."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()


def err(text: str) -> None:
    """``aaco: text`` on stderr."""
    sys.stderr.write(f"aaco: {text}\n")
    sys.stderr.flush()


def color() -> bool:
    """Whether stdout takes ANSI colours (a terminal, and no $NO_COLOR)."""
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def width() -> int:
    """The width tables are laid out for: the terminal's, within 80-160; 110 off a terminal."""
    try:
        return max(80, min(160, os.get_terminal_size().columns))
    except OSError:
        return 110


# --- sessions ----------------------------------------------------------------------------


def sessions_root(value: Path | None) -> Path:
    """The sessions root: ``--sessions``/``--output``, else $AACO_SESSIONS, else ./sessions."""
    if value is not None:
        return value
    env = os.environ.get("AACO_SESSIONS")
    return Path(env) if env else Path("sessions")


def session_path(session: str, sessions: Path | None) -> Path:
    """A ``--session`` value as a bundle path: 'latest' lies under the sessions root."""
    return sessions_root(sessions) / "latest" if session == "latest" else Path(session)


# --- repeated options --------------------------------------------------------------------


def sessions_option(help: str = "Sessions root.") -> Callable[[F], F]:
    """``--sessions DIR``, the sessions root (``help`` says what it is used for)."""
    return click.option("--sessions", type=click.Path(path_type=Path), help=help)


def session_option(
    help: str = "Bundle path, or 'latest' under the sessions root.",
) -> Callable[[F], F]:
    """``--session/-s``, one bundle, 'latest' by default."""
    return click.option("--session", "-s", default="latest", show_default=True, help=help)


def json_option(help: str = "JSON instead of a table.") -> Callable[[F], F]:
    """``--json``: machine-readable output instead of the human one."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def format_option(*decls: str, help: str) -> Callable[[F], F]:
    """The format of the report printed after a command (terminal, json or none).

    ``decls`` are the option's names and parameter name (default ``--format -f fmt``).
    """
    return click.option(
        *(decls or ("--format", "-f", "fmt")),
        type=click.Choice(PRINTED_FORMATS),
        default="terminal",
        show_default=True,
        help=help,
    )


if TYPE_CHECKING:
    _StrChoice = click.Choice[str]
else:  # click < 8.4: Choice is not generic
    _StrChoice = click.Choice


class RegistryChoice(_StrChoice):
    """A :class:`click.Choice` of a plug-in registry's names, read when the option is parsed
    or its help shown, so that a plug-in registered later (an entry point, a test) counts.
    ``names`` is the ``module:function`` that lists them, imported only then."""

    def __init__(self, names: str) -> None:
        self._names = names
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        # lazy: a registry reads entry points (importlib.metadata) at import
        module, _, function = self._names.partition(":")
        return tuple(getattr(importlib.import_module(module), function)())

    @choices.setter
    def choices(self, value: tuple[str, ...]) -> None:
        """Ignored: the choices are the registry's."""


def framework_choice() -> RegistryChoice:
    """``--framework``: the registered runners."""
    return RegistryChoice("aaco.runners.base:runner_names")


def renderer_choice() -> RegistryChoice:
    """``--format`` of ``aaco report``: the registered renderers."""
    return RegistryChoice("aaco.report.renderers:renderer_names")


def print_report(session: Session, fmt: str) -> None:
    """The report printed after ``run``, ``analyze`` and ``import`` (nothing for 'none')."""
    if fmt == "none":
        return
    # lazy: importlib.metadata, and the renderer's own imports (rich, jinja2)
    from aaco.report.renderers import create_renderer

    out(create_renderer(fmt, width=width(), color=color()).render(session))


def finish(session: Session, what: str, report_format: str | None) -> None:
    """After a command that wrote a bundle: its report (``report_format`` None: none), the
    ``bundle:`` line on stderr, and a RunError (exit 1) when the session did not complete."""
    if report_format is not None:
        print_report(session, report_format)
    sys.stderr.write(f"bundle: {session.path}\n")
    if session.status != "completed":
        error = session.error or {}
        raise RunError(f"{what} {session.status}: {error.get('message', 'no reason recorded')}")


# --- errors and exit codes ---------------------------------------------------------------


def fail(message: str, code: int) -> NoReturn:
    """``aaco: error: message`` on stderr, then exit ``code``."""
    err(f"error: {message}")
    sys.exit(code)


def terminate(signum: int, frame: object) -> None:
    """SIGTERM handler: unwind like Ctrl-C."""
    raise KeyboardInterrupt


def command_name(args: list[str]) -> str:
    """The command of a command line (``report``), for the rerun hint of an internal error:
    the command's own arguments stay out of the message (one may be a --token)."""
    return next((a for a in args if not a.startswith("-")), "")


def classify(exc: BaseException, args: list[str]) -> tuple[str, int]:
    """The one-line message and exit code of an exception that ended a command."""
    if isinstance(exc, AacoError):
        return str(exc), exc.exit_code
    if isinstance(exc, click.exceptions.UsageError):
        # the full command path: `aaco llm bench`, not `aaco bench`
        hint = (
            f" (see '{exc.ctx.command_path} --help')"
            if exc.ctx and exc.ctx.info_name != "aaco"
            else ""
        )
        return exc.format_message() + hint, 2
    if isinstance(exc, (click.exceptions.Abort, KeyboardInterrupt)):
        return "interrupted", 130
    # Anything else is AACO's own bug, whatever the input: a malformed input is refused,
    # as an AacoError, where it is read. 4, not 1: a CI gate must not read a crash as
    # "regression" (diff) or "failed run".
    what = " ".join(f"{type(exc).__name__}: {exc}".split()).removesuffix(":")
    command = " ".join(filter(None, ("aaco --debug", command_name(args), "...")))
    return (
        f"internal error, a bug in AACO: {what}; rerun as '{command}' to see the "
        "traceback, and please report it",
        4,
    )
