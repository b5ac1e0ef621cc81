"""The error tree of AACO; the CLI maps each class to a one-line message and an exit code.

AacoError              base class, exit 1
├── UsageError         bad arguments, unknown names, malformed options: exit 2
│   └── InputError     a file or folder missing, unreadable or malformed: exit 2
├── RunError           the workload itself failed (crash, timeout, model rejected): exit 1
│   └── BusyError      a calibration refused: other processes held the CPU: exit 1
└── BundleError        a session bundle is missing, unreadable, malformed or of an unknown
                       format (detected where the bundle is read): exit 2

Any other exception that reaches the CLI is a bug of AACO itself: exit 4, one line that says
so, the traceback with ``--debug``. A bundle that loaded fine and then made a renderer or an
analysis raise is such a bug, never "a malformed bundle".

Something worth telling the user that happened while an exception was on its way out (a
failed run whose bundle could not be published, say) travels with that exception:
:func:`attach_warning` adds a one-line warning, the CLI prints :func:`attached_warnings`
before the error (library code never prints).
"""

from __future__ import annotations

_WARNINGS_ATTR = "_aaco_warnings"


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


def attach_warning(exc: BaseException, message: str) -> None:
    """Attach a one-line warning to ``exc`` for the CLI to print (Python 3.10 has no
    ``add_note``; a note would also print only with the traceback)."""
    found: list[str] | None = getattr(exc, _WARNINGS_ATTR, None)
    if found is None:
        found = []
        try:
            setattr(exc, _WARNINGS_ATTR, found)
        except (AttributeError, TypeError):  # an exception type without a __dict__
            return
    found.append(" ".join(message.split()))


def attached_warnings(exc: BaseException) -> list[str]:
    """The warnings attached to ``exc`` and to the exceptions it was raised from or while
    handling (click turns Ctrl-C into ``Abort`` raised from the ``KeyboardInterrupt``)."""
    found: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        found.extend(w for w in getattr(cur, _WARNINGS_ATTR, ()) if w not in found)
        cur = cur.__cause__ or cur.__context__
    return found
