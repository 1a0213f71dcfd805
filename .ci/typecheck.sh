#!/usr/bin/env bash
# mypy --strict on the package as it installs: the top-level folders runtime/,
# actors/ and providers/ are tether.runtime, tether.actors and tether.providers
# (setuptools package-dir), which mypy cannot see through the editable-install
# hook. So check a tree of links laid out the way the package installs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir "$tree/tether"
for f in "$root"/tether/*; do ln -s "$f" "$tree/tether/"; done
for sub in runtime actors providers; do ln -s "$root/$sub" "$tree/tether/$sub"; done
cd "$tree"
mypy="${MYPY:-$root/.venv/bin/mypy}"
"$mypy" --config-file "$root/pyproject.toml" -p tether
# The public API as a user writes it must type-check too.
cp "$root/tests/typing/check_api.py" "$tree/"
"$mypy" --config-file "$root/pyproject.toml" "$tree/check_api.py"
