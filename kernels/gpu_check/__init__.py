"""The GPU check: every Triton kernel against its torch reference on CUDA, the Model
Runner V2 adapters on hand-built CUDA batches, and kernel timings against the
memory-bandwidth floor. One command: ``bash scripts/gpu-check.sh`` (or
``python -m kernels.gpu_check``) from the repo root of a plain working tree, on a machine
with only torch and Triton installed (see docs/gpu-check.md)."""
