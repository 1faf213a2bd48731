#!/usr/bin/env bash
# GuideLLM (PyPI `guidellm`, unmodified, in a venv of its own: it pins other versions than
# ours) against a running `thinkgate serve`: a short rate sweep on synthetic prompts.
#
#   GUIDELLM=/work/peers-venv/bin/guidellm loadtests/guidellm.sh http://127.0.0.1:8000 OUTDIR
#
# Run from the repository root: the testbed model's served name is its path
# (testbed/models/base), which GuideLLM also loads as the tokenizer for its synthetic
# prompts. Environment: SWEEP_SIZE (5), SECONDS_PER_RATE (30), MAX_CONCURRENCY (256),
# or PROFILE / CONSTRAINT to replace GuideLLM's --profile / --constraint whole (click
# refuses them twice, so they cannot be appended); EXTRA_HEADERS, a JSON object sent with
# every request (e.g. '{"X-Strategy": "self-consistency", "X-Budget-Samples": "8"}').
# Other arguments after OUTDIR go to `guidellm run`.
set -euo pipefail
target=${1:-http://127.0.0.1:8000}
out=${2:-benchmarks/results/guidellm}
shift $(( $# < 2 ? $# : 2 ))
guidellm=${GUIDELLM:-guidellm}
mkdir -p "$out"
# sweep: a synchronous run, a throughput run, then constant rates between the two;
# every strategy stops after SECONDS_PER_RATE (then drains). The throughput run keeps at
# most 256 requests open: GuideLLM's default (512) is over thinkgate's admission cap
# (--max-inflight-requests, 256), and what is over it gets 429 + Retry-After, which
# GuideLLM counts as errors without retrying. sample_size=0 keeps per-request timings
# and token counts but not every prompt and output text (a 10 MB JSON otherwise).
# 64 prompt tokens and 128 output tokens (GuideLLM sends ignore_eos) fit the testbed's
# 512-token context; streaming chat completions (GuideLLM's default request format).
backend="kind=openai_http,target=$target"
if [[ -n "${EXTRA_HEADERS:-}" ]]; then
    backend="{\"kind\": \"openai_http\", \"target\": \"$target\", \"extras\": {\"headers\": $EXTRA_HEADERS}}"
fi
"$guidellm" run \
    --backend "$backend" \
    --profile "${PROFILE:-kind=sweep,sweep_size=${SWEEP_SIZE:-5},max_concurrency=${MAX_CONCURRENCY:-256}}" \
    --constraint "${CONSTRAINT:-kind=max_duration,seconds=${SECONDS_PER_RATE:-30}}" \
    --data "kind=synthetic_text,prompt_tokens=64,output_tokens=128" \
    --output "kind=json,path=$out/benchmarks.json" \
    --output "kind=csv,path=$out/benchmarks.csv" \
    --output "kind=plot,path=$out/benchmarks.png" \
    --output kind=console \
    --metrics kind=generative,sample_size=0 \
    --disable-console-interactive \
    "$@" 2>&1 | tee "$out/console.txt"
