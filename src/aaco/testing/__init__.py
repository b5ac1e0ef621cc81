"""Test doubles shipped with AACO, for its own tests and for plug-in authors' (like httpx's
``MockTransport``): production code has no test-only switches; tests inject these at the
plug-in seams instead.

* :class:`FakeClock`: a clock that advances by a fixed step per reading;
* :class:`FakeRunner` / :class:`FakeWorkload`: a runner whose iteration spins for a known
  time, run by the real pipeline and worker harness;
* :class:`FakeCollector`: a collector that hands back rows recorded elsewhere;
* :class:`FakeTracer`: a tracer that wraps the capture worker and writes a rocprofv3-format
  kernel trace of known kernels;
* :func:`make_bundle`: a published bundle with latencies known by construction, no model
  run; :func:`bundle_shape`: a bundle's files, table schemas and JSON key paths.
"""

from __future__ import annotations

from aaco.testing.bundles import bundle_shape, make_bundle
from aaco.testing.clock import FakeClock
from aaco.testing.collector import FakeCollector
from aaco.testing.runner import FakeRunner, FakeWorkload
from aaco.testing.tracer import FakeTracer, RecordedKernel

__all__ = [
    "FakeClock",
    "FakeCollector",
    "FakeRunner",
    "FakeTracer",
    "FakeWorkload",
    "RecordedKernel",
    "bundle_shape",
    "make_bundle",
]
