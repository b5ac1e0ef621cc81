"""The tracer plug-in interface and registry.

A tracer is an external tool that wraps a command and writes a trace (rocprofv3; next,
nsys). The pipeline re-runs the profiled workload in a capture worker under the tracer's
:meth:`Tracer.command` prefix, checks what it wrote (:meth:`Tracer.check_output`) and
imports it with the importers. A tracer knows command lines and output layouts only;
launching and importing are the pipeline's.

``aaco profile -- CMD`` (:mod:`aaco.runners.profile`) wraps an arbitrary command the same
way: it prepares the tracer for :data:`ANY_PROVIDER`, runs ``[*command(out), *CMD]`` with
:meth:`Tracer.environment` added to the command's environment (a tracer that injects
itself through the environment, such as ``torch``, has an empty prefix) and imports what
it wrote under :attr:`Tracer.output_dir`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from aaco.plugins import Registry

__all__ = ["ANY_PROVIDER", "TRACERS", "Tracer"]

#: the ``provider`` :meth:`Tracer.prepare` is given for an arbitrary command (``aaco
#: profile``), whose execution provider, if any, is unknown: check only that the tool runs here
ANY_PROVIDER = "*"


class Tracer(ABC):
    """Subclasses set the class attributes and implement :meth:`prepare` and :meth:`command`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    #: where the trace goes, relative to the bundle
    output_dir: ClassVar[str] = ""

    @abstractmethod
    def prepare(self, provider: str) -> None:
        """Check, before anything runs, that this tracer can record a workload on the ONNX
        Runtime execution provider ``provider`` here (:data:`ANY_PROVIDER`: an arbitrary
        command); a UsageError saying why not."""

    @abstractmethod
    def command(self, output_dir: Path) -> list[str]:
        """The prefix that wraps the worker's own command line."""

    def environment(self, output_dir: Path) -> dict[str, str]:
        """Variables to set in the traced command's environment (none by default); a tracer
        that injects itself through the environment returns them here."""
        return {}

    def check_output(self, files: list[str]) -> str | None:
        """Why the files the tracer wrote (bundle-relative) cannot be a trace, or None."""
        return None if files else f"{self.name} wrote nothing under {self.output_dir}"


TRACERS: Registry[Tracer] = Registry(
    "tracer",
    Tracer,
    {
        "rocprofv3": "aaco.tracers.rocprofv3:Rocprofv3Tracer",
        "nsys": "aaco.tracers.nsys:NsysTracer",
        "torch": "aaco.tracers.torch:TorchTracer",
    },
)
