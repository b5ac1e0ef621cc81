"""``aaco serve`` and ``aaco dashboard``: the REST API and the web dashboard over a sessions
root."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from aaco.cli._common import sessions_option, sessions_root
from aaco.errors import InputError, UsageError

_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def _serve(
    host: str,
    port: int,
    sessions: Path | None,
    token: str | None,
    what: str,
    lake: Path | None = None,
) -> None:
    try:
        # lazy: fastapi and uvicorn are optional (aaco[web]) and take ~1 s to import
        import uvicorn

        from aaco.web.app import create_app
    except ImportError:
        raise UsageError(
            f"aaco {what} needs FastAPI and uvicorn: pip install 'aaco[web]'"
        ) from None
    token = token or os.environ.get("AACO_TOKEN") or None
    if host not in _LOCAL_HOSTS and not token:
        raise UsageError(
            f"binding to {host} exposes the sessions beyond this machine: "
            "give --token (or $AACO_TOKEN)"
        )
    root = sessions_root(sessions)
    if not root.is_dir() and lake is None:  # with a lake, bundles here are optional
        raise InputError(f"{root}: no such sessions root")
    app = create_app(root, token=token, lake=lake)
    over = f"the lake {lake.resolve()} and {root.resolve()}" if lake else str(root.resolve())
    sys.stderr.write(f"aaco {what}: http://{host}:{port}/ over {over}\n")
    uvicorn.run(app, host=host, port=port, log_level="warning")


@click.command()
@sessions_option()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--token", help="Bearer token every route requires (needed beyond localhost).")
@click.option(
    "--lake",
    type=click.Path(path_type=Path),
    help="/sessions and /history list the sessions of this lake (every machine's) instead.",
)
def serve(
    sessions: Path | None, host: str, port: int, token: str | None, lake: Path | None
) -> None:
    """REST API over a sessions root (FastAPI; schema at /openapi.json)."""
    _serve(host, port, sessions, token, "serve", lake)


@click.command()
@sessions_option()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8501, show_default=True)
@click.option("--token", help="Token required beyond localhost (open /?token=... once).")
@click.option(
    "--lake",
    type=click.Path(path_type=Path),
    help="List and chart the sessions of this lake (every machine's) instead.",
)
def dashboard(
    sessions: Path | None, host: str, port: int, token: str | None, lake: Path | None
) -> None:
    """Web dashboard: sessions with filters, reports, comparisons, history (same app as serve)."""
    _serve(host, port, sessions, token, "dashboard", lake)
