#!/usr/bin/env bash
# The test command of the README: set up (idempotent), then the whole suite on CPU
# with the real vLLM engine on the testbed model. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
exec .venv/bin/python -m pytest "$@"
