"""Check ``aaco run`` on ONNX files nobody on this project wrote.

Requirement under test: ``aaco run --model some_model.onnx`` works on ONNX files produced by
other people's exporters and tools (convolutional, transformer, quantized int8, dynamic shapes),
and per-node time covers the measured latency within 15 % (the rest is reported as overhead).

Two stages, two interpreters:

1. ``export`` builds the foreign models with a *separate* venv that has torch, transformers,
   onnx, onnxruntime and onnxscript (never aaco's venv; no model hub is touched, every model is
   built from its default config with random weights)::

       python3.11 -m venv /tmp/foreign-venv
       /tmp/foreign-venv/bin/pip install torch==2.13.0 transformers onnx onnxruntime onnxscript
       python bench/foreign_models.py export --venv /tmp/foreign-venv

   It re-executes this file with ``/tmp/foreign-venv/bin/python`` and writes into the cache
   folder (default ``/tmp/aaco-foreign-models``, or ``$AACO_FOREIGN_MODELS``):

   * ``bert_base.onnx`` (+ ``.onnx.data``)  HF BertModel, torch.onnx dynamo exporter
   * ``bert_base_ts.onnx``                  HF BertModel, torch.onnx TorchScript exporter
   * ``gpt2_small.onnx`` (+ ``.onnx.data``)  HF GPT2LMHeadModel, TorchScript exporter, which
                                            fails (aten::diff) -> falls back to dynamo
   * ``resnet50.onnx`` (+ ``.onnx.data``)   HF ResNetModel, torch.onnx dynamo exporter
   * ``convnext_tiny.onnx``                 HF ConvNextModel, torch.onnx TorchScript exporter
   * ``bert_base_int8_dynamic.onnx``        onnxruntime quantize_dynamic (MatMulInteger)
   * ``resnet50_int8_qdq.onnx``             onnxruntime quantize_static, QDQ, random calibration
   * ``manifest.json``                      exporter actually used, ir_version fixes, timings

   Existing files are kept (``--force`` rebuilds). All exports use opset 17 with dynamic batch
   (and sequence) axes; files whose ``ir_version`` exceeds 10 are rewritten to 10 because
   onnxruntime 1.31 rejects newer IR versions (recorded in the manifest).

2. ``run`` profiles every model with aaco's own CLI (``aaco run ... --report json``), plus the
   ONNX Model Zoo "light" models shipped inside the onnx wheel
   (``onnx/backend/test/data/light/light_*.onnx``, ir_version 3, initializers listed as graph
   inputs), and prints a markdown table::

       /work/main/.venv/bin/python bench/foreign_models.py run
       /work/main/.venv/bin/python bench/foreign_models.py run --models bert --json

   ``--models`` keeps the cases whose name contains any of the given substrings. Nothing from
   aaco is imported; aaco is reached only through its CLI (``--aaco``, default: the ``aaco``
   next to this interpreter). ``list`` prints the cases. The tolerance is judged on aaco's
   same-pass coverage (node time / ``session.run`` wall time of the profiled runs themselves);
   the table also shows coverage against the separately measured p50, node time / ORT run time,
   and profiled / measured p50: when the latter is far from 1 the two passes ran at different
   speeds (a loaded machine, or the profiler's per-node cost on many small nodes).
   Exit status 0 only when every case completed within the 15 % tolerance.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_CACHE = Path(os.environ.get("AACO_FOREIGN_MODELS", "/tmp/aaco-foreign-models"))
COVERAGE_TOLERANCE = 0.15
LIGHT_ORIGIN = "ONNX Model Zoo light (Caffe2 conv., onnx wheel)"


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One ``aaco run`` invocation: a model file plus the arguments it needs."""

    name: str
    model: str  # file name in the cache, or "light:<name>" for the onnx wheel's light models
    kind: str
    args: tuple[str, ...] = ()
    iterations: int = 10
    warmup: int = 3
    profile_iterations: int = 5


BERT_ARGS = ("--shape", "input_ids=1x128", "--shape", "attention_mask=1x128")

