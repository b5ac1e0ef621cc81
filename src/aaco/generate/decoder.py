"""The in-process generation loop of ``aaco llm run``: a prefill, then decode steps that feed
the KV cache back, each ``session.run`` timed, every generated sequence recorded as a serving
request (:class:`aaco.analysis.serving.RequestResult`).

Two shapes of decoder run:

- ``builtin-pair``: a built-in GPT-2 of the model registry (``gpt2``, ``gpt2-tiny``, and their
  ``-decode`` entries, which name the same pair) as two models built from one seed, hence with
  the same weights: the prefill model (``input_ids`` in; ``logits`` and ``present.{i}.key`` /
  ``.value`` out) and the decode model, which also takes ``past.{i}.key`` / ``.value``.
- ``past-key-values``: one ONNX file that serves both phases, as Hugging Face optimum exports
  decoders: ``input_ids``, ``past_key_values.{i}.key`` / ``.value`` (``past.{i}.*`` also
  accepted) and optionally ``attention_mask``, ``position_ids`` and ``use_cache_branch`` in;
  ``logits`` and ``present.{i}.key`` / ``.value`` out. The prefill feeds a past of length 0,
  the mask is all ones, positions count on from the past's length and ``use_cache_branch``
  (optimum's merged decoders) is true once there is a past.

The prompt is ``prompt_tokens`` seeded random token ids per sequence, the same for every
generation of a run; the next token is the greedy argmax of the last position's logits (the
weights are random, so the text means nothing; the cost is the real one). A generation of
``output_tokens`` tokens is one prefill run, which yields the first token, then
``output_tokens - 1`` decode runs. KV tensors stay ``OrtValue`` s from one run to the next,
so an accelerator's cache never goes through host memory.

Example::

    result = generate(GenerateOptions("gpt2-tiny", prompt_tokens=16, output_tokens=8))
    requests, chunks = serving_tables(result.results)  # aaco.analysis.serving
    result.top_ops["decode"][0]["op_type"]  # what dominates a decode step
"""

from __future__ import annotations

import gc
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pyarrow as pa

from aaco.analysis.serving import Chunk, RequestResult
from aaco.config import load_registry
from aaco.errors import AacoError, InputError, RunError, UsageError
from aaco.generate.profile import PHASES, op_split, phase_op_ns, split_phases, top_ops
from aaco.importers.ort_profile import parse_ort_profile
from aaco.models.registry import build, build_cached, cache_key, resolve_params

__all__ = [
    "KIND_PAIR",
    "KIND_PAST",
    "Decoder",
    "DecoderModel",
    "GenerateOptions",
    "GenerateResult",
    "Generation",
    "generate",
    "greedy",
    "random_prompt",
    "resolve_decoder",
]

KIND_PAIR = "builtin-pair"
KIND_PAST = "past-key-values"
#: the registry builder whose models run as a prefill/decode pair
_PAIR_BUILDER = "gpt2"
_PAST = re.compile(r"^(?:past_key_values|past)\.(\d+)\.(key|value)$")
_FLOATS: dict[str, type[np.generic]] = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(double)": np.float64,
}
_INTS: dict[str, type[np.generic]] = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}
_OPTIONAL_INPUTS = ("attention_mask", "position_ids", "use_cache_branch")
Clock = Callable[[], int]
NextToken = Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]]


