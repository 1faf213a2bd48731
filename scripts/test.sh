#!/usr/bin/env bash
# The test command of the README: set up (idempotent), then the whole suite on CPU
# with the real vLLM engine on the testbed model. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
# vLLM's default ("auto") pins every engine's worker to core 0: with the gateway's
# generation and reward engines (and the suite's own engines) on 2 cores they would
# all share one core. Unpinned, one thread each, the OS spreads them.
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest "$@"
