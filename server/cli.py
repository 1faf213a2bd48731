"""``thinkgate``: ``serve``, plus other tools dispatched lazily by name.

``thinkgate serve [--model DIR_OR_ID] [--host H] [--port P] ...``: every setting has a
flag (``--max-model-len``), a ``THINKGATE_*`` variable, and a default; flags win.
``thinkgate replica [--model ...] [vLLM server args]``: vLLM's own OpenAI server with our
processors (``engines.local.replica``). Other subcommands (``testbed``, ``calibrate``, ``fit``,
``train-predictor``, ``bench``, ``gpu-check``, ``keys``) are
"module:function" entries taking argv; a tool that is not installed is a clean error.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import socket
import sys
import types
import typing
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NoReturn

from pydantic import ValidationError

if TYPE_CHECKING:
    from server.settings import Settings

TOOLS: dict[str, str] = {
    "testbed": "testbed.cli:main",
    "calibrate": "server.calibrate.cli:main",
    "fit": "server.calibrate.fit:main",
    "train-predictor": "testbed.predictor_cli:main",
    "bench": "benchmarks.cli:main",
    "replica": "engines.local.replica:main",
    "gpu-check": "kernels.gpu_check.__main__:cli",
    "keys": "server.tenancy.keys_cli:main",
    "conformance": "clients.conformance:main",
}


def run() -> NoReturn:
    """The ``thinkgate`` program. After ``serve`` has stopped (engines shut down, stores
    closed, logs flushed) the process leaves without the interpreter's finalisation: it
    spent about 2 s tearing down torch and vLLM's modules, time a drain's grace period
    (``--drain-timeout-s``) is meant for."""
    code = main()
    if _served:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


_served = False  # set once ``serve`` ran a server: ``run`` may then skip finalisation


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "serve":
        return serve(rest)
    if command in TOOLS:
        return _dispatch(command, rest)
    print(f"thinkgate: unknown command {command!r}\n{_usage()}", file=sys.stderr)
    return 2


def _cpu_host_defaults(settings: Settings) -> None:
    """What this process's vLLM engines need on a CPU host (engines/local/cpu_host.py)."""
    try:
        from engines.local import cpu_host, executor

        on_cpu = executor.on_cpu()
    except ImportError:  # a gateway without vLLM (remote engine only): nothing to start
        return
    made = cpu_host.apply(os.environ, on_cpu=on_cpu, engines=in_process_engines(settings))
    if made:
        import structlog

        structlog.get_logger("thinkgate.cli").info("engine.cpu_defaults", set=made)


def in_process_engines(settings: Settings) -> int:
    """The vLLM engines ``thinkgate serve`` starts in its own process: the generator on
    the local engine, and the reward model and the PRM where no URL stands for them and
    they are not turned off ("none"). The testbed's defaults attach only in front of the
    default model on the local engine (a named model leaves them out unless they are
    named too)."""
    local = settings.engine == "local"
    n = 1 if local else 0
    scorers = (settings.reward_url, settings.reward_model), (settings.prm_url, settings.prm_model)
    for url, model in scorers:
        if (
            url is None
            and model != "none"
            and (model is not None or (local and settings.model is None))
        ):
            n += 1
    return n


def serve(argv: Sequence[str]) -> int:
    from server.settings import Settings

    parser = settings_parser(Settings)
    given = {k: v for k, v in vars(parser.parse_args(list(argv))).items() if v is not None}
    try:
        settings = Settings(**given)
    except ValidationError as exc:
        print(f"thinkgate serve: bad settings:\n{exc}", file=sys.stderr)
        return 2
    from server.tenancy.exposure import open_door

    if (refusal := open_door(settings)) is not None:
        print(f"thinkgate serve: {refusal}", file=sys.stderr)
        return 2
    try:
        sock = listen_socket(settings.host, settings.port)
    except OSError as exc:
        print(
            f"thinkgate serve: cannot listen on {settings.host}:{settings.port}: {exc}",
            file=sys.stderr,
        )
        return 1
    import uvicorn

    from server.app import create_app
    from server.process import logs
    from server.process.draining import DrainingServer
    from server.process.http_timeouts import header_timeout_protocol
    from server.process.lifecycle import Lifecycle

    logs.configure(settings.log_level, json=settings.log_json)
    _cpu_host_defaults(settings)
    app = create_app(settings)
    lifecycle: Lifecycle = app.state.lifecycle
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=False,
        # By then the drain has answered or aborted every request: what is left open
        # is an idle or slow connection, not worth more of the drain's grace period.
        timeout_graceful_shutdown=2,
        # uvicorn bounds nothing of a request head: a silent client would hold a slot.
        http=header_timeout_protocol(settings.header_read_timeout_s),
    )
    server = DrainingServer(config, lifecycle)
    global _served
    _served = True
    server.run(sockets=[sock])
    if not server.started:
        # The lifespan failed (engine or servers refused): say so to the supervisor.
        return 3
    return lifecycle.exit_code  # 0, or 4 after an engine death under the exit policy


def listen_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before the engine starts (uvicorn binds only after the
    app's start-up): a taken port fails in a second instead of after the model loads,
    and no other process can take the port while the engine starts."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def settings_parser(settings_cls: type[object]) -> argparse.ArgumentParser:
    """One ``--flag`` per settings field; unset flags stay None (env/defaults apply)."""
    parser = argparse.ArgumentParser(prog="thinkgate serve", description="Serve the gateway.")
    fields = getattr(settings_cls, "model_fields", {})
    for name, field in fields.items():
        flag = "--" + name.replace("_", "-")
        kind = _base_type(field.annotation)
        helptext = field.description or ""
        if kind is bool:
            parser.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, help=helptext
            )
        elif kind is tuple:
            parser.add_argument(flag, dest=name, help=f"{helptext} (comma-separated)".strip())
        else:
            parser.add_argument(
                flag, dest=name, type=kind if kind in (int, float) else str, help=helptext
            )
    return parser


def _base_type(annotation: object) -> type[object]:
    """int/float/bool/str/tuple behind Optional, Annotated and Literal wrappers."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _base_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _base_type(inner[0]) if inner else str
    if origin is tuple:
        return tuple
    if isinstance(annotation, type) and annotation in (int, float, bool):
        return annotation
    return str


def _dispatch(command: str, argv: list[str]) -> int:
    target = TOOLS[command]
    module_name, _, func_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            print(
                f"thinkgate {command}: not available ({module_name} is not installed)",
                file=sys.stderr,
            )
            return 2
        raise
    func: Callable[[list[str]], int | None] | None = getattr(module, func_name, None)
    if func is None:
        print(f"thinkgate {command}: {target} does not exist", file=sys.stderr)
        return 2
    result = func(argv)
    return int(result or 0)


def _usage() -> str:
    tools = "|".join(["serve", *TOOLS])
    return f"usage: thinkgate {{{tools}}} [args...]   (thinkgate serve --help for settings)"


if __name__ == "__main__":
    run()
