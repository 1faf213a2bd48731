"""SGLang's Anthropic Messages tests, unmodified, against the live server.

The kit: ``AnthropicMessagesMixin`` in ``sglang/test/kits/anthropic_messages_kit.py`` of
the PyPI wheel ``sglang==0.5.23`` (sha256 of that file below, ``KIT_SHA256``; SGLang's
CI hosts it in ``test/registered/openai_server/basic/test_openai_server.py``). It runs in
its own virtual environment, built here on first use under ``~/.cache/thinkgate``
(``SGLANG_KIT_ENV`` points elsewhere): the wheel without its dependencies (torch, CUDA
kernels: gigabytes, and the kit's tests of the server need none of them) and what those
tests import, pinned in ``PINS``. ``anthropic`` is the last release before 1.0 (0.125.0):
SGLang's metadata asks only ``anthropic>=0.20.0``, and its Anthropic tests were written
for the 0.x SDK (they hand it an ``httpx.Client``; from 1.0 it takes only ``httpx2``'s).
tests/clients/sglang_kit_host.py hosts the mixin (a ``unittest.TestCase`` with the
server's URL, key and model, as SGLang's own host class). Every test not in ``BEYOND``
must pass; a listed test may pass.

By hand, against any server::

    SGLANG_KIT_BASE_URL=http://127.0.0.1:8000 SGLANG_KIT_MODEL=testbed-base \\
      ~/.cache/thinkgate/sglang-kit-0.5.23/bin/python -m pytest -q \\
      --noconftest -c /dev/null tests/clients/sglang_kit_host.py
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HOST = HERE / "sglang_kit_host.py"
SGLANG = "sglang==0.5.23"
KIT_SHA256 = "41bf4244485e0949f903b7d8f8b443ba0e22e8620a11e048fd02ca60961b82a3"
KIT_TESTS = 21  # the kit's tests at 0.5.23
PINS = ("anthropic==0.125.0", "requests==2.34.2", "pytest==9.2.0")
ENV = Path(
    os.environ.get("SGLANG_KIT_ENV", Path.home() / ".cache" / "thinkgate" / "sglang-kit-0.5.23")
)
STAMP = ENV / ".thinkgate-pins"

# Test name -> why it cannot pass here, or not every time. Nothing else may fail.
THINKS_FIRST = (
    "the kit wants content[0] (a stream: every delta) to be text; the testbed is a "
    "reasoning model, so its answer starts with its thinking block (thinking_delta), as "
    "SGLang's own server answers for a reasoning model"
)
BEYOND: dict[str, str] = {
    "test_simple_messages": THINKS_FIRST,
    "test_multi_turn_messages": THINKS_FIRST,
    "test_in_messages_system_role": THINKS_FIRST,
    "test_content_blocks_message": THINKS_FIRST,
    "test_simple_messages_stream": THINKS_FIRST,
    "test_tool_result_image_content_conversion": (
        "tests SGLang's own code, not the server: it calls SGLang's AnthropicServing "
        "converter in-process (not installed here: it needs torch and SGLang's kernels)"
    ),
}


def ensure_env() -> Path:
    """The kit's environment, built once (its pins stamped); returns its python."""
    python = ENV / "bin" / "python"
    want = "\n".join((SGLANG, *PINS))
    ENV.parent.mkdir(parents=True, exist_ok=True)
    with open(ENV.parent / ".sglang-kit.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two sessions on one cache: one builds
        if STAMP.exists() and STAMP.read_text() == want and python.exists():
            return python
        shutil.rmtree(ENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(ENV)], check=True, timeout=300)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        # --no-deps: the wheel asks for torch, CUDA kernels and the rest of a GPU server.
        subprocess.run([*pip, "--no-deps", SGLANG], check=True, timeout=900)
        subprocess.run([*pip, *PINS], check=True, timeout=900)
        STAMP.write_text(want)
    return python


def kit_file(python: Path) -> Path:
    code = "import sglang_kit_host as h; print(h.kit_path())"
    found = subprocess.run(
        [str(python), "-c", code], cwd=HERE, capture_output=True, text=True, timeout=60
    )
    assert found.returncode == 0, found.stderr[-2000:]
    return Path(found.stdout.strip())


def outcomes(junit: Path) -> dict[str, str]:
    """Test name -> passed, failed or skipped, from pytest's junit XML."""
    seen: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        status = "failed" if kinds & {"failure", "error"} else "passed"
        seen[case.attrib["name"]] = "skipped" if "skipped" in kinds else status
    return seen


@pytest.mark.vllm
@pytest.mark.slow
def test_sglang_anthropic_kit_passes_every_protocol_test(
    base_url: str, served_model: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    python = ensure_env()
    built_s = time.monotonic() - started
    kit = kit_file(python)
    assert hashlib.sha256(kit.read_bytes()).hexdigest() == KIT_SHA256, f"{kit} changed"
    # A copy, run from tmp_path: no conftest or pytest settings of this repo reach it.
    shutil.copy(HOST, tmp_path / "test_sglang_kit.py")
    junit = tmp_path / "junit.xml"
    env = {
        **os.environ,
        "SGLANG_KIT_BASE_URL": base_url,
        "SGLANG_KIT_MODEL": served_model,
        "SGLANG_KIT_API_KEY": "unused",
    }
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"]
        + ["--rootdir", str(tmp_path), f"--junitxml={junit}", "test_sglang_kit.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = f"(env ready in {built_s:.0f} s)\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    assert junit.exists(), report
    seen = outcomes(junit)
    failed = sorted(name for name, status in seen.items() if status == "failed")
    passed = sorted(name for name, status in seen.items() if status == "passed")
    print(
        f"SGLang kit: {len(passed)} passed / {len(seen)} run / {len(BEYOND)} listed "
        f"(listed that passed: {sorted(set(passed) & set(BEYOND))}); env {built_s:.0f} s"
    )
    assert not set(failed) - set(BEYOND), report
    assert set(BEYOND) <= set(seen), f"listed tests the kit lacks: {set(BEYOND) - set(seen)}"
    assert len(seen) == KIT_TESTS, report  # none lost to an import or collection error
