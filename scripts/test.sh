#!/usr/bin/env bash
# Set up AACO with its dev tools in ./.venv, then lint, type-check and run the test suite.
# The same command runs locally and in CI (.ci/run). Extra arguments go to pytest.
set -euo pipefail
. "$(dirname "$0")/_venv.sh" dev
cd "$ROOT"
ruff check src tests bench scripts
ruff format --check src tests bench scripts
mypy
python -m pytest "$@"