CASES: tuple[Case, ...] = (
    # exported here from HF configs with random weights
    Case("bert_base 1x128", "bert_base.onnx", "transformer, dynamic", BERT_ARGS, 10),
    Case(
        "bert_base 1x64",
        "bert_base.onnx",
        "transformer, dynamic",
        ("--shape", "input_ids=1x64", "--shape", "attention_mask=1x64"),
        20,
    ),
    Case(
        "bert_base 4x128",
        "bert_base.onnx",
        "transformer, dynamic",
        ("--shape", "input_ids=4x128", "--shape", "attention_mask=4x128"),
        5,
        2,
        3,
    ),
    Case(
        "bert_base --batch 2, ids 2x96",
        "bert_base.onnx",
        "transformer, dynamic",
        ("--batch", "2", "--shape", "input_ids=2x96"),
        8,
    ),
    Case(
        "bert_base (TorchScript) 1x128", "bert_base_ts.onnx", "transformer, dynamic", BERT_ARGS, 10
    ),
    Case(
        "gpt2_small 1x128",
        "gpt2_small.onnx",
        "transformer, dynamic",
        ("--shape", "input_ids=1x128"),
        10,
    ),
    Case("resnet50 (HF)", "resnet50.onnx", "conv, dynamic", (), 15),
    Case("resnet50 (HF) --batch 4", "resnet50.onnx", "conv, dynamic", ("--batch", "4"), 6, 2, 3),
    Case("convnext_tiny (HF)", "convnext_tiny.onnx", "conv, dynamic", (), 15),
    Case(
        "bert_base int8 dynamic 1x128",
        "bert_base_int8_dynamic.onnx",
        "int8, transformer",
        BERT_ARGS,
        15,
    ),
    Case("resnet50 int8 QDQ", "resnet50_int8_qdq.onnx", "int8, conv", (), 15),
    # ONNX Model Zoo light models from the onnx wheel
    Case("light_bvlc_alexnet", "light:bvlc_alexnet", "conv", (), 20),
    Case("light_densenet121", "light:densenet121", "conv", (), 15),
    Case("light_inception_v1", "light:inception_v1", "conv", (), 20),
    Case("light_inception_v2", "light:inception_v2", "conv", (), 20),
    Case("light_resnet50", "light:resnet50", "conv", (), 15),
    Case("light_shufflenet", "light:shufflenet", "conv", (), 30),
    Case("light_squeezenet", "light:squeezenet", "conv", (), 30),
    Case("light_vgg19", "light:vgg19", "conv", (), 6, 2, 3),
    Case("light_zfnet512", "light:zfnet512", "conv", (), 15),
)

EXPORT_ORIGINS: dict[str, str] = {
    "bert_base.onnx": "HF BertModel -> torch.onnx",
    "bert_base_ts.onnx": "HF BertModel -> torch.onnx",
    "gpt2_small.onnx": "HF GPT2LMHeadModel -> torch.onnx",
    "resnet50.onnx": "HF ResNetModel -> torch.onnx",
    "convnext_tiny.onnx": "HF ConvNextModel -> torch.onnx",
    "bert_base_int8_dynamic.onnx": "ORT quantize_dynamic (BERT)",
    "resnet50_int8_qdq.onnx": "ORT quantize_static QDQ (ResNet)",
}


# --------------------------------------------------------------------------- export stage
# Everything below in this section runs inside the foreign venv (torch, transformers, ...).


def _fix_ir_version(path: Path, notes: list[str]) -> None:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    if model.ir_version > 10:
        notes.append(f"{path.name}: ir_version {model.ir_version} -> 10")
        model.ir_version = 10
        onnx.save(model, str(path))


