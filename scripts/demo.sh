#!/usr/bin/env bash
# Set up AACO in ./.venv and profile the built-in ResNet-50 on the CPU, then show the report.
# Extra arguments go to `aaco run` (e.g. scripts/demo.sh --model bert-base).
set -euo pipefail
. "$(dirname "$0")/_venv.sh" dev
cd "$ROOT"
if [ $# -eq 0 ]; then set -- --model resnet50; fi
aaco run --backend cpu "$@"
echo
echo "Bundle written under ./sessions (see: aaco ls, aaco report --format json)"
