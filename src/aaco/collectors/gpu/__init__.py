"""GPU telemetry: power, energy, clocks, utilisation, temperatures, memory, throttling, into
the ``gpu_telemetry`` table (:data:`~aaco.session.schema.GPU_TELEMETRY`).

Three collectors share one sampler (:mod:`aaco.collectors.gpu.common`):

* ``gpu`` (:class:`GpuCollector`): the first source that works here, NVML, then the amdsmi
  library, then the ``amd-smi`` command, then ``rocm-smi``. With none it still runs,
  hands back an empty table, and its ``info()`` says why each was not used;
* ``nvml`` (:class:`~aaco.collectors.gpu.nvml.NvmlCollector`): NVIDIA only;
* ``amdsmi`` (:class:`~aaco.collectors.gpu.amd.AmdSmiCollector`): AMD only, library first.

Every vendor library is optional (``pip install aaco[nvidia]`` / ``aaco[amd]``) and
imported in the sampler thread, never at import of this package. What each column means
per vendor is in docs/metrics.md; :func:`aaco.analysis.gpu.summarize_gpu` turns the table
into the run's energy, clocks and throttling figures.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any, ClassVar

from aaco.collectors.gpu.amd import (
    AmdSmiCollector,
    CliRunner,
    cli_unavailable,
    open_amd_smi_cli,
    open_amdsmi,
    open_rocm_smi_cli,
    run_command,
)
from aaco.collectors.gpu.common import GpuSamplerBase, Opener
from aaco.collectors.gpu.nvml import NvmlCollector, open_nvml

__all__ = ["AmdSmiCollector", "GpuCollector", "NvmlCollector"]


class GpuCollector(GpuSamplerBase):
    """Whatever GPUs this machine has, through the first source that works.

    The order is NVML (when ``pynvml`` imports and finds devices), the amdsmi library,
    ``amd-smi metric --json``, ``rocm-smi --json``. ``info()["source"]`` names the one
    used; ``info()["tried"]`` gives each skipped source's reason, and when none works
    ``info()["unavailable"]`` reads e.g. "no GPU telemetry source: nvidia-ml-py not
    installed, amdsmi not importable (OSError(...)), amd-smi/rocm-smi not on PATH".

    ``nvml`` / ``amdsmi`` replace the vendor modules (test doubles in
    :mod:`aaco.testing.fake_gpu`); ``cli_runner`` and ``which`` replace how a command is
    run and found. Example::

        with GpuCollector(pid=os.getpid(), hz=10) as gpu:
            run_inference()
        summarize_gpu(gpu.table(), window=None, inferences=None)
    """

    name: ClassVar[str] = "gpu"

    def __init__(
        self,
        pid: int | None = None,
        hz: float = 10.0,
        *,
        nvml: Any = None,
        amdsmi: Any = None,
        cli_runner: CliRunner = run_command,
        which: Callable[[str], str | None] = shutil.which,
        cli_max_duty: float = 0.1,
    ) -> None:
        super().__init__(pid, hz)
        self._nvml = nvml
        self._amdsmi = amdsmi
        self._cli_runner = cli_runner
        self._which = which
        self._cli_max_duty = cli_max_duty

    @classmethod
    def available(cls) -> tuple[bool, str]:
        # Always: with no GPU it records that there was none, which is itself worth saying.
        return True, ""

    def openers(self) -> list[tuple[str, Opener]]:
        runner, which, duty = self._cli_runner, self._which, self._cli_max_duty
        return [
            ("nvml", open_nvml(self._nvml)),
            ("amdsmi", open_amdsmi(self._amdsmi)),
            ("amd-smi", open_amd_smi_cli(runner, which, duty)),
            ("rocm-smi", open_rocm_smi_cli(runner, which, duty)),
        ]

    def unavailable_message(self, tried: dict[str, str]) -> str:
        return "no GPU telemetry source: " + ", ".join(cli_unavailable(tried))
