#!/usr/bin/env bash
# thinkgate over plain HTTP. Usage: bash clients/curl_example.sh [BASE_URL]
# (default http://127.0.0.1:8000; set THINKGATE_API_KEY if the server wants a key).
set -euo pipefail
BASE=${1:-http://127.0.0.1:8000}
AUTH=()
if [[ -n "${THINKGATE_API_KEY:-}" ]]; then AUTH=(-H "Authorization: Bearer $THINKGATE_API_KEY"); fi
if ! curl -sf -o /dev/null "${AUTH[@]}" "$BASE/ready"; then
  echo "no thinkgate server ready at $BASE: start it with \`bash scripts/serve.sh\` and wait for its 'server.ready' log line (about 1.5 min)" >&2
  exit 2
fi
MODEL=$(curl -sf "${AUTH[@]}" "$BASE/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')

echo "# plain chat completion"
curl -sf "${AUTH[@]}" "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d @- <<JSON
{"model": "$MODEL", "max_tokens": 300,
 "messages": [{"role": "user", "content": "Compute 3+8-5+7 mod 10."}]}
JSON
echo

echo "# budgets in headers; -i shows X-Budget-Applied and X-Request-Id"
curl -sf -i "${AUTH[@]}" "$BASE/v1/chat/completions" -H 'Content-Type: application/json' \
  -H 'X-Budget-Thinking: 24' -H 'X-Budget-Solution: 12' -d @- <<JSON
{"model": "$MODEL",
 "messages": [{"role": "user", "content": "Compute 3+8-5+7 mod 10."}]}
JSON
echo

echo "# streaming (server-sent events)"
curl -sfN "${AUTH[@]}" "$BASE/v1/chat/completions" -H 'Content-Type: application/json' -d @- <<JSON
{"model": "$MODEL", "max_tokens": 300, "stream": true, "stream_options": {"include_usage": true},
 "messages": [{"role": "user", "content": "Compute 3+8-5+7 mod 10."}]}
JSON

echo "# a bad budget: 400 with the OpenAI error envelope naming the param"
curl -s "${AUTH[@]}" "$BASE/v1/chat/completions" -H 'Content-Type: application/json' \
  -H 'X-Budget-Thinking: -5' -d "{\"model\": \"$MODEL\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}"
echo