def _torch_export(
    module: Any,
    inputs: tuple[Any, ...],
    path: Path,
    input_names: list[str],
    output_names: list[str],
    dynamic_axes: dict[str, dict[int, str]],
    prefer_dynamo: bool,
    notes: list[str],
) -> str:
    """Export with the preferred torch.onnx exporter, falling back to the other one."""
    import onnx
    import torch

    errors: list[str] = []
    # opset 17 first; 18 when the dynamo exporter's down-conversion 18 -> 17 yields an invalid
    # model (seen with GPT-2: Split keeps the opset-18 attribute num_outputs).
    attempts = [
        (prefer_dynamo, 17),
        (prefer_dynamo, 18),
        (not prefer_dynamo, 17),
        (not prefer_dynamo, 18),
    ]
    for dynamo, opset in attempts:
        label = "dynamo" if dynamo else "TorchScript"
        for stale in (path, path.with_name(path.name + ".data")):
            stale.unlink(missing_ok=True)
        try:
            torch.onnx.export(
                module,
                inputs,
                str(path),
                input_names=input_names,
                output_names=output_names,
                dynamic_axes=dynamic_axes,
                opset_version=opset,
                dynamo=dynamo,
            )
            onnx.checker.check_model(str(path), full_check=True)
        except Exception as exc:  # record and try the next attempt
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            errors.append(f"{label} opset {opset}: {type(exc).__name__}: {first_line[:300]}")
            continue
        if errors:
            notes.append(f"{path.name}: {label} exporter, opset {opset}, after {errors}")
        return f"torch {torch.__version__} {label} exporter"
    raise RuntimeError(f"{path.name}: both exporters failed: {errors}")


