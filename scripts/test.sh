#!/usr/bin/env bash
# The test command of the README: set up (idempotent), then the suite on CPU with the
# real vLLM engine on the testbed model. Without arguments it runs two tiers side by
# side: the fast one (no vLLM, no server subprocess: `-m "not vllm and not slow"`, about
# three minutes on 2 cores in 2 pytest-xdist workers) at a lower priority, and the
# rest in one process (its tests share live servers, which workers would each start
# again). Arguments go to one pytest run instead (e.g. `bash scripts/test.sh tests/server
# -k abort`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/env.sh
# The live view's tests drive Debian's Chromium through Playwright (Playwright's own
# browser download cannot work on these machines); installed once, as root.
if [[ ! -x /usr/bin/chromium ]] && command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  echo "thinkgate tests: installing Debian's chromium for the browser tests (about a minute)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
# The Batch API's store runs against a real PostgreSQL server the tests start themselves
# (tests/postgres.py); Debian's binaries, installed once, as root.
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && command -v apt-get >/dev/null \
  && [[ $(id -u) == 0 ]]; then
  echo "thinkgate tests: installing Debian's postgresql for the batch store tests" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql \
    >/dev/null
fi
if [[ $# -gt 0 ]]; then
  exec .venv/bin/python -m pytest "$@"
fi
# The fast tier (pure Python, 2 pytest-xdist workers) runs beside the slow one at a
# lower priority: the slow tier's live servers leave about one of the 2 cores idle on
# average, and niced, the fast tier takes that core without slowing them much. Nice 10,
# not 19: at 19 a starved fast test waited over 10 s for a core. Its report follows the
# slow tier's; either failing fails the suite.
fast_log=$(mktemp)
nice -n 10 .venv/bin/python -m pytest -m "not vllm and not slow" -n 2 >"$fast_log" 2>&1 &
fast=$!
trap 'kill "$fast" 2>/dev/null || true' EXIT
slow_rc=0
# The slowest tests are printed: the suite must stay under 35 minutes on 2 cores.
.venv/bin/python -m pytest -m "vllm or slow" --durations=25 || slow_rc=$?
fast_rc=0
wait "$fast" || fast_rc=$?
trap - EXIT
echo "thinkgate tests: the fast tier (not vllm and not slow), run beside the slow one:"
cat "$fast_log"
rm -f "$fast_log"
if [[ $slow_rc -ne 0 || $fast_rc -ne 0 ]]; then
  echo "thinkgate tests: FAILED (slow tier exit $slow_rc, fast tier exit $fast_rc)" >&2
  exit 1
fi
