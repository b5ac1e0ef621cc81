"""The rendered copies a bundle keeps of its reports (``report/``): JSON, plain text, HTML.

Every command that changes what a bundle holds (``aaco run``, ``aaco import``, ``aaco
analyze``, ``aaco diff``) ends with :func:`write_reports`, so that the copies show it. The
formats are renderer names (:mod:`aaco.report.renderers`), :data:`REPORT_COPIES` by default.

Example::

    write_reports(Path("sessions/latest"))      # report/report.json, .txt, .html
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aaco.report.renderers import create_renderer
from aaco.session.bundle import Session, atomic_write_bytes
from aaco.session.paths import REPORT_DIR
from aaco.session.records import add_failure
from aaco.stages import stage

__all__ = ["REPORT_COPIES", "write_reports"]

#: the formats a bundle keeps a rendered copy of, as ``report/report<extension>``
REPORT_COPIES: tuple[str, ...] = ("json", "terminal", "html")


def write_reports(bundle: Path, formats: Sequence[str] = REPORT_COPIES) -> Session:
    """Refresh the bundle's rendered reports (``report/``), one file per format (plain text
    for the terminal one: no colour codes). Returns the bundle as a Session that keeps what
    the rendering derived (the report model, the rendered copies), so a report printed
    next from it is not built again."""
    session = Session.load(bundle)
    failed = False
    for name in formats:
        renderer = create_renderer(name, color=False)
        target = bundle / REPORT_DIR / f"report{renderer.output_file_extension}"
        try:
            with stage(f"report:{name}"):
                text = renderer.render(session)
            data = text if isinstance(text, bytes) else text.encode()
            atomic_write_bytes(target, data)
        except Exception as exc:  # a report is a convenience copy; the data is already safe
            add_failure(bundle, f"report_{renderer.name}", str(exc))
            failed = True
    # a failure recorded above changed session.json: the snapshot is stale then
    return Session.load(bundle) if failed else session
