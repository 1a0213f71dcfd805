#!/usr/bin/env bash
# mypy --strict on the package, from the repository root: tether/runtime,
# tether/actors and tether/providers are committed symlinks to the top-level
# folders, so the tree here is laid out the way the package installs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mypy="${MYPY:-$root/.venv/bin/mypy}"
"$mypy" --config-file pyproject.toml -p tether
# The public API as a user writes it must type-check too.
"$mypy" --config-file pyproject.toml tests/typing/check_api.py
