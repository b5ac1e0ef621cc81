#!/usr/bin/env bash
# Set up AACO in ./.venv, measure this machine's roofline ceilings once (aaco calibrate: a few
# seconds, reused afterwards), profile the built-in ResNet-50 on the CPU and show the report
# with its bottleneck verdict. Extra arguments go to `aaco run` (e.g. --model zoo-launch).
set -euo pipefail
. "$(dirname "$0")/_venv.sh" dev
cd "$ROOT"
if [ $# -eq 0 ]; then set -- --model resnet50; fi
# A busy machine makes the calibration refuse (exit 1, it says why): the demo goes on, and
# the run's roofline says it has no ceilings and why, instead of stopping here.
aaco calibrate > /dev/null || echo "note: no calibration stored; the run goes on without it" >&2
aaco run --backend cpu "$@"
echo
echo "Bundle written under ./sessions (see: aaco ls, aaco report --format json)"
echo "HTML report (opens offline): $(readlink -f sessions/latest)/report/report.html"
echo "Dashboard over all sessions: .venv/bin/aaco dashboard  ->  http://127.0.0.1:8501/"
