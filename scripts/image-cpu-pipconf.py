"""Hand the host's pip configuration to a container build (scripts/image-cpu.sh).

pip inside `buildah bud` sees none of the host's pip settings: not its config files, not
its PIP_* environment, not the local wheel and index directories they point at, not its CA
bundle. Some hosts can only install from those (a CPU torch wheel that exists only in a
local find-links directory; a TLS-inspecting proxy whose CA only the host bundle holds).

Reads the host's effective settings (`pip config list`: files and PIP_* environment, the
latter winning as in pip), copies the small files they name (CA bundle, constraints) into
OUTDIR, rewrites those paths to where OUTDIR is mounted in the build (DEST), and writes
OUTDIR/pip.conf. Prints the local directories the settings point at (find-links,
file:// indexes), one per line: the caller mounts each read-only at its own path, so
relative links inside local indexes keep working. Writes nothing when pip has no settings
and no CA bundle is given, so a plain host builds exactly as `docker build` would.

    python3 scripts/image-cpu-pipconf.py OUTDIR DEST [CA_BUNDLE]
"""

import ast
import configparser
import os
import shutil
import subprocess
import sys
from urllib.parse import unquote, urlparse

out_dir, dest = sys.argv[1], sys.argv[2]
ca = sys.argv[3] if len(sys.argv) > 3 else ""

listed = subprocess.run(
    [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
).stdout
sections: dict[str, dict[str, str]] = {}
env: dict[str, str] = {}
for line in listed.splitlines():
    name, sep, raw = line.partition("=")
    if not sep or "." not in name:
        continue
    section, key = name.split(".", 1)
    value = ast.literal_eval(raw)
    # PIP_* environment variables are global settings that override the files.
    (env if section == ":env:" else sections.setdefault(section, {}))[key] = value
sections.setdefault("global", {}).update(env)

mounts: list[str] = []


def local_dir(item: str, index: bool) -> str | None:
    path = unquote(urlparse(item).path) if item.startswith("file:") else item
    path = os.path.normpath(path)
    if not (os.path.isabs(path) and os.path.isdir(path)):
        return None
    # A local index (ROOT/simple/NAME/index.html) usually links its files relatively, as
    # ../../files/...: mount ROOT, not only ROOT/simple.
    return os.path.dirname(path) if index and os.path.basename(path) == "simple" else path


def copy_in(path: str) -> str:
    # Small files are copied, not mounted: the config then names one directory only.
    target = os.path.join(out_dir, os.path.basename(path))
    shutil.copyfile(path, target)
    return os.path.join(dest, os.path.basename(path))


os.makedirs(out_dir, exist_ok=True)
for values in sections.values():
    for key, value in values.items():
        if key in ("find-links", "index-url", "extra-index-url"):
            for item in value.split():
                path = local_dir(item, index=key != "find-links")
                if path and path not in mounts:
                    mounts.append(path)
        elif key in ("constraint", "requirement"):
            values[key] = " ".join(copy_in(p) if os.path.isfile(p) else p for p in value.split())
        elif key == "cert" and os.path.isfile(value) and not ca:
            ca = value

if ca:
    sections["global"]["cert"] = copy_in(ca)
if not any(sections.values()):
    sys.exit(0)
config = configparser.ConfigParser(interpolation=None)
config.read_dict(sections)
with open(os.path.join(out_dir, "pip.conf"), "w") as f:
    config.write(f)
print("\n".join(mounts))