def _export_models(cache: Path, force: bool, only: list[str]) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import numpy as np
    import onnx
    import torch
    import transformers

    cache.mkdir(parents=True, exist_ok=True)
    manifest_path = cache / "manifest.json"
    manifest: dict[str, Any] = (
        json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    )
    torch.manual_seed(0)

    def wanted(name: str) -> bool:
        return not only or any(s in name for s in only)

    def build(name: str, fn: Any) -> None:
        path = cache / name
        if not wanted(name) or (path.exists() and not force):
            print(f"[export] {name}: {'kept' if path.exists() else 'skipped'}", flush=True)
            return
        notes: list[str] = []
        t0 = time.perf_counter()
        print(f"[export] {name} ...", flush=True)
        try:
            tool = fn(path, notes)
            _fix_ir_version(path, notes)
        except Exception as exc:
            manifest[name] = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(f"[export] {name}: FAILED {type(exc).__name__}: {exc}", flush=True)
            return
        finally:
            manifest_path.write_text(json.dumps(manifest, indent=2))
        m = onnx.load(str(path), load_external_data=False)
        manifest[name] = {
            "status": "ok",
            "tool": tool,
            "notes": notes,
            "seconds": round(time.perf_counter() - t0, 1),
            "ir_version": m.ir_version,
            "opset": {(o.domain or "ai.onnx"): o.version for o in m.opset_import},
            "nodes": len(m.graph.node),
            "external_data": path.with_name(path.name + ".data").exists(),
            "versions": {
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "onnx": onnx.__version__,
            },
        }
        manifest_path.write_text(json.dumps(manifest, indent=2))
        print(f"[export] {name}: ok in {manifest[name]['seconds']} s {notes}", flush=True)

    # Wrappers return one tensor; their argument names match the ONNX input names, which is
    # what lets torch.onnx turn ``dynamic_axes`` into dynamic shapes for the dynamo exporter.
    class TextEncoder(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    class ImageEncoder(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, pixel_values: Any) -> Any:
            return self.inner(pixel_values=pixel_values).pooler_output

    class Gpt2Logits(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any) -> Any:
            return self.inner(input_ids=input_ids, use_cache=False).logits

    seq_axes = {0: "batch", 1: "seq"}

    def bert_with(dynamo: bool) -> Any:
        def bert(path: Path, notes: list[str]) -> str:
            model = transformers.BertModel(transformers.BertConfig()).eval()
            ids = torch.randint(0, 30000, (1, 128))
            mask = torch.ones(1, 128, dtype=torch.long)
            return _torch_export(
                TextEncoder(model).eval(),
                (ids, mask),
                path,
                ["input_ids", "attention_mask"],
                ["last_hidden_state"],
                {"input_ids": seq_axes, "attention_mask": seq_axes, "last_hidden_state": seq_axes},
                dynamo,
                notes,
            )

        return bert

    def gpt2(path: Path, notes: list[str]) -> str:
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
        ids = torch.randint(0, 50000, (1, 128))
        return _torch_export(
            Gpt2Logits(model).eval(),
            (ids,),
            path,
            ["input_ids"],
            ["logits"],
            {"input_ids": seq_axes, "logits": seq_axes},
            False,
            notes,
        )

    def image_encoder(name: str, dynamo: bool) -> Callable[[Path, list[str]], str]:
        """HF vision backbone ``name`` (ResNet, ConvNext) from its default config."""

        def export(path: Path, notes: list[str]) -> str:
            config = getattr(transformers, f"{name}Config")()
            model = getattr(transformers, f"{name}Model")(config).eval()
            return _torch_export(
                ImageEncoder(model).eval(),
                (torch.randn(1, 3, 224, 224),),
                path,
                ["pixel_values"],
                ["pooled"],
                {"pixel_values": {0: "batch"}, "pooled": {0: "batch"}},
                dynamo,
                notes,
            )

        return export

    resnet = image_encoder("ResNet", dynamo=True)
    convnext = image_encoder("ConvNext", dynamo=False)

    def bert_int8(path: Path, notes: list[str]) -> str:
        import onnxruntime
        from onnxruntime.quantization import QuantType, quantize_dynamic

        src = cache / "bert_base.onnx"
        if not src.exists():
            raise FileNotFoundError(f"{src} (export bert_base.onnx first)")
        quantize_dynamic(src, path, weight_type=QuantType.QInt8)
        return f"onnxruntime {onnxruntime.__version__} quantize_dynamic QInt8"

    def resnet_qdq(path: Path, notes: list[str]) -> str:
        import onnxruntime
        from onnxruntime.quantization import (
            CalibrationDataReader,
            QuantFormat,
            QuantType,
            quantize_static,
        )

        src = cache / "resnet50.onnx"
        if not src.exists():
            raise FileNotFoundError(f"{src} (export resnet50.onnx first)")
        rng = np.random.default_rng(0)

        class RandomImages(CalibrationDataReader):  # type: ignore[misc]
            def __init__(self, count: int) -> None:
                self.left = count

            def get_next(self) -> dict[str, Any] | None:
                if self.left <= 0:
                    return None
                self.left -= 1
                return {"pixel_values": rng.standard_normal((1, 3, 224, 224), np.float32)}

        quantize_static(
            src,
            path,
            RandomImages(8),
            quant_format=QuantFormat.QDQ,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
        )
        return f"onnxruntime {onnxruntime.__version__} quantize_static QDQ QInt8 (8 random images)"

    build("bert_base.onnx", bert_with(dynamo=True))
    build("bert_base_ts.onnx", bert_with(dynamo=False))
    build("gpt2_small.onnx", gpt2)
    build("resnet50.onnx", resnet)
    build("convnext_tiny.onnx", convnext)
    build("bert_base_int8_dynamic.onnx", bert_int8)
    build("resnet50_int8_qdq.onnx", resnet_qdq)
    print(f"[export] manifest: {manifest_path}")


def cmd_export(ns: argparse.Namespace) -> int:
    if ns.venv is not None and not ns.in_venv:
        python = Path(ns.venv) / "bin" / "python"
        if not python.exists():
            print(f"no interpreter at {python}", file=sys.stderr)
            return 2
        argv = [
            str(python),
            str(Path(__file__).resolve()),
            "export",
            "--in-venv",
            "--cache",
            str(ns.cache),
        ]
        if ns.force:
            argv.append("--force")
        if ns.models:
            argv += ["--models", *ns.models]
        return subprocess.call(argv)
    _export_models(Path(ns.cache), ns.force, ns.models or [])
    return 0


# --------------------------------------------------------------------------- run stage


@dataclass
class Result:
    name: str
    origin: str
    kind: str
    model_path: str
    command: list[str]
    status: str
    error: str | None = None
    p50_ms: float | None = None
    coverage: float | None = None
    coverage_same_pass: float | None = None  # node time / session.run wall, profiled pass
    within_tolerance: bool | None = None
    overhead_ms: float | None = None
    node_share_of_ort_run: float | None = None  # node time / ORT run time, profiled pass only
    profiler_inflation: float | None = None  # profiled session.run p50 / measured p50
    nodes: int | None = None
    top_op_types: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    wall_s: float = 0.0


def _light_dir() -> Path:
    import onnx  # a dependency of aaco's venv; not aaco itself

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _resolve(case: Case, cache: Path, manifest: dict[str, Any]) -> tuple[Path, str]:
    if case.model.startswith("light:"):
        return _light_dir() / f"light_{case.model.split(':', 1)[1]}.onnx", LIGHT_ORIGIN
    origin = EXPORT_ORIGINS.get(case.model, "?")
    tool = manifest.get(case.model, {}).get("tool", "")
    if "dynamo" in tool:
        origin += " (dynamo)"
    elif "TorchScript" in tool:
        origin += " (TorchScript)"
    return cache / case.model, origin


def _parse_report(stdout: str) -> dict[str, Any] | None:
    """The JSON report is printed first; aaco appends a ``bundle: PATH`` line after it."""
    start = stdout.find("{")
    if start < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(stdout[start:])
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _last_lines(text: str, count: int = 3) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-count:])


