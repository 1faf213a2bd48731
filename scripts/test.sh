#!/usr/bin/env bash
# The test command of the README: set up (idempotent), then the whole suite on CPU
# with the real vLLM engine on the testbed model. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
export TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest "$@"
