"""The live view's routes: the page and its files from the gateway itself, the form's
config (every budget field the server has), off with --no-ui, and behind --api-keys with a
challenge a browser answers (HTTP Basic, the key as the password)."""

from __future__ import annotations

import base64
from typing import Any

from server.pipeline.budgets import HEADERS
from server.routes.ui import FILES, STATIC


def _never(request: Any) -> Any:
    raise AssertionError("the live view's routes never reach the engine")


async def test_the_page_its_files_and_config(scripted_app: Any) -> None:
    async with scripted_app(_never) as app:
        page = await app.client.get("/ui")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<script type="module" src="/ui/app.js">' in page.text
        for name, kind in FILES.items():
            got = await app.client.get(f"/ui/{name}")
            assert got.status_code == 200 and got.headers["content-type"] == kind
            assert got.content == (STATIC / name).read_bytes()
        assert (await app.client.get("/ui/../settings.py")).status_code == 404
        assert (await app.client.get("/ui/nope.js")).status_code == 404
        config = (await app.client.get("/ui/config.json")).json()
        assert config["model"] == "testbed-base"
        assert [f["name"] for f in config["budget_fields"]] == list(HEADERS)
        assert {"self-consistency", "beam-search", "auto"} <= set(config["strategies"])
        assert config["default_strategy"] == "self-consistency"


async def test_off_with_a_setting(scripted_app: Any) -> None:
    async with scripted_app(_never, ui=False) as app:
        for path in ("/ui", "/ui/app.js", "/ui/config.json"):
            got = await app.client.get(path)
            assert got.status_code == 404 and "--no-ui" in got.json()["error"]["message"]


async def test_behind_the_api_keys_with_a_challenge_a_browser_answers(scripted_app: Any) -> None:
    async with scripted_app(_never, api_keys=("sekrit",)) as app:
        for path in ("/ui", "/ui/app.js", "/ui/config.json"):
            refused = await app.client.get(path)
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith('Basic realm="thinkgate"')
        basic = "Basic " + base64.b64encode(b"anyone:sekrit").decode()
        wrong = "Basic " + base64.b64encode(b"anyone:guess").decode()
        assert (await app.client.get("/ui", headers={"Authorization": basic})).status_code == 200
        assert (await app.client.get("/ui", headers={"Authorization": wrong})).status_code == 401
        bearer = {"Authorization": "Bearer sekrit"}
        assert (await app.client.get("/ui/config.json", headers=bearer)).status_code == 200
        # The page's own requests carry the browser's Basic credentials to /v1 as well;
        # an SDK's 401 on /v1 has no challenge (nothing there would answer it).
        assert (
            await app.client.get("/v1/models", headers={"Authorization": basic})
        ).status_code == 200
        v1 = await app.client.get("/v1/models")
        assert v1.status_code == 401 and "www-authenticate" not in v1.headers
        garbled = {"Authorization": "Basic !!!"}
        assert (await app.client.get("/v1/models", headers=garbled)).status_code == 401
