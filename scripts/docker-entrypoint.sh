#!/bin/sh
# The image serves either role:
#   docker run IMAGE [serve] [--model ...]      the gateway (default when no role is named)
#   docker run IMAGE replica [--model ...]      vLLM's own server with thinkgate's processors
# Other thinkgate commands (bench, calibrate, testbed, train-predictor) run as named.
set -e
case "$1" in
  replica)
    shift
    # Listen on every interface inside the container; later flags win (vLLM's parser).
    exec thinkgate replica --host 0.0.0.0 --port 8000 "$@" ;;
  serve|bench|calibrate|testbed|train-predictor)
    exec thinkgate "$@" ;;
  *)
    exec thinkgate serve "$@" ;;
esac