@dataclass(frozen=True)
class GenerateOptions:
    """What ``aaco llm run`` generates: ``iterations`` measured generations (after ``warmup``
    ones) of ``output_tokens`` tokens after a ``prompt_tokens`` prompt, ``batch`` sequences
    at once; ``profile`` adds one generation with ORT profiling for the operator split."""

    model: str
    prompt_tokens: int = 128
    output_tokens: int = 64
    batch: int = 1
    warmup: int = 1
    iterations: int = 3
    provider: str = "CPUExecutionProvider"
    threads: int | None = None
    seed: int = 0
    profile: bool = True

    def __post_init__(self) -> None:
        if not self.model:
            raise UsageError("--model: give a built-in decoder name or an .onnx path")
        for flag, value, least in (
            ("--prompt-tokens", self.prompt_tokens, 1),
            ("--output-tokens", self.output_tokens, 1),
            ("--batch", self.batch, 1),
            ("--warmup", self.warmup, 0),
            ("--iterations", self.iterations, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise UsageError(f"{flag} must be an integer >= {least}, got {value!r}")
        if self.threads is not None and (
            isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1
        ):
            raise UsageError(f"--threads must be an integer >= 1, got {self.threads!r}")


@dataclass(frozen=True)
class DecoderModel:
    """A resolved decoder: its files, before any session exists."""

    name: str
    kind: str
    prefill_path: Path
    decode_path: Path
    #: what the registry knows (built-in pairs); the sessions fill in the rest
    builder: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def max_positions(self) -> int | None:
        """Positions the model can embed (GPT-2's ``n_positions``); None when unknown."""
        value = self.params.get("n_positions")
        return int(value) if value is not None else None

    def check_length(self, prompt_tokens: int, output_tokens: int) -> None:
        """UsageError when the prompt and the generated tokens need more positions than the
        model embeds (the last generated token is never fed back)."""
        limit = self.max_positions
        if limit is not None and prompt_tokens + output_tokens - 1 > limit:
            raise UsageError(
                f"--prompt-tokens {prompt_tokens} + --output-tokens {output_tokens} need "
                f"{prompt_tokens + output_tokens - 1} positions; {self.name} has {limit}"
            )


@dataclass(frozen=True)
class Generation:
    """One generation: ``tokens`` [batch, produced] and the (start, end) clock readings
    around each ``session.run`` (the first is the prefill). ``error`` (one line) and
    ``error_ns`` when a run failed; the runs before it are kept."""

    tokens: np.ndarray[Any, np.dtype[np.int64]]
    stamps: list[tuple[int, int]]
    error: str | None = None
    error_ns: int | None = None


@dataclass
class GenerateResult:
    """What :func:`generate` measured.

    ``results``: one request per generation and sequence, warmup ones first (``phase``
    ``warmup``), ``request`` = generation * batch + sequence, all in point 0.
    ``op_split``: :func:`aaco.generate.profile.op_split` rows of the profiled generation;
    ``top_ops``: its five largest operator types per phase. ``phase_totals``: per phase,
    ``runs_per_generation``, ``wall_ms_per_run`` (median over the measured runs: the prefill
    per generation, the decode per step), ``profiled_wall_ms_per_run``, ``ops_ms_per_run``
    and ``ops_share_of_wall`` (operator time over the profiled runs' wall time).
    ``profile_ops``: OPS rows of the profiled generation per phase, ``iteration`` counting
    runs within the phase. ``tokens``: the last measured generation's tokens per sequence.
    ``errors``: one line per failure (a failed generation ends the run; a failed profiled
    pass leaves the split empty).
    """

    results: list[RequestResult]
    op_split: list[dict[str, Any]]
    top_ops: dict[str, list[dict[str, Any]]]
    phase_totals: dict[str, dict[str, Any]]
    model_info: dict[str, Any]
    errors: list[str]
    profile_ops: dict[str, pa.Table] = field(default_factory=dict)
    tokens: list[list[int]] = field(default_factory=list)


def resolve_decoder(
    spec: str, *, cache_dir: Path | None = None, config_dir: Path | None = None
) -> DecoderModel:
    """A registry decoder (built, or read from the cache, first) or the path of an ONNX file.

    ``cache_dir``: where built-in models are kept; None is the registry's cache
    (``$AACO_CACHE_DIR`` or the user cache). Raises UsageError for a name that is no
    decoder and InputError for a missing file; whether a file is a decoder with a KV cache
    is checked when its session opens (:class:`Decoder`).
    """
    registry = load_registry(config_dir)
    path = Path(spec).expanduser()
    looks_like_path = spec.endswith(".onnx") or "/" in spec or path.is_file()
    if looks_like_path and spec not in registry.models:
        return _file_model(path.stem, path, spec)
    decoders = sorted(n for n, e in registry.models.items() if e.builder == _PAIR_BUILDER)
    hint = (
        f"built-in decoders: {', '.join(decoders)}; or the path of an ONNX decoder with "
        "past_key_values inputs"
    )
    entry = registry.models.get(spec)
    if entry is None:
        raise UsageError(f"unknown model {spec!r}; {hint}")
    if entry.builder is None:
        assert entry.path is not None
        return _file_model(entry.name, entry.path, f"{spec} ({entry.origin})")
    if entry.builder != _PAIR_BUILDER:
        raise UsageError(f"model {spec!r} is not a decoder; {hint}")
    params = dict(entry.params)
    params.pop("with_past", None)
    if entry.dtype is not None and "dtype" not in params:
        params["dtype"] = entry.dtype
    prefill = _built(entry.builder, {**params, "with_past": False}, cache_dir)
    decode = _built(entry.builder, {**params, "with_past": True}, cache_dir)
    return DecoderModel(
        name=spec,
        kind=KIND_PAIR,
        prefill_path=prefill,
        decode_path=decode,
        builder=entry.builder,
        params=resolve_params(entry.builder, params),
    )


def random_prompt(
    vocab: int, batch: int, prompt_tokens: int, seed: int = 0
) -> np.ndarray[Any, Any]:
    """Seeded random token ids [batch, prompt_tokens] (int64), in [0, vocab)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, size=(batch, prompt_tokens), dtype=np.int64)


def greedy(logits: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The most likely token of each sequence: argmax over the last axis of [batch, vocab]."""
    return np.asarray(logits.argmax(axis=-1), dtype=np.int64)


class Decoder:
    """The ORT sessions of one decoder and what feeding them takes; :meth:`run` generates.

    ``profile_dir``: turn ORT profiling on, writing the profiles there (read them with
    :meth:`end_profiling`). Raises UsageError when the provider is missing or the model is
    not a decoder with a KV cache, InputError when ORT cannot load a file.
    """

    def __init__(
        self,
        model: DecoderModel,
        *,
        provider: str = "CPUExecutionProvider",
        threads: int | None = None,
        profile_dir: Path | None = None,
    ) -> None:
        available = ort.get_available_providers()
        if provider not in available:
            raise UsageError(
                f"provider {provider} is not in this onnxruntime {ort.__version__}; "
                f"available: {', '.join(available)}"
            )
        self.model = model
        self.provider = provider

        def session(path: Path, prefix: str) -> ort.InferenceSession:
            return _session(path, provider, threads, profile_dir, prefix)

        if model.kind == KIND_PAIR:
            self._prefill = session(model.prefill_path, "prefill")
            self._decode = session(model.decode_path, "decode")
        else:
            self._prefill = self._decode = session(model.decode_path, "decoder")
        self.layout = _Layout.of(self._decode, model.decode_path)
        self._prefill_inputs = {i.name for i in self._prefill.get_inputs()}
        self._decode_inputs = {i.name for i in self._decode.get_inputs()}
        prefill_outputs = {o.name for o in self._prefill.get_outputs()}
        missing = [
            n for n in (self.layout.logits, *self.layout.present) if n not in prefill_outputs
        ]
        if missing:
            raise UsageError(f"{model.prefill_path}: the prefill model lacks outputs {missing}")
        self._outputs = [self.layout.logits, *self.layout.present]
        self.vocab = self._vocab()

    def info(self) -> dict[str, Any]:
        """``model_info`` of a run: name, kind, files and the sizes that matter to the loop."""
        params = {k: v for k, v in self.model.params.items() if k != "with_past"}
        return {
            "name": self.model.name,
            "kind": self.model.kind,
            "path": str(self.model.decode_path),
            "prefill_path": str(self.model.prefill_path),
            "decode_path": str(self.model.decode_path),
            "builder": self.model.builder,
            "params": params,
            "layers": len(self.layout.present) // 2,
            "heads": int(params["heads"]) if "heads" in params else self.layout.kv_heads,
            "kv_heads": self.layout.kv_heads,
            "head_dim": self.layout.head_dim,
            "vocab": self.vocab,
            "kv_dtype": np.dtype(self.layout.kv_dtype).name,
            "max_positions": self.model.max_positions,
            "inputs": sorted(self._decode_inputs),
            "provider": self.provider,
        }

    def run(
        self,
        prompt: np.ndarray[Any, Any],
        output_tokens: int,
        clock: Clock = time.perf_counter_ns,
        next_token: NextToken | None = None,
    ) -> Generation:
        """Generate ``output_tokens`` tokens after ``prompt`` [batch, prompt_tokens]: one
        prefill run, then one decode run per further token. ``next_token`` picks each token
        from the last position's logits [batch, vocab]; None is :func:`greedy`."""
        pick = greedy if next_token is None else next_token
        batch = prompt.shape[0]
        tokens = np.zeros((batch, output_tokens), dtype=np.int64)
        stamps: list[tuple[int, int]] = []
        ids = prompt.astype(self.layout.ids_dtype, copy=False)
        past: list[ort.OrtValue] | None = None
        past_len = 0
        for step in range(output_tokens):
            first = step == 0
            sess = self._prefill if first else self._decode
            feeds = self._feeds(
                self._prefill_inputs if first else self._decode_inputs, ids, past_len, past
            )
            start = clock()
            try:
                values = sess.run_with_ort_values(self._outputs, feeds)
            except Exception as exc:  # onnxruntime raises its own pybind11 classes
                return Generation(tokens[:, :step].copy(), stamps, _one_line(exc), clock())
            stamps.append((start, clock()))
            logits = values[0].numpy()
            last = logits[:, -1, :] if logits.ndim == 3 else logits
            nxt = np.asarray(pick(last), dtype=np.int64)
            tokens[:, step] = nxt
            past_len += ids.shape[1]
            past = list(values[1:])
            ids = nxt.reshape(batch, 1).astype(self.layout.ids_dtype)
        return Generation(tokens, stamps)

    def end_profiling(self) -> dict[str, Path]:
        """Stop profiling; the profile file of each session: ``prefill`` and ``decode`` for a
        pair, ``decoder`` for a single model."""
        if self._prefill is self._decode:
            return {"decoder": Path(self._decode.end_profiling())}
        return {
            "prefill": Path(self._prefill.end_profiling()),
            "decode": Path(self._decode.end_profiling()),
        }

    def _feeds(
        self,
        names: set[str],
        ids: np.ndarray[Any, Any],
        past_len: int,
        past: list[ort.OrtValue] | None,
    ) -> dict[str, ort.OrtValue]:
        lay = self.layout
        batch, seq = ids.shape
        arrays: dict[str, np.ndarray[Any, Any]] = {"input_ids": ids}
        if lay.attention_mask is not None and "attention_mask" in names:
            arrays["attention_mask"] = np.ones((batch, past_len + seq), dtype=lay.attention_mask)
        if lay.position_ids is not None and "position_ids" in names:
            positions = np.arange(past_len, past_len + seq, dtype=lay.position_ids)
            arrays["position_ids"] = np.broadcast_to(positions, (batch, seq)).copy()
        if lay.use_cache_branch is not None and lay.use_cache_branch in names:
            arrays[lay.use_cache_branch] = np.array([past is not None])
        feeds = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in arrays.items()}
        if lay.past[0] in names:
            if past is None:
                empty = np.zeros((batch, lay.kv_heads, 0, lay.head_dim), dtype=lay.kv_dtype)
                feeds.update((n, ort.OrtValue.ortvalue_from_numpy(empty)) for n in lay.past)
            else:
                feeds.update(zip(lay.past, past, strict=True))
        return feeds

    def _vocab(self) -> int:
        if "vocab" in self.model.params:
            return int(self.model.params["vocab"])
        logits = next(o for o in self._decode.get_outputs() if o.name == self.layout.logits)
        last = logits.shape[-1] if logits.shape else None
        if isinstance(last, int) and last > 0:
            return last
        vocab = _embedding_rows(self.model.decode_path)
        if vocab is None:
            raise UsageError(
                f"{self.model.decode_path}: cannot tell the vocabulary size (logits dim "
                f"{last!r} and no Gather of input_ids from an embedding table)"
            )
        return vocab


@dataclass(frozen=True)
class _Layout:
    """The names, shapes and types of a decoder's KV cache and of the inputs the loop fills."""

    past: tuple[str, ...]
    present: tuple[str, ...]
    kv_heads: int
    head_dim: int
    kv_dtype: type[np.generic]
    ids_dtype: type[np.generic]
    logits: str = "logits"
    attention_mask: type[np.generic] | None = None
    position_ids: type[np.generic] | None = None
    use_cache_branch: str | None = None

    @classmethod
    def of(cls, session: ort.InferenceSession, path: Path) -> _Layout:
        inputs = {i.name: i for i in session.get_inputs()}
        outputs = {o.name for o in session.get_outputs()}
        found: dict[tuple[int, str], str] = {}
        for name in inputs:
            m = _PAST.match(name)
            if m:
                found[(int(m.group(1)), m.group(2))] = name
        if not found:
            raise UsageError(
                f"{path}: not a decoder with a KV cache: no past_key_values.N.key/value inputs "
                f"(inputs: {', '.join(inputs)})"
            )
        layers = 1 + max(layer for layer, _ in found)
        past = tuple(found.get((i, k), "") for i in range(layers) for k in ("key", "value"))
        if "" in past:
            raise UsageError(f"{path}: KV cache inputs are not numbered 0..{layers - 1} in pairs")
        present = tuple(f"present.{i}.{k}" for i in range(layers) for k in ("key", "value"))
        missing = [n for n in ("logits", *present) if n not in outputs]
        if missing:
            raise UsageError(
                f"{path}: a decoder needs outputs logits and present.N.key/value; missing "
                f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}"
            )
        if "input_ids" not in inputs:
            raise UsageError(f"{path}: a decoder needs an input_ids input")
        known = {"input_ids", *past, *_OPTIONAL_INPUTS}
        unknown = [n for n in inputs if n not in known]
        if unknown:
            raise UsageError(
                f"{path}: inputs the generation loop cannot fill: {', '.join(unknown)}"
            )
        first = inputs[past[0]]
        shape = list(first.shape)
        if len(shape) != 4 or not isinstance(shape[1], int) or not isinstance(shape[3], int):
            raise UsageError(
                f"{path}: cannot tell the KV cache's heads and head size from {past[0]} {shape} "
                "(expected [batch, heads, past_sequence, head_dim] with fixed heads and head_dim)"
            )
        if first.type not in _FLOATS:
            raise UsageError(f"{path}: KV cache type {first.type} is not supported")

        def int_type(name: str) -> type[np.generic] | None:
            if name not in inputs:
                return None
            typ = inputs[name].type
            if typ not in _INTS:
                raise UsageError(f"{path}: input {name} is {typ}, expected int64 or int32")
            return _INTS[typ]

        ids_type = int_type("input_ids")
        assert ids_type is not None
        return cls(
            past=past,
            present=present,
            kv_heads=shape[1],
            head_dim=shape[3],
            kv_dtype=_FLOATS[first.type],
            ids_dtype=ids_type,
            attention_mask=int_type("attention_mask"),
            position_ids=int_type("position_ids"),
            use_cache_branch="use_cache_branch" if "use_cache_branch" in inputs else None,
        )


