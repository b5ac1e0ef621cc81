"""In-process generation over ONNX decoders with a KV cache (``aaco llm run``).

:func:`generate` runs the loop of :mod:`aaco.generate.decoder` and hands back serving requests
(:class:`aaco.analysis.serving.RequestResult`) and the operator split of
:mod:`aaco.generate.profile`.
"""

from __future__ import annotations

from aaco.generate.decoder import (
    KIND_PAIR,
    KIND_PAST,
    Decoder,
    DecoderModel,
    GenerateOptions,
    GenerateResult,
    Generation,
    generate,
    greedy,
    random_prompt,
    resolve_decoder,
)
from aaco.generate.profile import PHASES, op_split, split_phases, top_ops

__all__ = [
    "KIND_PAIR",
    "KIND_PAST",
    "PHASES",
    "Decoder",
    "DecoderModel",
    "GenerateOptions",
    "GenerateResult",
    "Generation",
    "generate",
    "greedy",
    "op_split",
    "random_prompt",
    "resolve_decoder",
    "split_phases",
    "top_ops",
]
