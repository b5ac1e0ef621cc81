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
  run; :func:`bundle_shape`: a bundle's files, table schemas and JSON key paths;
* :func:`make_serving_bundle` / :func:`scripted_results`: a serving bundle (``aaco llm
  bench``) whose requests' times are known by construction; the scripted OpenAI-compatible
  server itself is :mod:`aaco.testing.llm_server`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aaco.testing.bundles import bundle_shape, make_bundle
    from aaco.testing.clock import FakeClock
    from aaco.testing.collector import FakeCollector
    from aaco.testing.runner import FakeRunner, FakeWorkload
    from aaco.testing.serving import make_serving_bundle, scripted_results
    from aaco.testing.tracer import FakeTracer, RecordedKernel

#: where each name lives: loaded on first use, so that ``python -m aaco.testing.llm_server``
#: starts without the pipeline and scipy (PEP 562)
_HOMES = {
    "bundle_shape": "bundles",
    "make_bundle": "bundles",
    "FakeClock": "clock",
    "FakeCollector": "collector",
    "FakeRunner": "runner",
    "FakeWorkload": "runner",
    "make_serving_bundle": "serving",
    "scripted_results": "serving",
    "FakeTracer": "tracer",
    "RecordedKernel": "tracer",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'aaco.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"aaco.testing.{home}"), name)


__all__ = [
    "FakeClock",
    "FakeCollector",
    "FakeRunner",
    "FakeTracer",
    "FakeWorkload",
    "RecordedKernel",
    "bundle_shape",
    "make_bundle",
    "make_serving_bundle",
    "scripted_results",
]
