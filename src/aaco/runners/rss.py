"""Peak resident memory of the calling process itself, for the worker and the aaco parent.

Not ``getrusage``'s ``ru_maxrss``: at ``exec`` Linux carries the high-water mark of the
process image being replaced into the new one (the kernel's ``setmax_mm_hiwater_rss``), so a
worker started by a parent that once held 10 GiB reads 10 GiB from ``ru_maxrss``, and so does
``wait4`` about it. ``VmHWM`` in ``/proc/self/status`` is the high-water mark of this
process's own address space, which ``exec`` starts afresh.

Example::

    peak = own_peak_rss_bytes()  # bytes, or None off Linux
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

__all__ = ["own_peak_rss_bytes", "self_max_rss_bytes"]

_STATUS = Path("/proc/self/status")


def own_peak_rss_bytes(status_file: Path = _STATUS) -> int | None:
    """The peak resident set size of this process since its ``exec``, in bytes (``VmHWM``);
    None where the system does not say (no ``/proc``, or no such line)."""
    try:
        text = status_file.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            fields = line.split()
            # "VmHWM:    123456 kB": proc(5) always reports it in kB (KiB)
            if len(fields) == 3 and fields[1].isdigit() and fields[2] == "kB":
                return int(fields[1]) * 1024
            return None
    return None


def self_max_rss_bytes() -> int:
    """``ru_maxrss`` of this process in bytes: an upper bound of what it passes on to a child
    through ``exec`` (see the module docstring)."""
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # KiB on Linux, bytes on macOS
    return int(maxrss) if sys.platform == "darwin" else int(maxrss) * 1024
