"""``thinkgate bench security``: is the default server safe on a network? One table of
lines, each a count of tries and of failures against a goal.

The server is ``thinkgate serve`` with its default flags on its default model (the
testbed), keys from a keys file as the images run it (``--keys-file``; three tenants:
``a``, ``b``, and ``small``, held to 4 samples a request and 4 in flight by
``budget_samples = 4`` and ``max_inflight_samples = 4``), its
own state directory and temporary directory (so that the disk an upload takes can be
read). Lines, in order (the timed ones first, on a fresh server):

1. fair by default, and the tenant held to 4 samples beside its online neighbour
   (``benchmarks.security_fair``);
2. reads without a key, another tenant's ids, cross-origin and foreign-``Host``
   requests, non-JSON bodies (``benchmarks.security_probes``);
3. a 1 GiB chunked upload to the 200 MiB file limit (``benchmarks.security_upload``);
4. fuzzed background lines (``benchmarks.security_lines``);
5. schemathesis on the live schema, the files and batches routes alone and then every
   route (``benchmarks.fuzz``, with a tenant's key);
6. with that server stopped: stored responses across two gateways on one PostgreSQL
   (``benchmarks.security_pg``).

A line that crashes is a row that says so; the others still run. Writes
``benchmarks/results/security/security.{md,json}``.

    flock /tmp/thinkgate-cpu.lock .venv/bin/python -m benchmarks.security [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks import security_fair, security_probes
from benchmarks.fuzz import run_fuzz
from benchmarks.out_paths import LOGS, results_of
from benchmarks.security_lines import fuzzed_lines
from benchmarks.security_pg import two_gateways
from benchmarks.security_probes import Line, bearer
from benchmarks.security_upload import big_upload
from benchmarks.servers import ServerUrl, free_port, machine, serve
from server.tenancy.tenants import hashed
from testbed.task import make_questions

RESULTS = results_of("security")
KEYS = {"a": "tg-security-tenant-a", "b": "tg-security-tenant-b", "small": "tg-security-small"}
FILE_LIMIT = 200 * 2**20  # --batch-max-file-bytes' default
GROUPS = ("fair", "held", "probes", "upload", "lines", "schema", "postgres")
BATCH_ROUTES = r"^(?!/v1/(files|batches)(/|$))"  # every path but the Batch API's, left out


def keys_file() -> str:
    rows = [f'[tenants.{t}]\nkeys = ["{hashed(k)}"]\n' for t, k in KEYS.items()]
    rows[-1] += "budget_samples = 4\nmax_inflight_samples = 4\n"  # a request, and in flight
    return "\n".join(rows)


@contextmanager
def default_server(state: Path) -> Iterator[ServerUrl]:
    """``thinkgate serve`` with only the keys file and where it keeps its state (and its
    temporary files: ``TMPDIR``, what Python's spooled uploads use) set."""
    keys = state / "keys.toml"
    keys.write_text(keys_file())
    port = free_port()
    cmd = [sys.executable, "-m", "server.cli", "serve", "--port", str(port)]
    cmd += ["--keys-file", str(keys), "--state-dir", str(state / "state")]
    (state / "tmp").mkdir()
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(state / "tmp")  # server_env() hands the environment on
    try:
        with serve(cmd, ready_path="/ready", log=LOGS / "security-server.log", port=port) as url:
            if before is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = before
            yield url
    finally:
        if before is not None:
            os.environ["TMPDIR"] = before


@dataclass
class Pack:
    """The lines so far; the table is written again after each group, so that a run cut
    short still leaves what it measured."""

    out: Path
    command: str
    started: float = field(default_factory=time.perf_counter)
    lines: list[Line] = field(default_factory=list)

    def add(self, name: str, run: Callable[[], list[Line]]) -> None:
        """``run()``'s lines, or one row saying it crashed (the pack goes on)."""
        started = time.perf_counter()
        try:
            lines = run()
        except Exception as exc:  # a crash is a result of the pack, not the end of it
            why = f"crashed: {type(exc).__name__}: {exc}"[:300]
            lines = [Line(name, 0, 1, "runs", False, why)]
        print(f"{name}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
        for line in lines:
            print(f"  {line}", file=sys.stderr)
        self.lines += lines
        self.write()

    def write(self) -> str:
        meta = {
            "machine": machine(),
            "command": self.command,
            "minutes": (time.perf_counter() - self.started) / 60,
        }
        text = table(self.lines, meta)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{self.out}.md").write_text(text)
        rows = [line.__dict__ for line in self.lines]
        Path(f"{self.out}.json").write_text(json.dumps({"meta": meta, "lines": rows}, indent=2))
        return text


def schema_fuzz(url: str, cases: int, seed: int) -> list[Line]:
    out = []
    for label, skip, n in (
        ("files and batches routes", BATCH_ROUTES, cases),
        ("every route", None, cases),
    ):
        report = run_fuzz(url, n, seed=seed, skip_paths=skip, headers=bearer(KEYS["a"]))
        errors = report["classes"].get("5xx", 0) + report["classes"].get("no_answer", 0)
        shown = ", ".join(f"{v}x{k}" for k, v in report["statuses"].items())
        example = report["server_errors"][:1] or report["no_answers"][:1]
        detail = f"{shown}; {report['seconds']} s" + (f"; e.g. {example}" if example else "")
        out.append(
            Line(
                f"schemathesis, {label}",
                report["cases"],
                errors,
                "0 server errors",
                errors == 0 and report["cases"] > 0,
                detail[:400],
            )
        )
    return out


def on_server(url: ServerUrl, state: Path, args: argparse.Namespace, pack: Pack) -> None:
    prompts = [
        q.prompt
        for q in make_questions("test", args.b_requests, seed=args.seed, min_ops=4, max_ops=6)
    ]
    a, b, small = KEYS["a"], KEYS["b"], KEYS["small"]
    figures: dict[str, Any] = {}

    def fair() -> list[Line]:
        line, found = security_fair.fair_by_default(
            url, (a, b), prompts, max_tokens=args.max_tokens, a_inflight=args.a_inflight
        )
        figures.update(found)
        return [line]

    def held() -> list[Line]:
        solo = figures.get("solo_p95_s")
        if solo is None:  # the fair lines did not run: B alone first
            solo = security_fair.solo_p95(url, b, prompts, max_tokens=args.max_tokens)
        return security_fair.held_to_four(
            url, (small, b), prompts, max_tokens=args.max_tokens, solo_p95=solo
        )

    roots = (state / "tmp", state / "state")
    groups: dict[str, tuple[str, Callable[[], list[Line]]]] = {
        "fair": ("fair by default", fair),
        "held": ("tenant held to 4 samples", held),
        "probes": ("request probes", lambda: _probes(url, a, b)),
        "upload": (
            "upload",
            lambda: [
                big_upload(
                    url, a, pid=url.pid, roots=roots, total=args.upload_bytes, limit=FILE_LIMIT
                )
            ],
        ),
        "lines": (
            "fuzzed lines",
            lambda: [fuzzed_lines(url, a, lines=args.fuzz_lines, seed=args.seed)],
        ),
        "schema": ("schemathesis", lambda: schema_fuzz(url, args.schema_cases, args.seed)),
    }
    for key, (name, run) in groups.items():
        if key in args.only:
            pack.add(name, run)


def _probes(url: str, a: str, b: str) -> list[Line]:
    p = security_probes
    with httpx.Client(base_url=url, timeout=120) as client:
        owned = p.make_owned(client, a)
        return [
            p.unauthenticated(client, owned, a),
            p.cross_tenant(client, owned, a, b),
            p.cross_origin(client, owned, a),
            p.foreign_host(client, owned, a),
            p.non_json(client, a),
        ]


def table(lines: list[Line], meta: dict[str, Any]) -> str:
    rows = [
        "# Security: the default server on a network",
        "",
        f"Machine: {meta['machine']}. Command: `{meta['command']}`. {meta['minutes']:.1f} min.",
        "",
        "Server: `thinkgate serve` with its default flags and model (the testbed), "
        "`--keys-file` (tenants a, b, and small with `budget_samples = 4` and "
        "`max_inflight_samples = 4`), its own "
        "`--state-dir` and `TMPDIR`. Rules were fixed before the run; one run.",
        "",
        "| line | tries | failures | goal | verdict | detail |",
        "|---|---|---|---|---|---|",
    ]
    for line in lines:
        verdict = "met" if line.met else "NOT met"
        detail = line.detail.replace("|", "/").replace("\n", " ")
        rows.append(
            f"| {line.name} | {line.tries} | {line.failures} | {line.goal} | {verdict} | {detail} |"
        )
    met = sum(1 for line in lines if line.met)
    rows += ["", f"{met} of {len(lines)} lines met their goal.", ""]
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="thinkgate bench security", description=__doc__)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--b-requests", type=int, default=24, help="B's requests per block")
    parser.add_argument("--a-inflight", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--upload-bytes", type=int, default=2**30)
    parser.add_argument("--fuzz-lines", type=int, default=1000)
    parser.add_argument("--schema-cases", type=int, default=300)
    parser.add_argument("--responses", type=int, default=100)
    parser.add_argument(
        "--only",
        type=lambda v: set(v.split(",")),
        default=set(GROUPS),
        help=f"comma-separated groups to run, of {','.join(GROUPS)} (default: all)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "security")
    args = parser.parse_args(argv)
    if unknown := args.only - set(GROUPS):
        parser.error(f"unknown groups {sorted(unknown)}; groups are {', '.join(GROUPS)}")
    command = " ".join(["thinkgate bench security", *(argv or sys.argv[1:])])
    pack = Pack(args.out, command)
    state = Path(tempfile.mkdtemp(prefix="thinkgate-bench-security-"))
    if args.only - {"postgres"}:
        with default_server(state) as url:
            on_server(url, state, args, pack)
    else:
        (state / "keys.toml").write_text(keys_file())
    if "postgres" in args.only:
        pack.add(
            "postgresql",
            lambda: [
                two_gateways(state / "keys.toml", KEYS["a"], KEYS["b"], responses=args.responses)
            ],
        )
    print(pack.write())
    return 0 if all(line.met for line in pack.lines) else 1


if __name__ == "__main__":
    raise SystemExit(main())
