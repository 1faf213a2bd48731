#!/usr/bin/env bash
# The test command of the README: set up (idempotent), then the suite on CPU with the
# real vLLM engine on the testbed model. Without arguments it runs two tiers: the fast
# one first (no vLLM, no server subprocess: `-m "not vllm and not slow"`, about three
# minutes on 2 cores in 2 pytest-xdist workers), so that a broken unit fails early, then
# the rest in one process (its tests share live servers, which workers would each start
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
# Pure Python on one core each: two workers take it from 4.4 to 3.0 minutes on 2 cores.
.venv/bin/python -m pytest -m "not vllm and not slow" -n 2
# The slowest tests are printed: the suite must stay under 45 minutes on 2 cores. The
# acceptance tests (the checks that the models and strategies are accurate: seeded,
# about 4 minutes) run here too, so CI runs them.
exec .venv/bin/python -m pytest -m "vllm or slow" --acceptance --durations=25
