# Sourced by scripts/serve.sh and scripts/test.sh: the CPU engine's environment.
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1}
# vLLM's default ("auto") pins every engine's worker to core 0: with the gateway's
# generation and reward engines (and the suite's own engines) on 2 cores they would
# all share one core. Unpinned, one thread each, the OS spreads them.
export VLLM_CPU_OMP_THREADS_BIND=${VLLM_CPU_OMP_THREADS_BIND:-nobind}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TOKENIZERS_PARALLELISM=false
