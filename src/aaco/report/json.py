"""The JSON renderer: the report model as one indented JSON object, with the machine's
``gpu``, ``sched`` and ``capsule`` when the bundle records them."""

from __future__ import annotations

import json

from aaco.report.base import Renderer
from aaco.report.model import build_report
from aaco.session.bundle import Session


class JsonRenderer(Renderer):
    name = "json"
    output_file_extension = ".json"

    def render(self, session: Session) -> str:
        report = build_report(session)
        return json.dumps(report, indent=2, allow_nan=False) + "\n"
