"""The decoder generation loop of ``aaco llm run`` over real ORT sessions of small decoders."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pyarrow as pa
import pytest

from aaco.analysis.serving import serving_tables
from aaco.errors import InputError, UsageError
from aaco.generate import (
    KIND_PAIR,
    KIND_PAST,
    Decoder,
    GenerateOptions,
    generate,
    op_split,
    random_prompt,
    resolve_decoder,
    split_phases,
    top_ops,
)
from aaco.models.registry import build, build_cached
from aaco.session.schema import OPS
from aaco.testing import FakeClock

TINY = "gpt2-tiny"  # registry entry: 2 layers, hidden 128, 4 heads, vocab 1000, 128 positions
TINY_PARAMS = {"layers": 2, "hidden": 128, "heads": 4, "vocab": 1000, "n_positions": 128}


def _options(**kw: Any) -> GenerateOptions:
    base: dict[str, Any] = {
        "model": TINY,
        "prompt_tokens": 8,
        "output_tokens": 4,
        "warmup": 1,
        "iterations": 2,
        "threads": 1,
        "profile": False,
    }
    base.update(kw)
    return GenerateOptions(**base)


def _recorder(vocab: int, seed: int = 1) -> tuple[Callable[[Any], Any], list[Any]]:
    """A next-token picker that keeps the logits it saw and picks seeded random tokens: a
    random-weight GPT-2 repeats one token greedily, which would hide a wrong KV cache."""
    seen: list[Any] = []
    rng = np.random.default_rng(seed)

    def pick(logits: Any) -> Any:
        seen.append(np.array(logits))
        return rng.integers(0, vocab, size=logits.shape[0])

    return pick, seen


def _full_logits(path: Path, sequence: Any) -> Any:
    """Last-position logits of the prefill model over the whole sequence, recomputed."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"input_ids": sequence})[0][:, -1, :]


def _optimum_style(path: Path) -> Path:
    """The built-in decode model rewritten the way optimum exports decoders: inputs
    ``past_key_values.{i}.key/value``, ``attention_mask`` [batch, total] and ``position_ids``
    [batch, sequence] (which now index the position embedding)."""
    model = build("gpt2", {**TINY_PARAMS, "with_past": True})
    graph = model.graph
    rename = {i.name: i.name.replace("past.", "past_key_values.") for i in graph.input}
    for inp in graph.input:
        inp.name = rename[inp.name]
    for node in graph.node:
        node.input[:] = [rename.get(x, x) for x in node.input]
        if node.op_type == "Gather" and node.input[0] == "transformer.wpe.weight":
            node.input[1] = "position_ids"
    graph.input.extend(
        [
            onnx.helper.make_tensor_value_info(
                "attention_mask", onnx.TensorProto.INT64, ["batch", "total_sequence"]
            ),
            onnx.helper.make_tensor_value_info(
                "position_ids", onnx.TensorProto.INT64, ["batch", "sequence"]
            ),
        ]
    )
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def optimum_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _optimum_style(tmp_path_factory.mktemp("optimum") / "decoder_model.onnx")


# -- timing and requests ----------------------------------------------------------------------


def test_requests_are_stamped_by_the_clock_around_each_run() -> None:
    clock = FakeClock(start_ns=0, step_ns=1_000)  # one reading before and one after each run
    result = generate(_options(batch=2), clock=clock)
    assert result.errors == []
    assert [r.phase for r in result.results] == ["warmup"] * 2 + ["measured"] * 4
    assert [r.request for r in result.results] == list(range(6))
    requests, chunks = serving_tables(result.results)
    rows = requests.to_pylist()
    for row in rows:
        assert row["ttft_ns"] == 1_000  # the prefill run: sent at its start, token at its end
        assert row["output_tokens"] == 4 and row["chunks"] == 4
        assert row["tpot_ns"] == 2_000  # each decode step: 1 us run + 1 us until the next
        assert row["e2e_ns"] == 7_000
        assert row["max_tokens"] == 4 and row["prompt_tokens"] == 8
    # the two sequences of one generation share its runs
    assert rows[2]["sent_ns"] == rows[3]["sent_ns"] != rows[4]["sent_ns"]
    assert chunks.num_rows == 6 * 4
    assert set(chunks.column("kind").to_pylist()) == {"content"}
    totals = result.phase_totals
    assert totals["prefill"]["wall_ms_per_run"] == pytest.approx(0.001)
    assert totals["decode"]["wall_ms_per_run"] == pytest.approx(0.001)
    assert totals["decode"]["runs_per_generation"] == 3


