#!/usr/bin/env bash
# The quick start: set up (idempotent), then serve the testbed model on CPU.
# Extra arguments go to `thinkgate serve` (e.g. --port 8001, --model DIR_OR_ID).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
# vLLM's default ("auto") pins every engine's worker to core 0: with the gateway's
# generation and reward engines (and the suite's own engines) on 2 cores they would
# all share one core. Unpinned, one thread each, the OS spreads them.
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec .venv/bin/thinkgate serve "$@"
