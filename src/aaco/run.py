"""``aaco run`` as a library call, kept for scripts written against this module: the run is
the pipeline's (:mod:`aaco.pipeline`), the frameworks are runner plug-ins
(:mod:`aaco.runners.base`).

>>> from aaco.run import RunOptions, run_model          # doctest: +SKIP
>>> session = run_model(RunOptions(model="mlp", iterations=50))   # doctest: +SKIP
"""

from __future__ import annotations

from aaco.pipeline import PROFILE_MODES, RunOptions, frameworks, run_model

__all__ = ["PROFILE_MODES", "RunOptions", "frameworks", "run_model"]
