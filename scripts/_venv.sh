# Sourced by the scripts: create ./.venv once, install AACO into it (editable), activate it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  "$PY" -m venv "$ROOT/.venv"
fi
# shellcheck disable=SC1091
. "$ROOT/.venv/bin/activate"
stamp="$ROOT/.venv/.aaco-installed-$1"
if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet -e "$ROOT[$1]"
  touch "$stamp"
fi
