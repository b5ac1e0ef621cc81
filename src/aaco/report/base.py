"""The renderer interface: a renderer turns a loaded session into text or bytes."""

from __future__ import annotations

from typing import ClassVar

from aaco.session.bundle import Session


class Renderer:
    """Subclasses set ``name`` and ``output_file_extension`` and implement :meth:`render`."""

    name: ClassVar[str] = ""
    output_file_extension: ClassVar[str] = ""
    output_is_binary: ClassVar[bool] = False

    def render(self, session: Session) -> str:
        raise NotImplementedError
