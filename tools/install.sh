#!/usr/bin/env bash
# Install specfx (editable) for this checkout; `tools/install.sh test` adds the test extras.
# torch is installed first and pinned to the CPU build 2.13.0 when it is missing, so that
# resolving specfx's `torch` requirement cannot pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python}"
if ! "$python" -c "import torch" >/dev/null 2>&1; then
    "$python" -m pip install --quiet "torch==2.13.0"
fi
extras="${1:-}"
"$python" -m pip install --quiet -e ".${extras:+[$extras]}"
