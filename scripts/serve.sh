#!/usr/bin/env bash
# The quick start: set up (idempotent), then serve the testbed model on CPU.
# Extra arguments go to `thinkgate serve` (e.g. --port 8001, --model DIR_OR_ID).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
exec .venv/bin/thinkgate serve "$@"
