"""Settings (flags > THINKGATE_* > defaults) and the CLI's dispatch (no engine)."""

from __future__ import annotations

import pytest

import testbed
from server import cli
from server.settings import Settings


def test_defaults_serve_the_testbed_model_on_loopback_8000() -> None:
    s = Settings()
    assert (s.host, s.port) == ("127.0.0.1", 8000)
    assert s.model_path == str(testbed.model_path("base"))
    assert s.model_name == "testbed-base"
    # Each model's own context (the testbed's 65,536); the suite runs at 512 (conftest).
    assert Settings.model_fields["max_model_len"].default is None


def test_environment_then_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THINKGATE_PORT", "9001")
    monkeypatch.setenv("THINKGATE_LOGITS_PROCESSORS", "a.b:C, d.e:F")
    monkeypatch.setenv("THINKGATE_REASONING", "false")
    assert Settings().port == 9001
    assert Settings().logits_processors == ("a.b:C", "d.e:F")
    assert Settings().reasoning is False
    parser = cli.settings_parser(Settings)
    args = parser.parse_args(["--port", "9002", "--no-reasoning", "--max-model-len", "256"])
    given = {k: v for k, v in vars(args).items() if v is not None}
    s = Settings(**given)
    assert (s.port, s.reasoning, s.max_model_len) == (9002, False, 256)


def test_settings_are_frozen_and_strict() -> None:
    s = Settings()
    with pytest.raises(ValueError):
        s.port = 1
    with pytest.raises(ValueError):
        Settings.model_validate({"no_such_setting": 1})
    with pytest.raises(ValueError):
        Settings(max_model_len=-1)


def test_missing_tool_is_a_clean_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(cli.TOOLS, "bench", "thinkgate_no_such_module.cli:main")
    assert cli.main(["bench", "--x"]) == 2
    assert "not available" in capsys.readouterr().err


def test_tools_receive_their_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setitem(cli.TOOLS, "bench", "tests.server.fake_tool:main")
    import sys
    import types

    fake = types.ModuleType("tests.server.fake_tool")

    def fake_main(argv: list[str]) -> int:
        seen.append(argv)
        return 3

    fake.main = fake_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tests.server.fake_tool", fake)
    assert cli.main(["bench", "--out", "x"]) == 3
    assert seen == [["--out", "x"]]


def test_unknown_command_and_bad_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["frobnicate"]) == 2
    assert cli.main(["serve", "--max-model-len", "4"]) == 2
    assert "bad settings" in capsys.readouterr().err


def test_serve_help_lists_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["serve", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for name in Settings.model_fields:
        assert "--" + name.replace("_", "-") in out


def test_serve_fails_fast_when_the_port_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    import socket
    import time

    from server.cli import listen_socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        assert cli.main(["serve", "--host", "127.0.0.1", "--port", str(port)]) == 1
        # Before any engine start: the error comes at once, not after the model loads.
        assert time.monotonic() - started < 10
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    sock = listen_socket("127.0.0.1", 0)
    try:
        assert sock.getsockname()[0] == "127.0.0.1" and sock.getsockname()[1] > 0
    finally:
        sock.close()


def test_engine_settings_are_grouped(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().engine == "local"
    monkeypatch.setenv("THINKGATE_ENGINE", "remote")
    monkeypatch.setenv("THINKGATE_VLLM_URLS", "http://a:8101/, http://b:8102")
    s = Settings()
    assert s.remote.urls == ("http://a:8101", "http://b:8102")  # trailing slash dropped
    assert s.remote.protocol == "auto" and s.remote.health_interval_s == 2.0
    assert s.local.logits_processors == ("confidence", "elastic", "guidance")
    assert s.local.batched_tokens == s.max_num_batched_tokens
    monkeypatch.setenv("THINKGATE_VLLM_URLS", "")
    with pytest.raises(ValueError, match="needs vllm_urls"):
        Settings()
