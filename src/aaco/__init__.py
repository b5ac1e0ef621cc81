"""AACO, the AI Compute Observatory: where the time of an AI inference went, and why.

Typical use from Python::

    import aaco
    session = aaco.Session.load("sessions/latest")
    print(session.summary["latency_ms"]["p50"])
"""

from __future__ import annotations

from aaco.errors import AacoError, BundleError, InputError, RunError, UsageError
from aaco.session.bundle import Session

__version__ = "0.1.0"

__all__ = [
    "AacoError",
    "BundleError",
    "InputError",
    "RunError",
    "Session",
    "UsageError",
    "__version__",
]
