"""The GPU check (kernels/gpu_check): its pieces on CUDA (marked gpu, skipped without a
device), and on CPU what needs no GPU: the vLLM stand-ins, the bandwidth-floor
arithmetic, the report table, the script's no-CUDA path and a Triton-interpreter run."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels.gpu_check import timing

ROOT = Path(__file__).resolve().parents[2]


def _cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    return torch.device("cuda")


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    full.update(PYTHONPATH=str(ROOT), **env)
    return subprocess.run(
        [sys.executable, "-c", code],
        env=full,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


# --- CPU ------------------------------------------------------------------------------


def test_standins_import_the_v2_adapters() -> None:
    code = """
from kernels.gpu_check import vllm_standin as s
assert s.install(force=True)
from kernels.elastic.vllm_v2 import ElasticLogitsProcessorV2
from kernels.confidence.vllm_v2 import ConfidenceLogitsProcessorV2
from kernels.guidance.vllm_v2 import BudgetGuidanceLogitsProcessorV2
for cls in (ElasticLogitsProcessorV2, ConfidenceLogitsProcessorV2, BudgetGuidanceLogitsProcessorV2):
    assert s.is_standin(cls), cls
print("ok")
"""
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"


def test_standins_install_nothing_when_vllm_is_there() -> None:
    from kernels.gpu_check.vllm_standin import install, vllm_available

    if not vllm_available():
        pytest.skip("vLLM is not installed")
    assert install() is False


def test_standins_match_vllm_interface() -> None:
    real = pytest.importorskip("vllm.v1.worker.gpu.sample.logits_processor")
    from kernels.gpu_check import vllm_standin as s

    for name in ("LogitsContext", "LogitsProcRequestState"):
        want = [f.name for f in dataclasses.fields(getattr(real, name))]
        assert [f.name for f in dataclasses.fields(getattr(s, name))] == want, name
    methods = ("__init__", "validate_params", "add_request", "apply_staged_writes", "apply")
    for m in methods:
        assert hasattr(real.LogitsProcessor, m) and hasattr(s.LogitsProcessor, m)
    assert s.LogitsProcessor.__abstractmethods__ == real.LogitsProcessor.__abstractmethods__


def test_peak_table_and_floor_arithmetic() -> None:
    assert timing.table_peak("NVIDIA H100 80GB HBM3") == 3.35e12
    assert timing.table_peak("NVIDIA H100 PCIe") == 2.0e12
    assert timing.table_peak("NVIDIA H200") == 4.8e12
    assert timing.table_peak("NVIDIA A100-SXM4-80GB") == 2.039e12
    assert timing.table_peak("NVIDIA GH200 480GB") == 4.0e12
    assert timing.table_peak("Some Future GPU") is None
    # 151936 fp32 logits x 64 rows written once at 3.35 TB/s.
    nbytes = 64 * 151936 * 4
    assert timing.floor_us(nbytes, 3.35e12) == pytest.approx(11.61, abs=0.01)
    assert timing.gbps(nbytes, 20.0) == pytest.approx(1944.8, abs=0.1)
    t = timing.Timing("k", "64x151936", 20.0, 40.0, nbytes, 3.35e12)
    assert t.of_floor == pytest.approx(11.61 / 20.0, abs=1e-3)
    assert t.row()["achieved_gbps"] == pytest.approx(1944.8, abs=0.1)


def test_report_table() -> None:
    t = timing.Timing("elastic mask", "1x151936", 5.0, 9.5, 607744, 3.35e12)
    lines = timing.markdown_table([t]).splitlines()
    assert lines[0].startswith("| kernel | shape | median us")
    assert len(lines) == 3
    assert lines[2] == "| elastic mask | 1x151936 | 5.0 | 9.5 | 0.61 | 122 | 0.18 | 4% |"


def test_script_without_cuda_skips_with_exit_0() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run(
        ["bash", "scripts/gpu-check.sh"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible despite CUDA_VISIBLE_DEVICES")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "skipped: no CUDA device" in proc.stdout


def test_thinkgate_gpu_check_without_cuda_skips_with_exit_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the check would run for real")
    from server.cli import main

    assert main(["gpu-check", "--no-timings"]) == 0
    assert "skipped: no CUDA device" in capsys.readouterr().out


def test_check_under_the_triton_interpreter(tmp_path: Path) -> None:
    """Every correctness step on CPU tensors in Triton's interpreter (small shapes)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore",
            "-m",
            "kernels.gpu_check",
            "--device",
            "cpu",
            "--interpret",
            "--no-timings",
            "--out",
            str(tmp_path),
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (tmp_path / "gpu-check.md").read_text()
    assert report.count("| PASS |") == 6 and "FAIL" not in report


def test_a_failed_check_exits_1(tmp_path: Path) -> None:
    code = f"""
import sys
from kernels.gpu_check import checks
from kernels.gpu_check.__main__ import main
checks.check_elastic_track = lambda device, cases: checks.Result("elastic track", False, "x")
checks.check_gamma = lambda device, shapes: 1 / 0
sys.exit(main(["--device", "cpu", "--interpret", "--no-timings", "--out", {str(tmp_path)!r}]))
"""
    proc = _run(code, TRITON_INTERPRET="1")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = (tmp_path / "gpu-check.md").read_text()
    assert "| elastic track | FAIL | x |" in report
    assert "raised ZeroDivisionError" in report and report.count("| PASS |") == 4


# --- CUDA -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_checks():  # type: ignore[no-untyped-def]
    _cuda()  # the stand-ins go into sys.modules only on a CUDA machine without vLLM
    from kernels.gpu_check.vllm_standin import install

    install()
    from kernels.gpu_check import checks

    return checks


@pytest.mark.gpu
def test_gpu_elastic_kernels(gpu_checks) -> None:  # type: ignore[no-untyped-def]
    dev = _cuda()
    res = gpu_checks.check_elastic_mask(dev, [(1, 151936), (3, 2049), (64, 151936)])
    assert res.ok, res.detail
    res = gpu_checks.check_elastic_track(dev, 10)
    assert res.ok, res.detail


@pytest.mark.gpu
def test_gpu_gamma_kernel(gpu_checks) -> None:  # type: ignore[no-untyped-def]
    res = gpu_checks.check_gamma(_cuda(), [(1, 151936), (4, 2049)])
    assert res.ok, res.detail


@pytest.mark.gpu
def test_gpu_v2_adapters(gpu_checks) -> None:  # type: ignore[no-untyped-def]
    dev = _cuda()
    for res in (
        gpu_checks.check_elastic_v2(dev, 151936),
        gpu_checks.check_confidence_v2(dev, 151936),
        gpu_checks.check_guidance_v2(dev, 32000),
    ):
        assert res.ok, f"{res.name}: {res.detail}"


@pytest.mark.gpu
def test_gpu_timings_and_report(tmp_path: Path) -> None:
    _cuda()
    from kernels.gpu_check.__main__ import main

    assert main(["--out", str(tmp_path)]) == 0
    assert "floor/time" in (tmp_path / "gpu-check.md").read_text()