def test_ttft_is_the_prefill_run_on_the_real_clock() -> None:
    readings: list[int] = []

    def spy() -> int:
        readings.append(time.perf_counter_ns())
        return readings[-1]

    n = 5
    result = generate(_options(output_tokens=n, warmup=0, iterations=3), clock=spy)
    assert len(readings) == 3 * 2 * n
    requests, _ = serving_tables(result.results)
    for g, row in enumerate(requests.to_pylist()):
        start, end = readings[2 * n * g], readings[2 * n * g + 1]
        assert row["sent_ns"] == start
        assert row["ttft_ns"] == end - start > 0
        assert row["e2e_ns"] == readings[2 * n * (g + 1) - 1] - start
        assert row["output_tokens"] == n
    prefill = sorted(readings[2 * n * g + 1] - readings[2 * n * g] for g in range(3))
    assert result.phase_totals["prefill"]["wall_ms_per_run"] == prefill[1] / 1e6


def test_batch_gives_one_request_per_sequence() -> None:
    result = generate(_options(batch=3, warmup=0, iterations=2, output_tokens=3))
    measured = [r for r in result.results if r.phase == "measured"]
    assert len(measured) == 2 * 3
    assert all(len(r.chunks) == 3 and r.usage_tokens == 3 for r in measured)
    assert len(result.tokens) == 3 and all(len(t) == 3 for t in result.tokens)
    prompt = random_prompt(1000, 3, 8, seed=0)
    assert len({tuple(row) for row in prompt.tolist()}) == 3  # distinct prompts


# -- KV cache correctness ---------------------------------------------------------------------


def test_builtin_pair_decode_matches_full_recompute() -> None:
    model = resolve_decoder(TINY)
    assert model.kind == KIND_PAIR and model.prefill_path != model.decode_path
    decoder = Decoder(model, threads=1)
    prompt = random_prompt(decoder.vocab, 2, 6, seed=3)
    pick, seen = _recorder(decoder.vocab)
    gen = decoder.run(prompt, 6, next_token=pick)
    assert gen.error is None and gen.tokens.shape == (2, 6)
    # step k's logits are those of the prefill model over the prompt and the first k tokens
    for k, logits in enumerate(seen):
        sequence = np.concatenate([prompt, gen.tokens[:, :k]], axis=1)
        np.testing.assert_allclose(logits, _full_logits(model.prefill_path, sequence), atol=1e-4)
    # and the greedy tokens are those of re-running the full prefill on the growing sequence
    greedy = decoder.run(prompt, 4)
    sequence = prompt
    for k in range(4):
        token = _full_logits(model.prefill_path, sequence).argmax(axis=-1)
        assert greedy.tokens[:, k].tolist() == token.tolist()
        sequence = np.concatenate([sequence, token[:, None]], axis=1)


def test_past_key_values_model_matches_the_pair(optimum_file: Path) -> None:
    single = resolve_decoder(str(optimum_file))
    assert single.kind == KIND_PAST and single.prefill_path == single.decode_path
    one = Decoder(single, threads=1)
    pair = Decoder(resolve_decoder(TINY), threads=1)
    assert one.info()["kv_heads"] == 4 and one.info()["head_dim"] == 32
    assert one.vocab == 1000 and one.info()["layers"] == 2
    prompt = random_prompt(1000, 2, 7, seed=5)
    pick_one, seen_one = _recorder(1000)
    pick_pair, seen_pair = _recorder(1000)
    got = one.run(prompt, 5, next_token=pick_one)
    want = pair.run(prompt, 5, next_token=pick_pair)
    assert got.error is None and got.tokens.tolist() == want.tokens.tolist()
    for a, b in zip(seen_one, seen_pair, strict=True):  # same weights, so the same logits
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_generate_on_a_past_key_values_file(optimum_file: Path) -> None:
    result = generate(_options(model=str(optimum_file), output_tokens=3, profile=True))
    assert result.errors == []
    assert result.model_info["kind"] == KIND_PAST
    assert result.model_info["path"] == str(optimum_file.resolve())
    assert {r["phase"] for r in result.op_split} == {"prefill", "decode"}
    decode_calls = {r["calls"] for r in result.op_split if r["phase"] == "decode"}
    assert decode_calls == {2}  # one profile, its runs split: 2 decode steps per generation


