"""``aaco run`` as a library call, kept for scripts written against this module: the run is
the pipeline's (:mod:`aaco.pipeline`), the frameworks are runner plug-ins
(:mod:`aaco.runners.base`).

>>> from aaco.run import RunOptions, run_model          # doctest: +SKIP
>>> session = run_model(RunOptions(model="mlp", iterations=50))   # doctest: +SKIP
"""

from __future__ import annotations

from aaco.pipeline import PROFILE_MODES, RunOptions, frameworks, run_model
from aaco.runners.ort import ResolvedModel, check_provider, resolve_model
from aaco.runners.torch import TorchModelRef, resolve_torch_model

__all__ = [
    "PROFILE_MODES",
    "ResolvedModel",
    "RunOptions",
    "TorchModelRef",
    "check_provider",
    "frameworks",
    "resolve_model",
    "resolve_torch_model",
    "run_model",
]
