"""The `aaco import` plug-in for ONNX Runtime profiles (``SessionOptions.enable_profiling``).

It wraps :func:`aaco.importers.ort_profile.parse_ort_profile`: node events become OPS rows,
``cat:"Kernel"`` events of CUDA/ROCm EP builds become KERNELS and MEMCPY rows, and every
``model_run`` becomes an ANNOTATIONS row of kind ``step`` (name ``model_run``, ``step`` = run
index) so the iteration windows travel with the trace. No run is skipped: a profile captured
elsewhere has no known warm-up, so ``iteration`` counts every ``model_run`` from 0.

Example::

    tables = OrtTraceImporter().read(Path("onnxruntime_profile__2025-01-01.json"))
    tables.ops.num_rows, tables.kernels.num_rows
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

from aaco.importers._lenient import collecting
from aaco.importers.base import Importer, TraceTables
from aaco.importers.ort_profile import SOURCE, parse_ort_profile
from aaco.session.schema import ANNOTATIONS

__all__ = ["OrtTraceImporter"]

# ORT's profiler writes `"cat" : "Node"` (spaced); re-serialised profiles may not be.
_ORT_CAT = re.compile(rb'"cat"\s*:\s*"(?:Session|Node|Kernel)"')
_ORT_NAME = re.compile(
    rb'"name"\s*:\s*"(?:model_loading_uri|model_loading_array|session_initialization'
    rb'|model_run|[^"\\]*_kernel_time)"'
)


class OrtTraceImporter(Importer):
    """ONNX Runtime profile JSON: nodes, and GPU kernels/copies of CUDA/ROCm EP builds."""

    name: ClassVar[str] = SOURCE
    description: ClassVar[str] = (
        "ONNX Runtime profile (enable_profiling) .json/.json.gz, with Kernel events of "
        "CUDA/ROCm EP builds"
    )

    @classmethod
    def sniff(cls, path: Path, head: bytes) -> bool:
        """A top-level JSON array whose first events are ORT Session/Node/Kernel events."""
        text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        if text[:1] != b"[":
            return False
        return _ORT_CAT.search(text) is not None and _ORT_NAME.search(text) is not None

    def read(self, path: Path) -> TraceTables:
        path = Path(path)
        with collecting() as odd:
            prof = parse_ort_profile(path)
        runs = prof.runs
        n = runs.num_rows
        annotations = ANNOTATIONS.from_columns(
            {
                "source": [SOURCE] * n,
                "kind": ["step"] * n,
                "name": ["model_run"] * n,
                "process_id": [None] * n,
                "thread_id": [None] * n,
                "device": [None] * n,
                "stream": [None] * n,
                "start_ns": runs.column("start_ns"),
                "dur_ns": runs.column("dur_ns"),
                "step": runs.column("iteration"),
            }
        )
        meta = {
            "tool": SOURCE,
            "format": "onnxruntime-profile",
            "files": [str(path)],
            "clock": {"unit": "ns", "origin": "start of profiling (ORT profile ts)"},
            "runs": n,
            "session_events_ns": dict(prof.session_events),
            "ops": prof.ops.num_rows,
            "kernels": prof.kernels.num_rows,
            "memcpy": prof.memcpy.num_rows,
            # ORT rewrites kernel ts relative to the parent node; only durations are GPU time.
            "kernel_times": "start_ns is the parent node's start; dur_ns is GPU time",
            **odd.meta(),
        }
        return TraceTables(
            ops=prof.ops,
            kernels=prof.kernels,
            memcpy=prof.memcpy,
            annotations=annotations,
            meta=meta,
        )
