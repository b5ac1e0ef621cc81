"""The error tree of AACO; the CLI maps each class to a one-line message and an exit code.

AacoError              base class, exit 1
├── UsageError         bad arguments, unknown names, malformed options: exit 2
│   └── InputError     a file or folder missing, unreadable or malformed: exit 2
├── RunError           the workload itself failed (crash, timeout, model rejected): exit 1
│   └── BusyError      a calibration refused: other processes held the CPU: exit 1
└── BundleError        a session bundle is missing, incomplete or of an unknown format: exit 2
"""

from __future__ import annotations


class AacoError(Exception):
    """Base class of every error AACO raises on purpose."""

    exit_code = 1


class UsageError(AacoError):
    """The user asked for something that cannot be done as asked."""

    exit_code = 2


class InputError(UsageError):
    """A file or directory given by the user is missing, unreadable or malformed."""


class RunError(AacoError):
    """The measured workload failed; the bundle records why."""

    exit_code = 1


class BusyError(RunError):
    """A measurement refused because other processes held the CPU while it ran.

    ``detail`` says how busy (for messages that add their own advice), ``share`` is the
    share of the machine's CPU time other processes used (0-1; None when unknown).
    """

    def __init__(self, message: str, *, detail: str = "", share: float | None = None) -> None:
        super().__init__(message)
        self.detail = detail or message
        self.share = share


class BundleError(AacoError):
    """A path is not a loadable session bundle."""

    exit_code = 2