def test_a_failing_step_ends_the_run_with_error_requests(optimum_file: Path) -> None:
    # The file does not say how many positions it embeds: the decode step at position 128
    # indexes past the position table and ORT refuses it.
    result = generate(_options(model=str(optimum_file), prompt_tokens=120, output_tokens=12))
    assert len(result.errors) == 1 and "generation 0 (warmup)" in result.errors[0]
    assert len(result.results) == 1
    failed = result.results[0]
    assert failed.status == "error" and failed.error
    assert len(failed.chunks) == 9  # the prefill, then positions 120 .. 127
    assert failed.end_ns is not None and failed.end_ns >= failed.chunks[-1].t_ns
    requests, _ = serving_tables(result.results)
    assert requests.column("e2e_ns").to_pylist() == [None]
    assert result.op_split == [] and result.tokens == []


def _export_tiny_transformers_gpt2(path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.cache_utils import DynamicCache

    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0
    )
    config.eos_token_id = 0
    torch.manual_seed(0)
    lm = transformers.GPT2LMHeadModel(config).eval()

    module: Any = torch.nn.Module

    class Flat(module):  # type: ignore[misc]
        """Flat KV tensors in and out, as optimum's ONNX export has them."""

        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(
            self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any
        ) -> Any:
            cache = DynamicCache()
            for i in range(len(past) // 2):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.lm(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
            )
            flat = [out.logits]
            for layer in out.past_key_values.layers:
                flat += [layer.keys, layer.values]
            return tuple(flat)

    kv = [f"past_key_values.{i}.{k}" for i in range(2) for k in ("key", "value")]
    present = [f"present.{i}.{k}" for i in range(2) for k in ("key", "value")]
    axes: dict[str, dict[int, str]] = {
        "input_ids": {0: "batch_size", 1: "sequence_length"},
        "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
        "position_ids": {0: "batch_size", 1: "sequence_length"},
        "logits": {0: "batch_size", 1: "sequence_length"},
    }
    axes.update({n: {0: "batch_size", 2: "past_sequence_length"} for n in kv})
    axes.update({n: {0: "batch_size", 2: "total_sequence_length"} for n in present})
    past = [torch.zeros(1, 2, 3, 16) for _ in kv]
    args = (
        torch.zeros(1, 2, dtype=torch.long),
        torch.ones(1, 5, dtype=torch.long),
        torch.arange(3, 5)[None],
        *past,
    )
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's tracer warnings
        torch.onnx.export(
            Flat(),
            args,
            str(path),
            input_names=["input_ids", "attention_mask", "position_ids", *kv],
            output_names=["logits", *present],
            dynamic_axes=axes,
            dynamo=False,
            opset_version=17,
        )


def test_a_transformers_export_runs_with_a_correct_cache(tmp_path: Path) -> None:
    path = tmp_path / "gpt2-hf.onnx"
    _export_tiny_transformers_gpt2(path)
    model = resolve_decoder(str(path))
    decoder = Decoder(model, threads=1)
    assert decoder.vocab == 100 and decoder.info()["kv_heads"] == 2
    prompt = random_prompt(100, 2, 5, seed=2)
    pick, seen = _recorder(100)
    gen = decoder.run(prompt, 4, next_token=pick)
    assert gen.error is None
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    empty = np.zeros((2, 2, 0, 16), np.float32)
    for k, logits in enumerate(seen):
        sequence = np.concatenate([prompt, gen.tokens[:, :k]], axis=1)
        n = sequence.shape[1]
        feeds = {
            "input_ids": sequence,
            "attention_mask": np.ones((2, n), np.int64),
            "position_ids": np.tile(np.arange(n), (2, 1)),
        }
        feeds.update({i.name: empty for i in session.get_inputs() if i.name.startswith("past")})
        full = session.run(["logits"], feeds)[0][:, -1, :]
        np.testing.assert_allclose(logits, full, atol=1e-4)


# -- the operator split -----------------------------------------------------------------------


def test_prefill_and_decode_have_different_top_ops() -> None:
    n = 6
    result = generate(_options(prompt_tokens=64, output_tokens=n, iterations=1, profile=True))
    assert result.errors == []
    split = result.op_split
    assert [r["phase"] for r in split] == sorted(
        (r["phase"] for r in split), key=("prefill", "decode").index
    )
    by_phase = {p: [r for r in split if r["phase"] == p] for p in ("prefill", "decode")}
    for rows in by_phase.values():
        assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert {r["calls"] for r in by_phase["prefill"]} == {1}  # one prefill run per generation
    assert {r["calls"] for r in by_phase["decode"]} == {n - 1}
    # only a decode step appends to the KV cache (Concat); the prefill model has none
    assert "Concat" in {r["op_type"] for r in by_phase["decode"]}
    assert "Concat" not in {r["op_type"] for r in by_phase["prefill"]}

    def share(phase: str, op_type: str) -> float:
        return float(sum(r["share"] for r in by_phase[phase] if r["op_type"] == op_type))

    # 64 tokens through every weight matrix against one: MatMul weighs more in the prefill
    assert share("prefill", "MatMul") > share("decode", "MatMul")
    assert result.top_ops["prefill"][0]["op_type"] == "MatMul"
    totals = result.phase_totals
    assert totals["prefill"]["ops_ms_per_run"] > totals["decode"]["ops_ms_per_run"] > 0
    for phase in ("prefill", "decode"):
        assert 0 < totals[phase]["ops_share_of_wall"] <= 1
    assert set(result.profile_ops) == {"prefill", "decode"}
    assert result.profile_ops["decode"].column("iteration").to_pylist()[-1] == n - 2


