"""Publishing what a run left when it failed unexpectedly or was interrupted: the one way
every command that writes a bundle (``aaco run``, ``aaco profile``) keeps its partial bundle."""

from __future__ import annotations

import traceback
from pathlib import Path

from aaco.errors import attach_warning
from aaco.session.bundle import (
    FORMAT_VERSION,
    STATUS_FAILED,
    BundleWriter,
    read_json,
    utc_now_iso,
)
from aaco.session.paths import LATEST, SESSION_FILE
from aaco.session.records import save_session

__all__ = ["salvage"]


def salvage(writer: BundleWriter, exc: BaseException | None) -> str | None:
    """Publish what exists, marked failed, after an unexpected error or an interrupt.

    The caller re-raises ``exc``, which stays what the user sees. When the bundle cannot be
    published, one line saying where its files are is attached to ``exc`` for the CLI to
    print (:func:`aaco.errors.attach_warning`) and returned; None when it was published.
    """
    try:
        session_file = writer.path / SESSION_FILE
        meta = (
            read_json(session_file)
            if session_file.is_file()
            else {"format_version": FORMAT_VERSION, "session_id": writer.session_id}
        )
        interrupted = isinstance(exc, KeyboardInterrupt)
        reason = (
            "interrupted (Ctrl-C or SIGTERM)"
            if interrupted
            else f"internal error: {type(exc).__name__}: {exc}"
        )
        meta["status"] = STATUS_FAILED
        meta["error"] = {"message": reason, "stage": "aaco"}
        meta["finished_utc"] = utc_now_iso()
        save_session(writer.path, meta)
        if not interrupted:
            (writer.path / "runtime").mkdir(exist_ok=True)
            (writer.path / "runtime" / "aaco_traceback.txt").write_text(traceback.format_exc())
        writer.publish()
    except Exception as err:
        warning = _salvage_failed(writer, err)
        if exc is not None:
            attach_warning(exc, warning)
        return warning
    return None


def _salvage_failed(writer: BundleWriter, err: Exception) -> str:
    """The one line that says what became of a bundle :func:`salvage` could not publish.

    Files are never left unsaid in a hidden folder: when the staging folder holds any, it
    is kept and named; when it holds none, it is removed.
    """
    why = " ".join(f"{type(err).__name__}: {err}".split())
    where = writer.path
    if where == writer.final_path:  # renamed into place; only the latest pointer failed
        latest = writer.root / LATEST
        return f"the failed run's bundle is {where}; {latest} could not point at it ({why})"
    if _holds_files(where):
        return (
            f"could not publish the failed run's bundle ({why}); its files are kept in the "
            f"hidden folder {where} (aaco ls does not list it)"
        )
    writer.discard()
    return f"could not publish the failed run's bundle ({why}); it held no files to keep"


def _holds_files(folder: Path) -> bool:
    """Whether ``folder`` holds any file (True when it cannot be read: keep, never guess)."""
    try:
        return folder.is_dir() and any(f.is_file() for f in folder.rglob("*"))
    except OSError:
        return True
