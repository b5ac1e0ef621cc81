"""The renderer registry: report formats by name, built-in or from the ``aaco.renderers``
entry-point group, and the format an output file's extension asks for.

Example::

    from aaco.report.renderers import create_renderer, guess_renderer_from_outfile

    name = guess_renderer_from_outfile(Path("report.html")) or "terminal"   # 'html'
    text = create_renderer(name, width=120).render(session)

A third-party renderer is a :class:`~aaco.report.base.Renderer` subclass registered as an
entry point of the group ``aaco.renderers`` (the entry point's name is the format's name);
``aaco report --format NAME`` then selects it.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from aaco.plugins import Registry
from aaco.report.base import Renderer

__all__ = [
    "REGISTRY",
    "create_renderer",
    "get_renderer_class",
    "guess_renderer_from_outfile",
    "renderer_names",
]

#: every renderer, by format name; built-ins load only when asked for
REGISTRY: Registry[Renderer] = Registry(
    "renderer",
    Renderer,
    {
        "terminal": "aaco.report.terminal:TerminalRenderer",
        "json": "aaco.report.json:JsonRenderer",
        "html": "aaco.report.html:HtmlRenderer",
        "perfetto": "aaco.report.perfetto:PerfettoRenderer",
    },
)

#: output file extension -> format; a format not registered is skipped
_EXTENSIONS = {
    ".json": "json",
    ".html": "html",
    ".htm": "html",
    ".txt": "terminal",
    ".md": "markdown",
}


def renderer_names() -> list[str]:
    """Every registered format: the built-ins in their order, then third parties."""
    return REGISTRY.names()


def get_renderer_class(name: str) -> type[Renderer]:
    """The renderer class of format ``name``; a UsageError listing the valid names if none."""
    return REGISTRY.get(name)


def create_renderer(name: str, *, width: int | None = None, color: bool = False) -> Renderer:
    """A renderer of format ``name``, given the terminal's ``width`` and ``color`` when its
    constructor takes them (the terminal renderer does; the file formats do not)."""
    cls = get_renderer_class(name)
    params = inspect.signature(cls).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    options = {"width": width, "color": color}
    return cls(**{k: v for k, v in options.items() if v is not None and (takes_any or k in params)})


def guess_renderer_from_outfile(path: str | Path) -> str | None:
    """The format an output file's extension asks for (``report.html`` -> 'html'), or None
    for an extension no registered format claims (the caller picks its default)."""
    name = _EXTENSIONS.get(Path(path).suffix.lower())
    return name if name is not None and name in REGISTRY else None
