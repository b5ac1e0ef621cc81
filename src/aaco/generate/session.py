"""``aaco llm run``: the generation loop (:func:`aaco.generate.decoder.generate`) into a
serving bundle, so every serving figure, report and ``aaco diff`` applies to it unchanged.

The bundle is a ``kind: "serving"`` one whose requests are the generated sequences (TTFT =
the prefill, one chunk per decode step), plus ``metrics/generation.json``: the model, the
per-phase totals (prefill per generation, decode per step) and the operator profile split
into prefill and decode.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aaco.collectors.base import COLLECTORS
from aaco.collectors.environment import capture_environment
from aaco.generate.decoder import GenerateOptions, generate
from aaco.report.publish import write_reports
from aaco.serving.bench import serving_meta, write_serving
from aaco.session.bundle import STATUS_FAILED, BundleWriter, Session
from aaco.session.paths import ENV_FILE, GENERATION_FILE
from aaco.session.records import save_session

__all__ = ["run_generate"]


def run_generate(
    options: GenerateOptions,
    *,
    output: Path,
    tag: str | None = None,
    argv: Sequence[str] | None = None,
    config_dir: Path | None = None,
    telemetry: bool = True,
    sample_hz: float = 10.0,
) -> Session:
    """Generate, then publish the bundle and its reports. Usage errors (unknown model, not a
    decoder, too long for the model) raise before any bundle exists."""
    # the loop runs in this process: the system sampler watches it (and the machine)
    sampler = COLLECTORS.get("system").for_process(os.getpid(), sample_hz) if telemetry else None
    # and the GPU collector its device (clocks, power, energy per token); a CPU run has none
    gpu = COLLECTORS.get("gpu").for_process(os.getpid(), sample_hz) if telemetry else None
    for c in (sampler, gpu):
        if c is not None:
            c.start()
    try:
        result = generate(options, config_dir=config_dir)
    finally:
        for c in (sampler, gpu):
            if c is not None:
                c.stop()
    writer = BundleWriter(output)
    args = list(argv if argv is not None else sys.argv)
    info = result.model_info
    load = {
        "mode": "generate",
        "batch": options.batch,
        "prompt_tokens": options.prompt_tokens,
        "output_tokens": options.output_tokens,
        "warmup": options.warmup,
        "iterations": options.iterations,
    }
    meta = serving_meta(
        writer,
        model=str(info.get("name") or options.model),
        source=str(info.get("kind") or "onnx"),
        backend={"name": options.provider, "provider": options.provider},
        run={
            "framework": "onnxruntime-generate",
            "batch": options.batch,
            "warmup": options.warmup,
            "iterations": options.iterations,
            "threads": options.threads,
            "seed": options.seed,
            "profile": options.profile,
        },
        serving={"endpoint": "in-process", "model": info.get("name"), "load": load},
        tag=tag,
        argv=args,
    )
    meta["model"]["path"] = info.get("path")
    try:
        save_session(writer.path, meta)
        env = capture_environment(args, [options.provider])
        writer.write_json(ENV_FILE, env)
        meta["fingerprint"] = env.get("fingerprint")
        generation: dict[str, Any] = {
            "model": info,
            "phase_totals": result.phase_totals,
            "top_ops": result.top_ops,
            "op_split": result.op_split,
            "errors": result.errors,
        }
        writer.write_json(GENERATION_FILE, generation)
        if sampler is not None:
            writer.write_table(sampler.table_name, sampler.table())
            meta["telemetry"] = {**sampler.info(), "pid": os.getpid(), "process": "generate"}
        for e in result.errors:
            meta["failures"].append({"stage": "generate", "error": e})
        point = {
            "point": 0,
            "label": f"batch={options.batch}",
            "load": load,
            "client": {
                "wall_s": None,
                "cpu_s": None,
                "cpu_pct": None,
                "loop_lag_ms": None,
                "warnings": [],
            },
        }
        gpu_table = None
        if gpu is not None:
            gpu_table = gpu.table()
            if gpu_table.num_rows:
                writer.write_table(gpu.table_name, gpu_table)
            meta.setdefault("collectors", {})["gpu"] = gpu.info()
        measured = [r for r in result.results if r.phase == "measured" and r.end_ns is not None]
        if measured:
            # the measured generations' span: the window the GPU's energy is differenced over
            span = [
                min(r.submit_ns or r.sent_ns for r in measured),
                max(r.end_ns or 0 for r in measured),
            ]
            meta["phases"]["measured"] = span
            meta["phases"]["point0"] = span
        write_serving(writer, meta, result.results, [point], {}, gpu_table=gpu_table)
    except BaseException:
        meta["status"] = STATUS_FAILED
        meta["error"] = {"message": "interrupted or failed while writing", "stage": "aaco"}
        save_session(writer.path, meta)
        writer.publish()
        raise
    writer.publish()
    write_reports(writer.final_path)
    return Session.load(writer.final_path)
