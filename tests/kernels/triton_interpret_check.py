"""The Elastic Triton kernels (mask, track) vs their torch references on CPU tensors:
the GPU check's own checks (kernels/gpu_check/checks.py) run by Triton's interpreter,
at small and odd shapes (vocab 1 to 5003, 0 to 12 rows, mapped or not).

Run by test_elastic_triton.py in a child process with TRITON_INTERPRET=1 (the variable
must be set before triton is imported and must not leak into vLLM engines). Exit status
0 and a last line "ok <cases>" when every case matches.
"""

from __future__ import annotations

import os
import random
import sys

import torch

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

from kernels.gpu_check.checks import check_elastic_mask, check_elastic_track  # noqa: E402

CPU = torch.device("cpu")
VOCABS = (1, 3, 100, 1000, 2047, 2048, 2049, 5003)


def main() -> int:
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    cases = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    rng = random.Random(seed)
    shapes = [(rng.randint(0, 12), rng.choice(VOCABS)) for _ in range(cases)]
    for result in (
        check_elastic_mask(CPU, shapes, seed),
        check_elastic_track(CPU, cases, seed, max_rows=10, lengths=(17, 200, 300)),
    ):
        if not result.ok:
            print(f"{result.name} mismatch: {result.detail}")
            return 1
    print(f"ok {cases}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