def _ops(rows: list[tuple[int, str, str, int]]) -> pa.Table:
    n = len(rows)
    data: dict[str, Any] = {c: [None] * n for c in OPS.column_names}
    data["source"] = ["onnxruntime"] * n
    data["iteration"] = [r[0] for r in rows]
    data["node_name"] = [r[1] for r in rows]
    data["op_type"] = [r[2] for r in rows]
    data["dur_ns"] = [r[3] for r in rows]
    return OPS.from_columns(data)


def test_split_tags_runs_and_ranks_ops() -> None:
    ops = _ops(
        [
            (0, "mm", "MatMul", 9_000),
            (0, "cat", "Concat", 1_000),
            (1, "mm", "MatMul", 1_000),
            (1, "cat", "Concat", 3_000),
            (2, "mm", "MatMul", 1_000),
            (2, "cat", "Concat", 3_000),
            (3, "mm", "MatMul", 5),  # a run beyond the generation: dropped
        ]
    )
    phases = split_phases(ops, ["prefill", "decode", "decode"])
    assert phases["decode"].column("iteration").to_pylist() == [0, 0, 1, 1]
    rows = op_split(phases)
    assert rows[0] == {
        "phase": "prefill",
        "op_type": "MatMul",
        "node": "mm",
        "calls": 1,
        "total_us": 9.0,
        "share": 0.9,
    }
    assert [(r["phase"], r["node"], r["calls"], r["share"]) for r in rows[2:]] == [
        ("decode", "cat", 2, 0.75),
        ("decode", "mm", 2, 0.25),
    ]
    top = top_ops(rows, n=1)
    assert top["decode"] == [
        {"op_type": "Concat", "calls": 2, "nodes": 1, "total_us": 6.0, "share": 0.75}
    ]
    assert split_phases(OPS.empty(), ["prefill"])["prefill"].num_rows == 0
    assert op_split({"prefill": OPS.empty()}) == []


# -- errors -----------------------------------------------------------------------------------


@pytest.fixture
def text_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "notes.onnx"
    path.write_text("not a model\n")
    yield path


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prompt_tokens": 0}, "--prompt-tokens"),
        ({"output_tokens": -1}, "--output-tokens"),
        ({"batch": 0}, "--batch"),
        ({"iterations": 0}, "--iterations"),
        ({"warmup": -1}, "--warmup"),
        ({"threads": 0}, "--threads"),
        ({"model": ""}, "--model"),
    ],
)
def test_bad_options_are_usage_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        _options(**kwargs)


def test_bad_models_are_usage_errors(tmp_path: Path, text_file: Path) -> None:
    with pytest.raises(InputError, match="model file not found"):
        generate(_options(model=str(tmp_path / "missing.onnx")))
    with pytest.raises(InputError, match="onnxruntime cannot load it"):
        generate(_options(model=str(text_file)))
    with pytest.raises(UsageError, match="not a decoder with a KV cache"):
        generate(_options(model=str(build_cached("mlp"))))
    with pytest.raises(UsageError, match="'mlp' is not a decoder; built-in decoders: gpt2"):
        generate(_options(model="mlp"))
    with pytest.raises(UsageError, match="unknown model 'gpt5'"):
        generate(_options(model="gpt5"))
    with pytest.raises(UsageError, match="need 135 positions; gpt2-tiny has 128"):
        generate(_options(prompt_tokens=120, output_tokens=16))
    with pytest.raises(UsageError, match="provider NoSuchExecutionProvider"):
        generate(_options(provider="NoSuchExecutionProvider"))
    for error in (InputError, UsageError):
        assert issubclass(error, UsageError)


def test_cache_dir_holds_the_built_pair(tmp_path: Path) -> None:
    model = resolve_decoder(TINY, cache_dir=tmp_path)
    assert model.prefill_path.parent == model.decode_path.parent == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [model.prefill_path.name, model.decode_path.name]
    )
    assert resolve_decoder(TINY, cache_dir=tmp_path) == model  # read back, not rebuilt
