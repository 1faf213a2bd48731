"""The server a fit or a judgment measures: ``--server URL`` as it is, or one started on
``--model`` (default: the installed default model) for the run and stopped after.

A fit's server runs the fixed plans only (no ``auto`` table, no reward model); a
judgment's runs ``auto`` from the profile judged (``--profile DIR``), and a server given
by URL must be serving that profile.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from core import defaults
from server.calibrate.local_server import thinkgate


class ServerError(RuntimeError):
    """The server to measure cannot be had."""


@contextmanager
def serving(args: argparse.Namespace, *, profile: Path | None) -> Iterator[str]:
    """The URL to measure, for the block."""

    if args.server:
        if profile is not None:
            _check_serves(args.server, args.api_key, profile)
        yield args.server.rstrip("/")
        return
    model = model_of(args)
    flags = ["--reward-model", "none"]
    flags += ["--auto-table", "none"] if profile is None else ["--profile", str(profile)]
    if args.max_model_len is not None:
        flags += ["--max-model-len", str(args.max_model_len)]
    try:  # the served name a profile records: the default model's, as clients name it
        offered = defaults.installed()
        if offered.is_default_model(model):
            flags += ["--served-model-name", offered.served_name]
    except defaults.NoDefaultModel:
        pass
    fd, name = tempfile.mkstemp(prefix="thinkgate-fit-", suffix=".log")
    os.close(fd)
    print(f"server log: {name}", file=sys.stderr)
    with thinkgate(model, *flags, log=Path(name)) as url:
        yield url


def model_of(args: argparse.Namespace) -> str:
    """The model a server is started on: ``--model``, or the installed default."""
    from server.calibrate.fit import FitError

    if args.model is not None:
        return str(args.model)
    try:
        return defaults.installed().model
    except defaults.NoDefaultModel as exc:
        raise FitError(f"--model or --server is required: {exc}") from exc


def _check_serves(url: str, api_key: str, profile: Path) -> None:
    from server.calibrate.fit import FitError
    from strategies.profile import Profile

    wanted = Profile.load(profile).name
    r = httpx.get(f"{url.rstrip('/')}/v1/models", headers={"Authorization": f"Bearer {api_key}"})
    card = r.json()["data"][0] if r.status_code == 200 else {}
    serves = (card.get("profile") or {}).get("name")
    if serves != wanted:
        raise FitError(
            f"{url} serves profile {serves!r}, not {wanted!r}: start it with --profile {profile}"
        )
