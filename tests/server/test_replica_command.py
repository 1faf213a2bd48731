"""``thinkgate replica``: the vLLM command it runs (dry run; the live replicas are in
test_remote_engine.py and test_remote_fallback.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import testbed
from engines.local.prefix_cache import CPU_BLOCK, block_size
from engines.local.replica import build_command

ROOT = Path(__file__).resolve().parents[2]


def _after(cmd: list[str], flag: str) -> list[str]:
    i = cmd.index(flag)
    out = []
    for a in cmd[i + 1 :]:
        if a.startswith("--"):
            break
        out.append(a)
    return out


def test_testbed_replica_on_cpu_loads_our_v1_processors_and_the_guidance_wrapper() -> None:
    cmd = build_command(None, ["--port", "8101"], runner="v1", cpu=True)
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert _after(cmd, "--model") == [str(testbed.model_path("base"))]
    assert "--enable-scale-out" in cmd
    assert _after(cmd, "--shutdown-timeout") == ["30"]  # SIGTERM drains what it runs
    assert _after(cmd, "--logits-processors") == [
        "kernels.confidence.vllm_v1:ConfidenceLogitsProcessor",
        "kernels.elastic.vllm_v1:ElasticLogitsProcessor",
        "kernels.guidance.vllm_v1:BudgetGuidanceLogitsProcessor",
    ]
    assert json.loads(_after(cmd, "--hf-overrides")[0]) == {"architectures": ["BGQwen2ForCausalLM"]}
    # CPU safety: no chunked prefill (a seeded chunked prefill kills the CPU engine).
    assert "--no-enable-chunked-prefill" in cmd and _after(cmd, "--dtype") == ["float32"]
    # The prefix cache in 32-token blocks (vLLM's CPU default, 128, reuses half as much).
    assert _after(cmd, "--block-size") == ["32"]
    assert _after(cmd, "--served-model-name") == ["testbed-base"]
    # Unchunked prefills: vLLM refuses a step smaller than the default's 65,536 positions.
    assert _after(cmd, "--max-model-len") == ["65536"]
    assert _after(cmd, "--max-num-batched-tokens") == ["65536"]
    # JSON answers: the grammar waits for </think>, and is compact as the gateway's own.
    assert _after(cmd, "--reasoning-parser") == ["deepseek_r1"]
    assert json.loads(_after(cmd, "--structured-outputs-config")[0]) == {
        "backend": "xgrammar",
        "disable_any_whitespace": True,
    }
    assert cmd[-2:] == ["--port", "8101"]


def test_model_runner_v2_gets_the_v2_classes() -> None:
    cmd = build_command(None, [], runner="v2", cpu=False)
    assert _after(cmd, "--logits-processors") == [
        "kernels.confidence.vllm_v2:ConfidenceLogitsProcessorV2",
        "kernels.elastic.vllm_v2:ElasticLogitsProcessorV2",
        "kernels.guidance.vllm_v2:BudgetGuidanceLogitsProcessorV2",
    ]
    assert "--no-enable-chunked-prefill" not in cmd and "--dtype" not in cmd
    assert "--block-size" not in cmd  # vLLM's GPU default


def test_a_model_without_predictor_gets_no_guidance(tmp_path: Path) -> None:
    cmd = build_command(str(tmp_path), ["--max-model-len", "4096"], runner="v1", cpu=True)
    assert _after(cmd, "--logits-processors") == [
        "kernels.confidence.vllm_v1:ConfidenceLogitsProcessor",
        "kernels.elastic.vllm_v1:ElasticLogitsProcessor",
    ]
    assert "--hf-overrides" not in cmd and "--served-model-name" not in cmd
    assert cmd.count("--max-model-len") == 1


def test_a_profiles_predictor_guides_a_model_without_one(tmp_path: Path) -> None:
    import shutil

    profile = tmp_path / "profile"
    shutil.copytree(testbed.model_path("base") / "bg_predictor", profile / "bg_predictor")
    model = tmp_path / "model"
    model.mkdir()
    cmd = build_command(str(model), [], runner="v1", cpu=True, profile=str(profile))
    assert "kernels.guidance.vllm_v1:BudgetGuidanceLogitsProcessor" in _after(
        cmd, "--logits-processors"
    )
    overrides = json.loads(cmd[cmd.index("--hf-overrides") + 1])
    assert overrides["thinkgate_predictor_home"] == str(profile)


def test_user_flags_win_and_no_processors_means_none() -> None:
    cmd = build_command(
        None,
        ["--max-model-len", "256", "--dtype", "bfloat16", "--block-size", "128"],
        processors=(),
        runner="v1",
        cpu=True,
    )
    assert "--logits-processors" not in cmd and "--hf-overrides" not in cmd
    assert cmd.count("--max-model-len") == 1 and _after(cmd, "--max-model-len") == ["256"]
    assert cmd.count("--dtype") == 1 and _after(cmd, "--dtype") == ["bfloat16"]
    assert cmd.count("--block-size") == 1 and _after(cmd, "--block-size") == ["128"]
    assert _after(cmd, "--max-num-batched-tokens") == ["32768"]  # a full batch of prompts
    mine = build_command(None, ["--shutdown-timeout", "5"], runner="v1", cpu=True)
    assert mine.count("--shutdown-timeout") == 1 and _after(mine, "--shutdown-timeout") == ["5"]


def test_a_step_holds_the_whole_context_a_model_declares(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 131072}))
    cmd = build_command(str(tmp_path), [], runner="v1", cpu=True)
    assert _after(cmd, "--max-num-batched-tokens") == ["131072"]
    given = build_command(str(tmp_path), ["--max-model-len=40000"], runner="v1", cpu=True)
    assert _after(given, "--max-num-batched-tokens") == ["40000"]
    mine = build_command(str(tmp_path), ["--max-num-batched-tokens", "8192"], runner="v1", cpu=True)
    assert mine.count("--max-num-batched-tokens") == 1


@pytest.mark.slow  # a `thinkgate replica --print` subprocess (imports vLLM): ~5 s
def test_cli_prints_the_exact_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", "replica", "--dry-run", "--port", "8123"],
        cwd=ROOT,
        env={
            k: v
            for k, v in os.environ.items()
            if k
            not in (
                "THINKGATE_ENGINE_SPIN_MS",
                "VLLM_ENABLE_V1_MULTIPROCESSING",
                "VLLM_CPU_KVCACHE_SPACE",
                "VLLM_CPU_OMP_THREADS_BIND",
            )
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    line = done.stdout.strip().splitlines()[-1]
    assert "vllm.entrypoints.openai.api_server" in line and line.endswith("--port 8123")
    # On CPU: a KV cache that leaves room for a second engine, no pinning to one core
    # (engines/local/cpu_host.py), the model in the engine core (engines/local/executor.py)
    # and the short spin (engines/local/engine_wait.py), shown so that a team copying the
    # command gets them too.
    assert line.startswith(
        "VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind "
        "VLLM_ENABLE_V1_MULTIPROCESSING=0 THINKGATE_ENGINE_SPIN_MS=1 "
    )
    assert "--enable-scale-out" in line and "kernels.elastic.vllm_v1:ElasticLogitsProcessor" in line


def test_the_router_command_carries_the_flags_a_gateway_needs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from engines.local.replica import ROUTER_FLAGS, build_router_command, main

    urls = ["http://127.0.0.1:8101", "http://127.0.0.1:8102"]
    cmd = build_router_command(urls, ["--port", "8100", "--policy", "power_of_two"])
    assert cmd[0].endswith("vllm-router") and _after(cmd, "--worker-urls")[:2] == urls
    assert cmd.count("--policy") == 1 and _after(cmd, "--policy") == ["power_of_two"]
    for flag, value in ROUTER_FLAGS:
        if flag != "--policy":
            assert _after(cmd, flag) == [value]
    assert main(["--router", ",".join(urls), "--port", "8100", "--dry-run"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("RUST_LOG=warn ") and "--policy sticky_least_loaded" in line
    assert line.endswith("--port 8100")


def test_engines_take_32_token_blocks_on_cpu_unless_told() -> None:
    assert block_size(None, on_cpu=True) == CPU_BLOCK == 32
    assert block_size(None, on_cpu=False) is None  # vLLM's own (16 on GPUs)
    assert block_size(128, on_cpu=True) == 128
