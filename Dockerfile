# thinkgate on a GPU: the pinned vLLM release, our package on top. One image, two roles
# (scripts/docker-entrypoint.sh; docs/deployment.md):
#   docker build -t thinkgate .
#   gateway, engine in process:
#   docker run --gpus all -p 8000:8000 -v ~/.cache/huggingface:/root/.cache/huggingface \
#       thinkgate --model Qwen/Qwen3-8B --max-model-len 32768
#   replica (vLLM's server + our processors), and a gateway in front of replicas:
#   docker run --gpus all -p 8101:8000 thinkgate replica --model Qwen/Qwen3-8B
#   docker run -p 8000:8000 thinkgate serve --engine remote --model Qwen/Qwen3-8B \
#       --vllm-urls http://host-a:8101,http://host-b:8101
# Without --model the image serves the testbed model (CPU-sized; a smoke test only).
# The CPU image is Dockerfile.cpu. Built and checked without a GPU by
# scripts/image-gpu.sh (buildah), which falls back to a Debian base with vLLM's CUDA
# wheel from PyPI where vLLM's image cannot be pulled.
#   BASE       vLLM's image (vLLM in it), or any Debian-based image with Python >= 3.11
#              and pip on PATH, a C compiler and Python's headers (Triton builds its
#              launchers at run time), given VLLM_SPEC.
#   VLLM_SPEC  empty: the base has vLLM; else what pip puts in first, e.g. vllm==0.32.0
#              (the `gpu` extra's pin; its torch is PyPI's CUDA build).
#   PIP_CERT   a CA bundle for pip behind a TLS-inspecting proxy (mounted by the build).
ARG BASE=vllm/vllm-openai:v0.32.0
FROM ${BASE}
ARG VLLM_SPEC=
ARG PIP_CERT

# Before our code, so a code change rebuilds only the layers below (where layers are kept).
RUN if [ -n "$VLLM_SPEC" ]; then pip install --no-cache-dir "$VLLM_SPEC"; fi \
 && python3 -c "import vllm"

WORKDIR /opt/thinkgate
COPY pyproject.toml README.md ./
COPY server ./server
COPY engines ./engines
COPY strategies ./strategies
COPY kernels ./kernels
COPY core ./core
COPY clients ./clients
COPY testbed ./testbed
COPY scripts/docker-entrypoint.sh ./scripts/docker-entrypoint.sh
# vllm is already in the image and is not among thinkgate's own dependencies (it is the
# `gpu` extra): this installs exactly pyproject.toml's list, keeping what the image has
# where it satisfies it. No second, hand-kept list to drift.
RUN pip install --no-cache-dir -e .

ENV THINKGATE_HOST=0.0.0.0 THINKGATE_PORT=8000 THINKGATE_DTYPE=auto \
    THINKGATE_ENFORCE_EAGER=false
EXPOSE 8000
ENTRYPOINT ["/opt/thinkgate/scripts/docker-entrypoint.sh"]
