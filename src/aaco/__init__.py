"""AACO, the AI Compute Observatory: where the time of an AI inference went, and why.

Typical use from Python::

    import aaco
    session = aaco.Session.load("sessions/latest")
    print(session.summary["latency_ms"]["p50"])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aaco.errors import AacoError, BundleError, InputError, RunError, UsageError

if TYPE_CHECKING:
    from aaco.session.bundle import Session

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Session pulls in pyarrow (~0.15 s): loaded when first used, so `aaco --version` and
    # `aaco --help` answer without it
    if name == "Session":
        from aaco.session.bundle import Session

        return Session
    raise AttributeError(f"module 'aaco' has no attribute {name!r}")


__all__ = [
    "AacoError",
    "BundleError",
    "InputError",
    "RunError",
    "Session",
    "UsageError",
    "__version__",
]