def run_case(
    case: Case, aaco: str, cache: Path, sessions: Path, manifest: dict[str, Any], timeout: float
) -> Result:
    path, origin = _resolve(case, cache, manifest)
    cmd = [
        aaco,
        "run",
        "--model",
        str(path),
        *case.args,
        "--iterations",
        str(case.iterations),
        "--warmup",
        str(case.warmup),
        "--profile-iterations",
        str(case.profile_iterations),
        "--report",
        "json",
        "-o",
        str(sessions),
    ]
    res = Result(case.name, origin, case.kind, str(path), cmd, status="not run")
    if not path.exists():
        entry = manifest.get(case.model, {})
        res.status = "missing"
        res.error = entry.get("error") or f"{path} not found (run the export stage)"
        return res
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        res.status, res.error = "timeout", f"no result within {timeout:.0f} s"
        res.wall_s = time.perf_counter() - t0
        return res
    res.wall_s = time.perf_counter() - t0
    report = _parse_report(proc.stdout)
    if proc.returncode != 0 or report is None:
        res.status = f"exit {proc.returncode}"
        res.error = _last_lines(proc.stderr) or _last_lines(proc.stdout) or "no JSON report"
        return res
    res.status = str(report.get("status", "?"))
    res.error = (report.get("session") or {}).get("error")
    summary = report.get("summary") or {}
    res.p50_ms = (summary.get("latency_ms") or {}).get("p50")
    profile = summary.get("profile") or {}
    res.coverage = profile.get("coverage")
    res.coverage_same_pass = profile.get("coverage_same_pass")
    res.overhead_ms = profile.get("overhead_ms")
    res.node_share_of_ort_run = profile.get("node_share_of_ort_run")
    res.profiler_inflation = profile.get("profiler_inflation")
    # Judged on the same-pass coverage: node time against the latency of the very runs it was
    # measured in, so a machine whose load changes between passes cannot fake a pass or a fail.
    judged = res.coverage_same_pass if res.coverage_same_pass is not None else res.coverage
    if judged is not None:
        res.within_tolerance = abs(judged - 1.0) <= COVERAGE_TOLERANCE
    res.nodes = (report.get("model") or {}).get("node_count")
    res.top_op_types = [
        f"{t.get('op_type')} {t.get('pct', 0):.0f}%" for t in (report.get("top_op_types") or [])[:3]
    ]
    res.warnings = [str(w) for w in report.get("warnings") or []]
    return res


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown_table(results: list[Result]) -> str:
    head = (
        "| model | origin | kind | status | p50 ms | coverage same pass % | within 15 % "
        "| coverage vs measured p50 % | nodes | top 3 op types (share of node time) "
        "| node/ORT run % | profiled/measured |"
    )
    rows = [head, "|" + "---|" * 12]
    for r in results:
        within = "-" if r.within_tolerance is None else ("yes" if r.within_tolerance else "no")
        cov = None if r.coverage is None else 100 * r.coverage
        same = None if r.coverage_same_pass is None else 100 * r.coverage_same_pass
        share = r.node_share_of_ort_run
        rows.append(
            f"| {r.name} | {r.origin} | {r.kind} | {r.status} | {_fmt(r.p50_ms, '.2f')} "
            f"| {_fmt(same, '.1f')} | {within} | {_fmt(cov, '.1f')} "
            f"| {r.nodes if r.nodes is not None else '-'} "
            f"| {', '.join(r.top_op_types) or '-'} "
            f"| {_fmt(None if share is None else 100 * share, '.1f')} "
            f"| {_fmt(r.profiler_inflation, '.2f')} |"
        )
    return "\n".join(rows)


