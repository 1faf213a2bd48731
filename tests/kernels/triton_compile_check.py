"""Compile the Elastic Triton kernels ahead of time for an H100 (sm_90) without a GPU.

Run by test_elastic_triton.py in a child process (no TRITON_INTERPRET there: the real
compiler pipeline TTIR -> TTGIR -> LLVM IR -> PTX -> cubin, with Triton's bundled
ptxas). This proves the kernels compile for CUDA; it does not run them.
Exit status 0 and a last line "ok <kernels>".
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, compile

from kernels.elastic import mask_triton, track_triton
from kernels.elastic.state import ElasticCol

TARGET = GPUTarget("cuda", 90, 32)


def build(fn: Any, types: Mapping[str, str], consts: Mapping[str, object]) -> int:
    names = list(fn.arg_names)
    assert set(names) == set(types) | set(consts), set(names) ^ (set(types) | set(consts))
    signature = {n: types.get(n, "constexpr") for n in names}
    constexprs = {(names.index(n),): v for n, v in consts.items()}
    kernel = compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs), target=TARGET)
    return len(kernel.asm["cubin"])


def main() -> int:
    cols = {
        "COL_ACTIVE": int(ElasticCol.ACTIVE),
        "COL_PHASE": int(ElasticCol.PHASE),
        "COL_USED": int(ElasticCol.USED),
    }
    mask_types = {
        "logits_ptr": "*fp32",
        "logits_stride": "i64",
        "idx_mapping_ptr": "*i32",
        "table_ptr": "*i32",
        "table_stride": "i64",
        "vocab_size": "i32",
    }
    built = 0
    for has_mapping in (True, False):
        consts = {
            **cols,
            "HAS_MAPPING": has_mapping,
            "COL_T": int(ElasticCol.THINK_BUDGET),
            "COL_S": int(ElasticCol.SOLUTION_BUDGET),
            "COL_END": int(ElasticCol.THINK_END_ID),
            "COL_EOS": int(ElasticCol.EOS_ID),
            "BLOCK": mask_triton._BLOCK,
        }
        assert build(mask_triton._elastic_mask_kernel, mask_types, consts) > 0
        built += 1
    track_types = {
        "table_ptr": "*i32",
        "table_stride": "i64",
        "idx_mapping_ptr": "*i32",
        "all_token_ids_ptr": "*i32",
        "all_token_ids_stride": "i64",
        "prompt_len_ptr": "*i32",
        "total_len_ptr": "*i32",
    }
    track_consts = {
        **cols,
        "COL_END_ID": int(ElasticCol.THINK_END_ID),
        "COL_OPEN": int(ElasticCol.THINKING_OPEN),
        "COL_END_POS": int(ElasticCol.THINK_END_POS),
        "COL_SCAN_POS": int(ElasticCol.SCAN_POS),
        "BLOCK": track_triton._BLOCK,
    }
    assert build(track_triton._elastic_track_kernel, track_types, track_consts) > 0
    built += 1
    print(f"ok {built}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
