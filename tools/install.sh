#!/usr/bin/env bash
# Install specfx (editable) for this checkout; `tools/install.sh test` adds the test extras.
# When torch is missing it installs the CPU build of torch 2.13.0 first, so that resolving
# specfx's `torch` requirement cannot pull a multi-GB CUDA build: `torch==2.13.0+cpu` from
# the indexes pip is configured with (a local copy, a mirror), else from PyTorch's CPU index.
# Each step says what it is doing on stderr (pip itself runs --quiet: its errors still show).
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python}"
cpu_index="${SPECFX_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
say() { echo "install.sh: $*" >&2; }
if "$python" -c "import torch" >/dev/null 2>&1; then
    say "using the installed torch $("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
else
    say "torch is missing: installing its CPU build torch==2.13.0+cpu (about 200 MB; a minute or more) ..."
    "$python" -m pip install --quiet "torch==2.13.0+cpu" 2>/dev/null \
        || { say "not on pip's configured indexes; trying $cpu_index (PyTorch's CPU index unless SPECFX_TORCH_CPU_INDEX says otherwise) ...";
             "$python" -m pip install --quiet "torch==2.13.0" --index-url "$cpu_index"; }
fi
extras="${1:-}"
if [ -n "$extras" ]; then
    say "installing specfx from $(pwd) (editable) with the [$extras] extras: pytest, hypothesis, transformers," \
        "torchao, brevitas, ruff, mypy (about a minute) ..."
else
    say "installing specfx from $(pwd) (editable) and its requirements ..."
fi
"$python" -m pip install --quiet -e ".${extras:+[$extras]}"
say "done: specfx $("$python" -c 'import specfx; print(specfx.__version__)') is installed; try: $python -m specfx demo"
