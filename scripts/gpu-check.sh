#!/usr/bin/env bash
# The GPU check (docs/gpu-check.md): every Triton kernel vs its torch reference on CUDA,
# the Model Runner V2 adapters on hand-built CUDA batches, kernel timings vs the
# memory-bandwidth floor. Needs only torch and Triton (vLLM optional: stand-ins are used
# without it); runs from a plain working tree, no install. Arguments go to
# `python -m kernels.gpu_check` (e.g. --out DIR). Exit 0: passed, or skipped without a
# CUDA device (prints "skipped: no CUDA device"); 1: a check failed; 2: bad arguments.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [[ -z "${PYTHON:-}" && -x .venv/bin/python ]]; then PY=.venv/bin/python; fi
PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m kernels.gpu_check "$@"
rc=$?
if [[ $rc -eq 3 ]]; then
  exit 0  # skipped: no CUDA device (the message is printed above)
fi
exit $rc
