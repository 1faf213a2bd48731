"""Keys files: parsing, hashed keys only, limits over defaults, reload without a
restart, and the budget limits a tenant puts on what a request may ask."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.errors import OverTenantLimit, Unauthorized
from server.pipeline import budgets
from server.settings import Settings
from server.tenancy.keys_cli import main as keys_cli
from server.tenancy.tenants import (
    Keyring,
    KeysFileError,
    Tenant,
    TenantLimits,
    hashed,
    parse_keys_file,
)

KEY_A, KEY_B = "tg-alpha-secret", "tg-beta-secret"


def _file(*tenants: tuple[str, str, str]) -> str:
    lines = ["[defaults]", "requests_per_minute = 600", ""]
    for name, key, extra in tenants:
        lines += [f"[tenants.{name}]", f'keys = ["{hashed(key)}"]', extra, ""]
    return "\n".join(lines)


def test_a_keys_file_names_tenants_with_their_limits_over_the_defaults() -> None:
    table = parse_keys_file(
        _file(("alpha", KEY_A, "weight = 2\nbudget_samples = 8"), ("beta", KEY_B, ""))
    )
    alpha = table.tenant_of(KEY_A)
    assert alpha is not None and alpha.name == "alpha" and alpha.weight == 2
    assert alpha.limits.budget_samples == 8 and alpha.limits.requests_per_minute == 600
    beta = table.tenant_of(KEY_B)
    assert beta is not None and beta.limits == TenantLimits(requests_per_minute=600)
    assert table.tenant_of("tg-unknown") is None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('[tenants.a]\nkeys = ["tg-plain-key"]', "never the key itself"),
        ("[tenants.a]\nbudget_sample = 3", "budget_sample"),
        ("[tenants.a]\nweight = 0", "weight"),
        ("[tenants.a]\nmax_inflight_samples = -1", "max_inflight_samples"),
        ("[tenants.a", "not TOML"),
        (f'[tenants.a]\nkeys = ["{hashed("k")}"]\n[tenants.b]\nkeys = ["{hashed("k")}"]', "'a'"),
    ],
)
def test_a_bad_keys_file_is_refused_naming_what_is_wrong(text: str, named: str) -> None:
    with pytest.raises(KeysFileError) as info:
        parse_keys_file(text, "keys.toml")
    assert named in str(info.value) and "keys.toml" in str(info.value)
    assert "tg-plain-key" not in str(info.value)  # a key pasted by mistake is not echoed


def test_the_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(_file(("alpha", KEY_A, ""), ("beta", KEY_B, "")))
    keys = Keyring(path=path)
    assert keys.identify(KEY_B).name == "beta"
    path.write_text(_file(("alpha", KEY_A, "budget_samples = 4")))  # beta revoked
    with pytest.raises(Unauthorized):
        keys.identify(KEY_B)  # refused at once
    assert keys.identify(KEY_A).limits.budget_samples == 4
    path.write_text(_file(("alpha", KEY_A, ""), ("gamma", "tg-new", "")))
    assert keys.identify("tg-new").name == "gamma"  # admitted without a restart
    path.write_text("[tenants.broken")  # a broken edit keeps the last good table
    assert keys.identify("tg-new").name == "gamma"
    assert keys.reload_failures == 1
    os.remove(path)  # deleted: its keys are revoked, the failure logged once
    for _ in range(2):
        with pytest.raises(Unauthorized):
            keys.identify(KEY_A)
    assert keys.reload_failures == 2
    path.write_text(_file(("alpha", KEY_A, "")))  # back: admitted again
    assert keys.identify(KEY_A).name == "alpha"


def test_a_keys_file_that_does_not_parse_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text("[tenants.a]\nbudget_tokens = 'lots'")
    with pytest.raises(KeysFileError, match="budget_tokens"):
        Keyring(path=path)


def test_plain_keys_and_a_keys_file_together(tmp_path: Path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(_file(("alpha", KEY_A, "")))
    keys = Keyring(plain=("plain-key",), path=path)
    assert keys.identify(KEY_A).name == "alpha"
    assert keys.identify("plain-key").name.startswith("key-")
    assert {t.name for t in keys.tenants()} >= {"alpha"}


def test_keys_cli_makes_a_key_and_checks_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert keys_cli(["new"]) == 0
    out = capsys.readouterr().out
    key = out.split("key:")[1].split()[0]
    assert hashed(key) in out
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(f"{KEY_A}\n"))
    assert keys_cli(["hash"]) == 0
    assert capsys.readouterr().out.strip() == hashed(KEY_A)
    path = tmp_path / "keys.toml"
    path.write_text(_file(("alpha", KEY_A, "budget_samples = 8")))
    assert keys_cli(["check", str(path)]) == 0
    assert "alpha: 1 key(s), weight 1" in capsys.readouterr().out
    path.write_text("[tenants.a]\nnope = 1")
    assert keys_cli(["check", str(path)]) == 1


CAPPED = Tenant(
    name="capped",
    limits=TenantLimits(
        budget_samples=8, budget_thinking=100, budget_tokens=2000, budget_deadline_ms=5000
    ),
)


@pytest.mark.parametrize(
    ("header", "under", "over"),
    [
        ("X-Budget-Samples", "8", "9"),
        ("X-Budget-Thinking", "100", "101"),
        ("X-Budget-Tokens", "2000", "2001"),
        ("X-Budget-Deadline-Ms", "5000", "5001"),
    ],
)
def test_a_budget_over_the_tenants_limit_is_a_400_naming_it(
    header: str, under: str, over: str
) -> None:
    settings = Settings()
    budgets.resolve({header: under}, {}, settings, tenant=CAPPED)
    with pytest.raises(OverTenantLimit) as info:
        budgets.resolve({header: over}, {}, settings, tenant=CAPPED)
    err = info.value
    assert err.status == 400 and err.param == header and err.code == "tenant_limit_exceeded"
    assert f"{header} is {over}; tenant 'capped' may ask for at most {under}" == err.message


def test_what_a_request_did_not_ask_for_is_held_to_the_tenants_limits() -> None:
    settings = Settings(default_samples=16, default_thinking=500)
    _, budget = budgets.resolve({"X-Strategy": "self-consistency"}, {}, settings, tenant=CAPPED)
    # the server's defaults are capped; the request's ceiling and deadline are the tenant's
    assert (budget.samples, budget.tokens, budget.deadline_ms) == (8, 2000, 5000)
    # an effort chooses a thinking budget for the client: held to the limit, not refused
    _, budget = budgets.resolve({}, {"reasoning_effort": "high"}, Settings(), tenant=CAPPED)
    assert budget.thinking == 100
    # a tenant without limits changes nothing
    _, plain = budgets.resolve({}, {}, Settings(), tenant=Tenant(name="free"))
    assert plain.tokens is None and plain.deadline_ms is None
