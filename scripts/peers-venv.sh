#!/usr/bin/env bash
# The peers' own environment for the benchmarks that run them (benchmarks.peers,
# benchmarks.budgets --peers-venv, benchmarks.search_peers): its_hub and optillm pin
# other versions than thinkgate, so they get a venv of their own.
#   bash scripts/peers-venv.sh [DIR]      (default /work/peers-venv; a few minutes)
# optillm is installed without its resolver run: pip's full resolve of `optillm`
# backtracks for many minutes (adaptive-classifier -> optimum[onnxruntime] wants
# transformers<4.45, optillm wants >=5), so its core requirements are named here; plugins
# whose extras are missing (web search, MCP, privacy, code execution) fail to load at its
# start, while self_consistency and majority_voting, the ones measured, load.
set -euo pipefail
DIR=${1:-/work/peers-venv}
python3.11 -m venv "$DIR"
PIP=("$DIR/bin/python" -m pip install -q)
"${PIP[@]}" --upgrade pip
"${PIP[@]}" torch==2.13.0  # the CPU build (a wheel on this machine's disk, else PyPI)
"${PIP[@]}" 'its_hub[iaas]==1.2.0'
"${PIP[@]}" --no-deps optillm==0.4.0
"${PIP[@]}" flask cerebras_cloud_sdk 'z3-solver<=4.15.4.0' networkx 'transformers>=5,<5.13' \
    tiktoken scikit-learn PyYAML math-verify sentencepiece azure-identity requests
"$DIR/bin/python" -c "import its_hub, optillm; print('peers venv ready:', '$DIR')"