def generate(
    options: GenerateOptions,
    *,
    cache_dir: Path | None = None,
    config_dir: Path | None = None,
    clock: Clock = time.perf_counter_ns,
) -> GenerateResult:
    """Run ``options.warmup`` then ``options.iterations`` generations, and (``profile``) one
    more with ORT profiling on, in fresh sessions, for the operator split.

    Raises UsageError / InputError for a model that is no decoder or a file that is missing
    or unreadable, before anything is measured. A generation that fails ends the run: its
    requests get status ``error`` and ``errors`` says why.

    >>> r = generate(GenerateOptions("gpt2-tiny", prompt_tokens=16, output_tokens=4))
    >>> len(r.results), len(r.results[-1].chunks)
    (4, 4)
    """
    model = resolve_decoder(options.model, cache_dir=cache_dir, config_dir=config_dir)
    model.check_length(options.prompt_tokens, options.output_tokens)
    decoder = Decoder(model, provider=options.provider, threads=options.threads)
    info = decoder.info()
    prompt = random_prompt(decoder.vocab, options.batch, options.prompt_tokens, options.seed)
    errors: list[str] = []
    results: list[RequestResult] = []
    measured: list[list[tuple[int, int]]] = []
    last: Generation | None = None
    schedule = ["warmup"] * options.warmup + ["measured"] * options.iterations
    for g, phase in enumerate(schedule):
        gen = _timed(decoder, prompt, options.output_tokens, clock)
        results.extend(_requests(gen, g, phase, options))
        if gen.error is not None:
            errors.append(f"generation {g} ({phase}): {gen.error}")
            break
        if phase == "measured":
            measured.append(gen.stamps)
            last = gen
    # the profiled sessions open only once the measured ones are gone: one model's memory
    # at a time
    del decoder
    phase_ops: dict[str, pa.Table] = {}
    profiled: list[tuple[int, int]] = []
    if options.profile and not errors:
        try:
            phase_ops, profiled = _profiled(model, options, prompt, clock)
        except AacoError as exc:  # the measurement stands without its operator split
            errors.append(f"profiled generation: {exc}")
    rows = op_split(phase_ops)
    return GenerateResult(
        results=results,
        op_split=rows,
        top_ops=top_ops(rows, n=5),
        phase_totals=_phase_totals(measured, profiled, phase_ops, options.output_tokens),
        model_info=info,
        errors=errors,
        profile_ops=phase_ops,
        tokens=last.tokens.tolist() if last is not None else [],
    )


