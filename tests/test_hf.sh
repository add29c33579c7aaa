#!/usr/bin/env bash
# tests/test_hf.sh: make test-hf. Checks models exported by dev/export_hf.py against the CPU trainer,
# in Hugging Face transformers (tests/test_hf.py says what it checks).
#
#   make test-hf        (builds train_gpt2, tests/bin/trainer_logits and tests/bin/mkshard first)
#
# Not part of make test: it needs torch, which this script does not install (gigabytes: install it
# yourself, the CPU build is enough), and it installs transformers, safetensors and tiktoken with pip
# when they are missing (that needs the network once). PYTHON names the interpreter (python3).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! command -v "$PY" > /dev/null 2>&1; then
    echo "error: test-hf needs Python ($PY not found; PYTHON=... names another)" >&2
    exit 1
fi
if ! "$PY" -c "import torch" > /dev/null 2>&1; then
    echo "error: test-hf needs torch, which it does not install (gigabytes): pip install torch (the CPU build is enough), then make test-hf again" >&2
    exit 1
fi
missing=$("$PY" -c 'import importlib.util as u; print(" ".join(p for p in ("transformers", "safetensors", "tiktoken") if u.find_spec(p) is None))')
if [ -n "$missing" ]; then
    echo "test-hf: installing $missing with pip"
    if ! "$PY" -m pip install $missing; then
        echo "error: pip could not install $missing (no network?); install them and run make test-hf again" >&2
        exit 1
    fi
fi
exec "$PY" tests/test_hf.py "$@"
