"""``thinkgate calibrate pets|auto ...``: the calibration tools, by name (``pets`` when
none is given, as before ``auto`` existed)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["auto"]:
        from server.calibrate.auto import main as auto_main

        return auto_main(args[1:])
    from strategies.pets.calibration.cli import main as pets_main

    return pets_main(args)