def _timed(decoder: Decoder, prompt: np.ndarray[Any, Any], n: int, clock: Clock) -> Generation:
    """One generation with the garbage collector off, as the harness measures iterations."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return decoder.run(prompt, n, clock)
    finally:
        if enabled:
            gc.enable()


def _requests(gen: Generation, g: int, phase: str, options: GenerateOptions) -> list[RequestResult]:
    """One request per sequence of the batch: sent at the prefill's start, a one-token
    content chunk at the end of each run."""
    if gen.stamps:
        sent = gen.stamps[0][0]
    else:
        assert gen.error_ns is not None
        sent = gen.error_ns
    chunks_at = [end for _, end in gen.stamps]
    ok = gen.error is None
    return [
        RequestResult(
            point=0,
            request=g * options.batch + b,
            phase=phase,
            intended_ns=None,
            sent_ns=sent,
            end_ns=chunks_at[-1] if ok else gen.error_ns,
            status="ok" if ok else "error",
            error=gen.error,
            max_tokens=options.output_tokens,
            prompt_tokens=options.prompt_tokens,
            usage_tokens=len(chunks_at),
            chunks=[Chunk(t_ns=t, kind="content", tokens=1) for t in chunks_at],
        )
        for b in range(options.batch)
    ]


def _profiled(
    model: DecoderModel, options: GenerateOptions, prompt: np.ndarray[Any, Any], clock: Clock
) -> tuple[dict[str, pa.Table], list[tuple[int, int]]]:
    """The profiled generation, in sessions of its own, after one warmup generation (when
    ``warmup`` > 0) whose runs the parse skips: its OPS rows per phase and its run stamps."""
    n = options.output_tokens
    warm = 1 if options.warmup else 0
    with tempfile.TemporaryDirectory(prefix="aaco-generate-") as tmp:
        decoder = Decoder(
            model, provider=options.provider, threads=options.threads, profile_dir=Path(tmp)
        )
        gen = Generation(np.zeros((0, 0), np.int64), [])
        for _ in range(warm + 1):
            gen = _timed(decoder, prompt, n, clock)
            if gen.error is not None:
                raise RunError(gen.error)
        files = decoder.end_profiling()
        del decoder
        parts: list[dict[str, pa.Table]] = []
        if "decoder" in files:
            parts.append(_read_profile(files["decoder"], warm, ["prefill"] + ["decode"] * (n - 1)))
        else:
            parts.append(_read_profile(files["prefill"], warm, ["prefill"]))
            if n > 1:
                parts.append(_read_profile(files["decode"], warm, ["decode"] * (n - 1)))
    phase_ops = {p: t for part in parts for p, t in part.items()}
    return {p: phase_ops[p] for p in PHASES if p in phase_ops}, gen.stamps


def _read_profile(path: Path, warm: int, run_phases: list[str]) -> dict[str, pa.Table]:
    """OPS rows per phase of the last of ``warm + 1`` generations in one session's profile."""
    prof = parse_ort_profile(path, skip_runs=warm * len(run_phases))
    expected = (warm + 1) * len(run_phases)
    if prof.run_count_total != expected:
        # ORT stops recording at its event limit (a million events): a long generation of a
        # large model may lose its last runs, and a partial split would mislead
        raise RunError(
            f"{path.name}: the profile holds {prof.run_count_total} runs, expected {expected}"
        )
    return split_phases(prof.ops, run_phases)


