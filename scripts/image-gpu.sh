#!/usr/bin/env bash
# Build the GPU image (Dockerfile) with buildah, no Docker engine and no GPU needed, then
# check inside it what can be checked without a GPU (scripts/image-gpu-check.py: versions,
# imports, our processors through vLLM's own loaders, vLLM's plugins, the replica's vLLM
# command through vLLM's own parser; the entrypoint's roles; the Triton kernel check
# skipping cleanly).
#   sudo apt-get install -y buildah debootstrap      # once
#   bash scripts/image-gpu.sh                        # writes benchmarks/results/image/gpu.md
# Where vLLM's image (vllm/vllm-openai) cannot be pulled, the base is a stand-in made from
# Debian bookworm's packages (Python 3.11 in a venv, a C compiler and Python's headers for
# Triton) and vLLM's CUDA wheel comes from PyPI at the `gpu` extra's pin, torch with it
# (PyPI's torch is the CUDA build). pip inside the build uses PyPI, not the host's local
# wheels (those hold a CPU torch); only a CA bundle is handed in (PIP_CERT, default the
# host pip's). Several GB of downloads; 15+ min. Needs root. Env: BASE (skip the pull),
# TAG, OUT, PIP_CERT, KEEP_IMAGE=0 to remove it, CHECK_ONLY=1 to check the image TAG
# an earlier run built (no build; its size and build times are then not measured).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/benchmarks/results/image/gpu.md}
TAG=${TAG:-localhost/thinkgate-gpu:local}
source scripts/image-lib.sh
work=$(mktemp -d /tmp/image-gpu.XXXXXX)
ctr=""
cleanup() {
  [[ -n "$ctr" ]] && "${B[@]}" rm "$ctr" >/dev/null 2>&1 || true
  [[ "${KEEP_IMAGE:-1}" == 1 ]] || "${B[@]}" rmi "$TAG" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
started=$(date +%s)
pin=$(python3 -c 'import tomllib; d = tomllib.load(open("pyproject.toml", "rb")); print(d["project"]["optional-dependencies"]["gpu"][0])')
version=${pin#vllm==}
vllm_spec=""

if [[ "${CHECK_ONLY:-0}" == 1 ]]; then base="(not rebuilt)" base_made="checked only"
elif [[ -n "${BASE:-}" ]]; then base=$BASE base_made=given; else
  pull_or_standin "vllm/vllm-openai:v$version" localhost/thinkgate-gpu-base:bookworm \
    python3,python3-venv,python3-dev,gcc,libc6-dev,ca-certificates \
    "python3 -m venv /opt/venv" /opt/venv/bin
  [[ "$base_made" == pulled ]] || vllm_spec=$pin
fi
based=$(date +%s)

pip_args=()
ca=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
if [[ -n "$ca" && -f "$ca" ]]; then
  mkdir -p "$work/ca" && cp "$ca" "$work/ca/ca.crt"
  pip_args+=(-v "$work/ca:/run/host-ca:ro" --build-arg PIP_CERT=/run/host-ca/ca.crt)
fi
if [[ "${CHECK_ONLY:-0}" != 1 ]]; then
  echo "image-gpu: building $TAG on $base (VLLM_SPEC=${vllm_spec:-none})" >&2
  "${B[@]}" bud --isolation chroot -f Dockerfile -t "$TAG" --build-arg BASE="$base" \
    --build-arg VLLM_SPEC="$vllm_spec" "${pip_args[@]}" .
fi
built=$(date +%s)
size=$("${B[@]}" images --format '{{.Size}}' "$TAG" | head -1)

ctr=$("${B[@]}" from "$TAG")
inside() { "${B[@]}" run --isolation chroot -v "$ROOT/scripts:/run/check:ro" "$ctr" -- "$@"; }
checks=$(inside python3 /run/check/image-gpu-check.py "$version") && checked=passed || checked=FAILED
echo "$checks"
# The entrypoint's roles, each answered without starting an engine.
roles=""
role() {
  local name=$1; shift
  if out=$(inside /opt/thinkgate/scripts/docker-entrypoint.sh "$@" 2>&1); then
    roles+="| entrypoint \`$name\` | $(echo "$out" | grep -m1 -E "${pattern:-.}" | cut -c1-110 | tr '|`' "/'") |"$'\n'
  else
    roles+="| entrypoint \`$name\` | FAILED (exit $?) |"$'\n'; checked=FAILED
  fi
}
pattern='^usage' role "(default) --help" --help
pattern='^usage' role "serve --help" serve --help
# No GPU here to detect the runner with: the GPU default (Model Runner V2), named.
pattern='vllm.entrypoints' role "replica --dry-run --runner v2" replica --dry-run --runner v2
pattern='^usage' role "calibrate --help" calibrate --help
kernels=$(inside /bin/sh -c 'cd /opt/thinkgate && PYTHONPATH=. python3 -m kernels.gpu_check; echo "exit $?"' 2>&1 | tail -2 | tr '\n' ' ')
echo "$roles"
finished=$(date +%s)

mkdir -p "$(dirname "$OUT")"
cat > "$OUT" <<MD
# The GPU image, built and checked without a GPU

\`bash scripts/image-gpu.sh\` on $(nproc) cores, no GPU ($(date -u +%Y-%m-%d)), buildah
$("${B[@]}" --version | awk '{print $3}'), base \`$base\` ($base_made), vLLM from
$([[ -n "$vllm_spec" ]] && echo "PyPI (\`$vllm_spec\`, its CUDA wheel)" || echo "the base image").
Storage driver vfs, chroot isolation. Checks: $checked.

| figure | value |
|---|---|
| image size | $size |
| base image (s) | $((based - started)) |
| image build (s) | $((built - based)) |
| checks (s) | $((finished - built)) |

| check inside the image | result |
|---|---|
$checks
$roles| Triton kernel check (\`python -m kernels.gpu_check\`) | $kernels |

What needs a GPU (an engine started, the kernels compiled and timed) is not checked
here: \`scripts/gpu-check.sh\` on a GPU machine (docs/gpu-check.md).
MD
cat "$OUT"
[[ "$checked" == passed ]]
