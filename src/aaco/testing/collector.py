"""A collector that hands back rows recorded elsewhere (``system_events`` schema)."""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa

from aaco.collectors.base import Collector
from aaco.session.schema import SYSTEM_EVENTS


class FakeCollector(Collector):
    """Returns :attr:`rows` (a list of ``system_events`` rows) as its table; set the class
    attribute (or subclass) before the run. Records the pid it was asked to watch."""

    name: ClassVar[str] = "fake"
    table_name: ClassVar[str] = "system_events"
    rows: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, pid: int = 0, hz: float = 10.0) -> None:
        super().__init__()
        self.pid = pid
        self.hz = hz

    @classmethod
    def for_process(cls, pid: int, hz: float) -> FakeCollector:
        return cls(pid, hz)

    def _start(self) -> None:
        pass

    def _stop(self) -> None:
        pass

    def _table(self) -> pa.Table:
        cols = {c: [r.get(c) for r in self.rows] for c in SYSTEM_EVENTS.column_names}
        return SYSTEM_EVENTS.from_columns(cols)

    def info(self) -> dict[str, Any]:
        return {"pid": self.pid, "hz": self.hz, "samples": len(self.rows)}
