"""``thinkgate keys``: make and check the keys of a keys file (``server.tenancy.tenants``).

``thinkgate keys new``: a fresh random key and the digest the file holds for it.
``thinkgate keys hash``: the digest of each key read from standard input (one a line),
so that a key never appears in a command line or a shell's history.
``thinkgate keys check FILE``: parse a keys file as the server does; its tenants and
limits, or what is wrong (exit 1).
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from server.tenancy.tenants import KeysFileError, hashed, parse_keys_file


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="thinkgate keys", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("new", help="print a fresh key and its digest")
    sub.add_parser("hash", help="print the digest of each key on standard input")
    check = sub.add_parser("check", help="parse a keys file; print its tenants")
    check.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.command == "new":
        key = "tg-" + secrets.token_urlsafe(32)
        print(f"key:    {key}\ndigest: {hashed(key)}")
        return 0
    if args.command == "hash":
        for line in sys.stdin:
            if line.strip():
                print(hashed(line.strip()))
        return 0
    try:
        table = parse_keys_file(args.file.read_text(), str(args.file))
    except (OSError, KeysFileError) as exc:
        print(f"thinkgate keys: {exc}", file=sys.stderr)
        return 1
    for tenant in table.tenants():
        keys = sum(1 for _, t in table.entries if t.name == tenant.name)
        limits = {k: v for k, v in asdict(tenant.limits).items() if v is not None}
        print(f"{tenant.name}: {keys} key(s), weight {tenant.weight:g}, limits {limits or 'none'}")
    return 0