def _phase_totals(
    measured: Sequence[Sequence[tuple[int, int]]],
    profiled: Sequence[tuple[int, int]],
    phase_ops: Mapping[str, pa.Table],
    output_tokens: int,
) -> dict[str, dict[str, Any]]:
    ops_ns = phase_op_ns(phase_ops)
    out: dict[str, dict[str, Any]] = {}
    for phase, runs, pick in (
        ("prefill", 1, slice(0, 1)),
        ("decode", output_tokens - 1, slice(1, None)),
    ):
        walls = [end - start for gen in measured for start, end in gen[pick]]
        prof_wall = sum(end - start for start, end in profiled[pick])
        op = ops_ns.get(phase) if phase in phase_ops else None
        out[phase] = {
            "runs_per_generation": runs,
            "wall_ms_per_run": statistics.median(walls) / 1e6 if walls else None,
            "profiled_wall_ms_per_run": prof_wall / runs / 1e6 if profiled and runs else None,
            "ops_ms_per_run": op / runs / 1e6 if op is not None and runs else None,
            "ops_share_of_wall": op / prof_wall if op is not None and prof_wall else None,
        }
    return out


def _session(
    path: Path, provider: str, threads: int | None, profile_dir: Path | None, prefix: str
) -> ort.InferenceSession:
    so = ort.SessionOptions()
    if threads is not None:
        so.intra_op_num_threads = threads
    if profile_dir is not None:
        so.enable_profiling = True
        so.profile_file_prefix = os.fspath(profile_dir / prefix)
    try:
        return ort.InferenceSession(os.fspath(path), so, providers=[provider])
    except Exception as exc:  # onnxruntime raises its own pybind11 classes
        raise InputError(f"{path}: onnxruntime cannot load it: {_one_line(exc)}") from None


def _file_model(name: str, path: Path, given: str) -> DecoderModel:
    if not path.exists():
        raise InputError(f"model file not found: {given}")
    if path.is_dir():
        raise InputError(f"{given}: is a directory, expected an .onnx file")
    path = path.resolve()
    return DecoderModel(name=name, kind=KIND_PAST, prefill_path=path, decode_path=path)


def _built(builder: str, params: Mapping[str, Any], cache_dir: Path | None) -> Path:
    """The built model's file: the registry's cache, or ``cache_dir`` under the same name."""
    if cache_dir is None:
        return build_cached(builder, params)
    path = cache_dir / f"{builder}-{cache_key(builder, params)}.onnx"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(build(builder, params).SerializeToString())
            os.replace(tmp, path)  # atomic: a concurrent reader never sees half a model
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def _embedding_rows(path: Path) -> int | None:
    """Rows of the initializer a Gather indexes with ``input_ids``: the vocabulary size."""
    graph = onnx.load(os.fspath(path), load_external_data=False).graph
    sizes = {t.name: list(t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] == "input_ids":
            dims = sizes.get(node.input[0])
            if dims:
                return int(dims[0])
    return None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
