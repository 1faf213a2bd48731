"""Hand the host's pip configuration to a container build (scripts/image-cpu.sh).

pip inside `buildah bud` sees none of the host's pip settings: not its config files, not
its PIP_* environment, not the local wheel and index directories they point at, not its CA
bundle. Some hosts can only install from those (a CPU torch wheel that exists only in a
local find-links directory; a TLS-inspecting proxy whose CA only the host bundle holds).

Reads the host's effective settings (`pip config list`: files and PIP_* environment, the
latter winning as in pip), copies the small files they name (CA bundle, constraints) into
OUTDIR, which the caller mounts at DEST/conf, and writes OUTDIR/pip.conf. The local
directories the settings point at (find-links, file:// indexes) are printed as
"HOST_DIR<TAB>DEST/dirN" lines for the caller to mount read-only; the config names them
there. Everything sits under DEST, so the mount points the build leaves in the image are
empty directories under one path, not copies of the host's paths. Writes nothing when pip
has no settings and no CA bundle is given, so a plain host builds as `docker build` would.

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

mounts: dict[str, str] = {}  # host directory -> where the build sees it


def relocate(item: str, index: bool) -> str:
    is_url = item.startswith("file:")
    path = os.path.normpath(unquote(urlparse(item).path) if is_url else item)
    if not (os.path.isabs(path) and os.path.isdir(path)):
        return item  # a remote index, or nothing there: left as it is
    # A local index (ROOT/simple/NAME/index.html) usually links its files relatively, as
    # ../../files/...: mount ROOT, not only ROOT/simple.
    root = os.path.dirname(path) if index and os.path.basename(path) == "simple" else path
    seen = mounts.setdefault(root, f"{dest}/dir{len(mounts)}")
    moved = seen + path[len(root) :]
    return f"file://{moved}" if is_url else moved


def copy_in(path: str) -> str:
    # Small files are copied, not mounted: the config names one directory for them.
    target = os.path.join(out_dir, os.path.basename(path))
    shutil.copyfile(path, target)
    return f"{dest}/conf/{os.path.basename(path)}"


os.makedirs(out_dir, exist_ok=True)
for values in sections.values():
    for key, value in values.items():
        if key in ("find-links", "index-url", "extra-index-url"):
            index = key != "find-links"
            values[key] = " ".join(relocate(item, index) for item in value.split())
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
print("\n".join(f"{host}\t{seen}" for host, seen in mounts.items()))
