"""One registry mechanism for every plug-in kind: runners, collectors, tracers, analyses,
renderers (importers keep their sniffing order in :mod:`aaco.importers.registry`, on the same
``module:Class`` + entry-point scheme).

Built-ins are ``name -> "module:Class"`` strings, loaded only when asked for, so listing the
plug-ins imports no framework. Third parties register the same way through the entry-point
group ``aaco.<kind>`` (the entry point's name is the plug-in's name); code and tests can also
:meth:`Registry.register` a class at run time. An unknown name is a
:class:`~aaco.errors.UsageError` that lists the valid names.

Example::

    RUNNERS = Registry("runner", Runner, {"onnxruntime": "aaco.runners.ort:OrtRunner"})
    cls = RUNNERS.get("onnxruntime")
    RUNNERS.names()            # ['onnxruntime', ...]
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from aaco.errors import UsageError

__all__ = ["ENTRY_POINT_PREFIX", "Registry", "load_ref"]

#: entry-point groups are ``aaco.runners``, ``aaco.collectors``, ``aaco.tracers``, ...
ENTRY_POINT_PREFIX = "aaco."

T = TypeVar("T")


def load_ref(ref: str) -> Any:
    """The object a ``module:attribute`` string names."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{ref!r} is not a module:attribute reference")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    """Named plug-in classes of one kind, subclasses of ``base``.

    ``kind`` is the singular noun used in messages ("runner"); the entry-point group is
    ``aaco.<kind>s`` unless ``group`` says otherwise.
    """

    def __init__(
        self,
        kind: str,
        base: type[Any],
        builtins: Mapping[str, str],
        *,
        group: str | None = None,
        option: str | None = None,
    ) -> None:
        self.kind = kind
        self.base = base
        self.group = group or f"{ENTRY_POINT_PREFIX}{kind}s"
        #: the command-line option that names this kind, for error messages
        self.option = option
        self._refs: dict[str, str | type[T]] = dict(builtins)
        self._entry_points_read = False

    def _read_entry_points(self) -> None:
        if self._entry_points_read:
            return
        self._entry_points_read = True
        for ep in entry_points(group=self.group):
            self._refs.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        """Every registered name: built-ins first, in their order, then third parties."""
        self._read_entry_points()
        return list(self._refs)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def get(self, name: str) -> type[T]:
        """The class registered as ``name``; a UsageError listing the valid names if none."""
        self._read_entry_points()
        ref = self._refs.get(name)
        if ref is None:
            what = self.option or self.kind
            raise UsageError(f"unknown {what} {name!r}; valid: {', '.join(self.names())}")
        cls = load_ref(ref) if isinstance(ref, str) else ref
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise TypeError(f"{self.kind} {name!r} ({ref}) is not a {self.base.__name__}")
        self._refs[name] = cls
        return cls

    def register(self, name: str, cls: type[T] | str) -> None:
        """Add (or replace) ``name``; ``cls`` is a class or a ``module:Class`` string."""
        self._read_entry_points()
        self._refs[name] = cls

    def unregister(self, name: str) -> None:
        self._refs.pop(name, None)

    @contextmanager
    def registered(self, name: str, cls: type[T] | str) -> Iterator[None]:
        """``name`` registered for the duration of a ``with`` block (tests, scripts)."""
        self._read_entry_points()
        before = self._refs.get(name)
        self._refs[name] = cls
        try:
            yield
        finally:
            if before is None:
                self._refs.pop(name, None)
            else:
                self._refs[name] = before
