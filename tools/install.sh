#!/usr/bin/env bash
# Install specfx (editable) for this checkout; `tools/install.sh test` adds the test extras.
# When torch is missing it installs the CPU build of torch 2.13.0 first, so that resolving
# specfx's `torch` requirement cannot pull a multi-GB CUDA build: `torch==2.13.0+cpu` from
# the indexes pip is configured with (a local copy, a mirror), else from PyTorch's CPU index.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python}"
cpu_index="${SPECFX_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
if ! "$python" -c "import torch" >/dev/null 2>&1; then
    "$python" -m pip install --quiet "torch==2.13.0+cpu" 2>/dev/null \
        || "$python" -m pip install --quiet "torch==2.13.0" --index-url "$cpu_index"
fi
extras="${1:-}"
"$python" -m pip install --quiet -e ".${extras:+[$extras]}"
