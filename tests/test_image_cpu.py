"""scripts/image-cpu-pipconf.py hands the host's pip settings to a container build.

The build itself (scripts/image-cpu.sh: buildah, root, 10+ minutes) is run by hand, never
by the test suite; this checks only the part that decides what the build sees."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

HELPER = Path(__file__).resolve().parent.parent / "scripts" / "image-cpu-pipconf.py"


def test_pip_settings_are_rewritten_for_the_build(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    index = tmp_path / "pypi" / "simple"  # links ../../files/...: its root is mounted
    for path in (wheels, index):
        path.mkdir(parents=True)
    (tmp_path / "constraints.txt").write_text("torch<=9\n")
    (tmp_path / "ca.pem").write_text("not a real bundle\n")
    conf = tmp_path / "pip.conf"
    conf.write_text(
        f"[global]\nconstraint = {tmp_path / 'constraints.txt'}\n"
        f"extra-index-url = file://{index} https://example.org/simple\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env |= {
        "PIP_CONFIG_FILE": str(conf),
        "PIP_FIND_LINKS": str(wheels),  # the environment counts as much as the files
        "PIP_CERT": str(tmp_path / "ca.pem"),
        "XDG_CONFIG_DIRS": str(tmp_path / "none"),  # not this host's /etc/xdg/pip
    }
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(HELPER), str(out), "/run/host-pip"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    mounts = dict(line.split("\t") for line in done.stdout.splitlines())
    assert set(mounts) == {str(tmp_path / "pypi"), str(wheels)}
    assert all(seen.startswith("/run/host-pip/dir") for seen in mounts.values())
    written = configparser.ConfigParser(interpolation=None)
    written.read(out / "pip.conf")
    settings = written["global"]
    assert settings["constraint"] == "/run/host-pip/conf/constraints.txt"
    assert settings["cert"] == "/run/host-pip/conf/ca.pem"
    assert settings["find-links"] == mounts[str(wheels)]
    seen_index = mounts[str(tmp_path / "pypi")] + "/simple"
    assert settings["extra-index-url"] == f"file://{seen_index} https://example.org/simple"
    assert (out / "constraints.txt").read_text() == "torch<=9\n"
    assert (out / "ca.pem").read_text() == "not a real bundle\n"
