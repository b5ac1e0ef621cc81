"""What ``aaco llm bench`` sends: synthetic prompts of a target token length (measured with
the server's tokenizer when one is given) or the prompts of a JSONL dataset, and output
lengths drawn around a mean.

A tokenizer is a ``tokenizer.json`` (or a directory holding one) read with the Hugging Face
``tokenizers`` library, an optional dependency. Without one, a synthetic prompt is sized in
words, which the report says; token counts then come from the server's usage alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aaco.errors import UsageError
from aaco.serving.client import RequestSpec

__all__ = ["Tokenizer", "load_dataset", "load_tokenizer", "make_plan"]

_WORDS = (
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "quietly",
    "judge",
    "boxing",
    "matches",
    "in",
    "the",
    "old",
    "city",
    "library",
    "near",
    "river",
    "bank",
    "under",
    "gray",
    "cloudy",
    "autumn",
    "sky",
    "and",
    "every",
    "student",
    "reads",
    "long",
    "books",
    "about",
    "history",
    "science",
    "music",
    "art",
    "travel",
    "food",
)


class Tokenizer:
    """A Hugging Face fast tokenizer (``tokenizers``), for counting tokens."""

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer as HFTokenizer
        except ImportError:
            raise UsageError(
                "--tokenizer needs the 'tokenizers' package: pip install 'aaco[llm]'"
            ) from None
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise UsageError(f"--tokenizer: no tokenizer.json at {path}")
        try:
            self._tok = HFTokenizer.from_file(str(file))
        except Exception as exc:  # the library raises plain Exception subclasses
            raise UsageError(f"--tokenizer: cannot read {file}: {exc}") from None
        self.path = file

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def counts(self, texts: list[str]) -> list[int]:
        encs = self._tok.encode_batch(texts, add_special_tokens=False)
        return [len(e.ids) for e in encs]


def load_tokenizer(path: str | None) -> Tokenizer | None:
    return Tokenizer(Path(path)) if path else None


@dataclass(frozen=True)
class DatasetRow:
    prompt: str
    max_tokens: int | None


def load_dataset(path: Path, limit: int = 1_000_000) -> list[DatasetRow]:
    """Prompts of a JSONL file: each line an object with ``prompt`` (or ``text``, or chat
    ``messages`` whose contents are joined) and optionally ``max_tokens`` /
    ``output_tokens``. A line that is not such an object is skipped; none usable is an
    error."""
    if not path.is_file():
        raise UsageError(f"--dataset: no file {path}")
    rows: list[DatasetRow] = []
    skipped = 0
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if len(rows) >= limit:
                break
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                skipped += 1
                continue
            prompt = _prompt_of(obj)
            if prompt is None:
                skipped += 1
                continue
            out = obj.get("max_tokens", obj.get("output_tokens"))
            rows.append(DatasetRow(prompt, int(out) if isinstance(out, int) and out > 0 else None))
    if not rows:
        raise UsageError(f"--dataset {path}: no line has a 'prompt' ({skipped} skipped)")
    return rows


def _prompt_of(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    for key in ("prompt", "text"):
        if isinstance(obj.get(key), str) and obj[key]:
            return str(obj[key])
    msgs = obj.get("messages")
    if isinstance(msgs, list):
        parts = [m.get("content") for m in msgs if isinstance(m, dict)]
        text = "\n".join(p for p in parts if isinstance(p, str))
        return text or None
    return None


def _lengths(mean: int, spread: float, n: int, rng: np.random.Generator) -> list[int]:
    """n lengths around ``mean``: uniform within +-spread (a fraction), at least 1."""
    if spread <= 0:
        return [mean] * n
    lo, hi = max(1, round(mean * (1 - spread))), max(1, round(mean * (1 + spread)))
    return [int(v) for v in rng.integers(lo, hi + 1, size=n)]


def _synthetic(
    target: int, tokenizer: Tokenizer | None, rng: np.random.Generator
) -> tuple[str, int | None]:
    words = [str(w) for w in rng.choice(_WORDS, size=max(1, target))]
    if tokenizer is None:
        return " ".join(words), None
    # grow or trim word by word until the tokenizer says target (or just over)
    text = " ".join(words)
    n = tokenizer.count(text)
    while n > target and len(words) > 1:
        words.pop()
        text = " ".join(words)
        n = tokenizer.count(text)
    while n < target:
        words.append(str(rng.choice(_WORDS)))
        text = " ".join(words)
        n = tokenizer.count(text)
    return text, n


def make_plan(
    n: int,
    *,
    input_tokens: int = 128,
    input_spread: float = 0.0,
    output_tokens: int = 128,
    output_spread: float = 0.0,
    tokenizer: Tokenizer | None = None,
    dataset: list[DatasetRow] | None = None,
    seed: int = 0,
) -> tuple[Callable[[int], RequestSpec], dict[str, Any]]:
    """A function giving request i's :class:`RequestSpec`, and a description of the plan.

    Requests are drawn up front (``n`` of them, reused round-robin beyond ``n``), so that a
    duration-bounded run does no tokenizer work while it measures.
    """
    if input_tokens < 1 or output_tokens < 1:
        raise UsageError("--input-tokens and --output-tokens must be >= 1")
    rng = np.random.default_rng(seed)
    n = max(1, min(n, 10_000))
    outs = _lengths(output_tokens, output_spread, n, rng)
    specs: list[RequestSpec] = []
    if dataset:
        for i in range(n):
            row = dataset[i % len(dataset)]
            count = tokenizer.count(row.prompt) if tokenizer else None
            specs.append(RequestSpec(i, row.prompt, row.max_tokens or outs[i], count))
        source = "dataset"
    else:
        ins = _lengths(input_tokens, input_spread, n, rng)
        for i in range(n):
            text, count = _synthetic(ins[i], tokenizer, rng)
            specs.append(RequestSpec(i, text, outs[i], count))
        source = "synthetic"
    describe = {
        "source": source,
        "input_tokens": input_tokens,
        "input_spread": input_spread,
        "output_tokens": output_tokens,
        "output_spread": output_spread,
        "sized_with": str(tokenizer.path) if tokenizer else "words (no --tokenizer)",
        "distinct_prompts": len(specs),
    }

    def plan(i: int) -> RequestSpec:
        s = specs[i % len(specs)]
        return s if s.index == i else RequestSpec(i, s.prompt, s.max_tokens, s.prompt_tokens)

    return plan, describe
