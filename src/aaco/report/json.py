"""The JSON renderer: the report model as one indented JSON object."""

from __future__ import annotations

import json

from aaco.report.base import Renderer
from aaco.report.model import build_report
from aaco.session.bundle import Session


class JsonRenderer(Renderer):
    name = "json"
    output_file_extension = ".json"

    def render(self, session: Session) -> str:
        return json.dumps(build_report(session), indent=2, allow_nan=False) + "\n"
