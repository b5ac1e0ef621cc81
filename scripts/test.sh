#!/usr/bin/env bash
# Set up AACO with its dev tools in ./.venv, then lint, type-check, check the import layers
# and run the test suite.
# The same command runs locally and in CI (.ci/run). Extra arguments go to pytest.
set -euo pipefail
. "$(dirname "$0")/_venv.sh" dev
cd "$ROOT"
# The PyTorch runner's tests need torch (an optional extra). Install it when a CPU build
# lies in pip's local wheel folder (PIP_FIND_LINKS), or when AACO_TEST_TORCH=1 asks for the
# extra from the index (several GB: PyPI's default build bundles CUDA). Otherwise those
# tests are skipped, and pytest says so.
if ! python -c "import torch" 2>/dev/null; then
  wheel=""
  for dir in ${PIP_FIND_LINKS:-} /opt/wheels; do
    for f in "$dir"/torch-*+cpu-cp"$(python -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"-*.whl; do
      [ -f "$f" ] && wheel="$f"
    done
  done
  if [ -n "$wheel" ]; then
    python -m pip install --quiet "$wheel"
  elif [ "${AACO_TEST_TORCH:-0}" = "1" ]; then
    python -m pip install --quiet -e "$ROOT[torch]"
  else
    echo "note: torch not installed; the PyTorch runner tests will be skipped (AACO_TEST_TORCH=1 installs it)" >&2
  fi
fi
# The LLM serving tests run against a real `transformers serve` (a tiny Llama built offline)
# when torch is here: its `serving` extra keeps the CPU torch wheel installed above.
if python -c "import torch" 2>/dev/null && ! python -c "import transformers" 2>/dev/null; then
  python -m pip install --quiet "transformers[serving]>=5,<6" \
    || echo "note: transformers[serving] did not install; the real-server tests will be skipped" >&2
fi
ruff check src tests bench scripts
ruff format --check src tests bench scripts
mypy
# package layers and import cycles: the contracts in pyproject.toml ([tool.importlinter])
lint-imports --no-cache
python -m pytest "$@"
