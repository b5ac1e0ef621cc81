"""Where each JSON file and folder lies inside a session bundle (paths relative to its root).

One place for the bundle's layout: every writer and reader takes these names from here. The
tables' paths are their schemas' (:data:`aaco.session.schema.TABLES`, ``TableSpec.path``).

Example::

    session.json_file(DERIVED_METRICS_FILE)      # the kernel trace's derived metrics
    bundle / REPORT_DIR / "report.html"
"""

from __future__ import annotations

__all__ = [
    "ANALYSIS_FILE",
    "ATTRIBUTION_SUMMARY_FILE",
    "BASELINE_REF_FILE",
    "BOTTLENECK_FILE",
    "CAPSULE_FILE",
    "CAPTURE_LOG_FILE",
    "CAPTURE_PROGRESS_FILE",
    "CAPTURE_RESULT_FILE",
    "COMMAND_OUTPUT_DIR",
    "DERIVED_METRICS_FILE",
    "DIFF_FILE",
    "ENV_FILE",
    "GENERATION_FILE",
    "IMPORT_META_FILE",
    "INFERENCE_SUMMARY_FILE",
    "LATEST",
    "LOG_FILE",
    "MODEL_META_FILE",
    "NSYS_DIR",
    "OPTIMIZED_META_FILE",
    "OPTIMIZED_MODEL",
    "OPTIMIZED_WEIGHTS",
    "ORT_CONFIG_FILE",
    "PROFILE_DIR",
    "PROGRESS_FILE",
    "RECOMMENDATIONS_FILE",
    "REPORT_DIR",
    "RESULT_FILE",
    "ROOFLINE_FILE",
    "SERVING_SUMMARY_FILE",
    "SESSION_FILE",
    "SPEC_FILE",
    "TORCH_CONFIG_FILE",
    "TORCH_TRACE",
    "TORCH_TRACES_DIR",
    "VERDICT_FILE",
]

# -- the sessions root -------------------------------------------------------------------------
#: the root's pointer to its newest bundle (a symlink, or a text file naming it)
LATEST = "latest"

# -- the run ---------------------------------------------------------------------------------
#: the bundle's metadata (format version, status, model, backend, run settings, failures)
SESSION_FILE = "session.json"
#: the machine and software the run saw (:func:`aaco.collectors.environment.capture_environment`)
ENV_FILE = "env.json"
MODEL_META_FILE = "model/model_meta.json"
#: the graph ONNX Runtime executed, when it could be saved
OPTIMIZED_MODEL = "model/optimized.onnx"
#: the graph ORT executed, as extracted (metadata, eliminated and unmapped nodes)
OPTIMIZED_META_FILE = "model/optimized_meta.json"
#: initializers of the optimized graph go to this file next to it; the parent deletes it
OPTIMIZED_WEIGHTS = "optimized.weights"
ORT_CONFIG_FILE = "runtime/ort_config.json"
TORCH_CONFIG_FILE = "runtime/torch_config.json"
INFERENCE_SUMMARY_FILE = "metrics/inference_summary.json"
#: the serving summary of `aaco llm bench` / `aaco llm run` (aaco.serving.bench.summarize)
SERVING_SUMMARY_FILE = "metrics/serving_summary.json"
#: `aaco llm run`: the decoder, per-phase totals and the prefill/decode operator split
GENERATION_FILE = "metrics/generation.json"

# -- the worker (aaco.runners.harness) and what it hands over ---------------------------------
#: what ``aaco rerun`` rebuilds a run from (:mod:`aaco.runners.capsule`)
CAPSULE_FILE = "runtime/capsule.json"
SPEC_FILE = "runtime/worker_spec.json"
RESULT_FILE = "runtime/worker_result.json"
PROGRESS_FILE = "runtime/worker_progress.jsonl"
LOG_FILE = "runtime/worker.log"
#: the capture worker's own files, run under a tracer after the measuring worker
CAPTURE_RESULT_FILE = "runtime/capture_result.json"
CAPTURE_PROGRESS_FILE = "runtime/capture_progress.jsonl"
CAPTURE_LOG_FILE = "runtime/capture.log"
#: ONNX Runtime's raw profile (JSON), written by the ONNX Runtime worker
PROFILE_DIR = "profiler/ort_profile_raw"
#: the PyTorch profiler's Chrome trace (gzip), written by the torch worker
TORCH_TRACE = "profiler/torch_trace.json.gz"
#: where rocprofv3 writes its trace (aaco.tracers.rocprofv3)
ROCPROFV3_DIR = "profiler/rocprofv3"
#: where nsys writes its report and SQLite export (aaco.tracers.nsys)
NSYS_DIR = "profiler/nsys"

# -- aaco profile -- CMD (aaco.runners.profile) -----------------------------------------------
#: the one-file summary of a profiled command (docs/report-json.md, "aaco profile")
ANALYSIS_FILE = "analysis.json"
#: the bounded tails of each run's stdout and stderr (``run<N>.stdout``, ``run<N>.stderr``)
COMMAND_OUTPUT_DIR = "runtime/command_output"
#: the torch tracer's Kineto traces, one per Python process that imported torch (``<pid>.json``)
TORCH_TRACES_DIR = "profiler/torch_traces"

# -- an imported or captured kernel trace (aaco.ingest) ---------------------------------------
#: what the import read: files, importers, sources, rows, warnings
IMPORT_META_FILE = "profiler/import.json"
ATTRIBUTION_SUMMARY_FILE = "attribution/summary.json"
DERIVED_METRICS_FILE = "metrics/derived_metrics.json"

# -- the diagnosis (aaco.diagnose) ------------------------------------------------------------
ROOFLINE_FILE = "metrics/roofline.json"
BOTTLENECK_FILE = "metrics/bottleneck.json"
RECOMMENDATIONS_FILE = "metrics/recommendations.json"
#: the critical path over CPU threads and GPU streams (aaco.analysis.critical_path)
CRITICAL_PATH_FILE = "metrics/critical_path.json"

# -- a comparison with a baseline (aaco.regress) -----------------------------------------------
DIFF_FILE = "regress/diff.json"
VERDICT_FILE = "regress/verdict.json"
BASELINE_REF_FILE = "regress/baseline_ref.json"

# -- rendered copies (aaco.report) --------------------------------------------------------------
#: ``report.json``, ``report.txt``, ``report.html``: convenience copies of the reports
REPORT_DIR = "report"