def cmd_run(ns: argparse.Namespace) -> int:
    cache = Path(ns.cache)
    manifest_path = cache / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    cases = [c for c in CASES if not ns.models or any(s in c.name for s in ns.models)]
    if not cases:
        print("no case matches --models", file=sys.stderr)
        return 2
    aaco = ns.aaco or str(Path(sys.executable).parent / "aaco")
    if not Path(aaco).exists():
        aaco = shutil.which("aaco") or aaco
    sessions = Path(ns.sessions) if ns.sessions else Path(tempfile.mkdtemp(prefix="aaco-foreign-"))
    results: list[Result] = []
    for case in cases:
        print(f"[run] {case.name} ...", file=sys.stderr, flush=True)
        res = run_case(case, aaco, cache, sessions, manifest, ns.timeout)
        print(
            f"[run] {case.name}: {res.status} p50={_fmt(res.p50_ms, '.2f')} ms "
            f"coverage={_fmt(res.coverage, '.3f')} ({res.wall_s:.1f} s)"
            + (f" error: {res.error}" if res.error else ""),
            file=sys.stderr,
            flush=True,
        )
        results.append(res)
    if ns.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(markdown_table(results))
        failed = [r for r in results if r.error]
        for r in failed:
            print(f"\n- {r.name}: {r.error}")
        print(f"\nsessions: {sessions}")
    ok = all(r.status == "completed" and r.within_tolerance for r in results)
    return 0 if ok else 1


def cmd_list(ns: argparse.Namespace) -> int:
    for c in CASES:
        print(f"{c.name:34} {c.model:30} {c.kind:22} {' '.join(c.args)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)

    exp = sub.add_parser("export", help="build the foreign models (torch venv)")
    exp.add_argument("--venv", help="venv with torch/transformers/onnx/onnxruntime to run in")
    exp.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    exp.add_argument("--cache", default=str(DEFAULT_CACHE))
    exp.add_argument("--force", action="store_true", help="rebuild existing files")
    exp.add_argument("--models", nargs="*", help="only file names containing these")
    exp.set_defaults(func=cmd_export)

    run = sub.add_parser("run", help="profile the models with aaco's CLI")
    run.add_argument("--cache", default=str(DEFAULT_CACHE))
    run.add_argument("--models", nargs="*", help="only cases whose name contains these")
    run.add_argument("--json", action="store_true", help="JSON instead of a markdown table")
    run.add_argument("--aaco", help="aaco executable (default: next to this interpreter)")
    run.add_argument("--sessions", help="sessions root (default: a new temp folder)")
    run.add_argument("--timeout", type=float, default=300.0, help="seconds per aaco run")
    run.set_defaults(func=cmd_run)

    lst = sub.add_parser("list", help="print the cases")
    lst.set_defaults(func=cmd_list)

    ns = parser.parse_args(argv)
    return int(ns.func(ns))


if __name__ == "__main__":
    sys.exit(main())
