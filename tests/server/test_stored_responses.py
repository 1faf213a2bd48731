"""Stored responses (``server.apis.responses.store``) through the real ``openai`` SDK on the app
over a scripted engine (fast): kept by default, continued with ``previous_response_id``
(the model sees the earlier turn), retrieved, listed, deleted, per tenant (and per key
for rows from before tenants), expired."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from core.engine import GenerateRequest, Sample
from engines.scripted import samples_of
from server.apis.responses.store import owner_of
from server.tenancy.tenants import hashed

THOUGHT = "3+4=7\n"
Q = "Compute 3+4 mod 10."


def _handler(tokens: Any) -> Callable[[GenerateRequest], Sequence[Sample]]:
    def handler(request: GenerateRequest) -> Sequence[Sample]:
        return samples_of(tokens, *[f"{THOUGHT}</think>\\boxed{{7}}"] * request.sampling.n)

    return handler


async def test_a_stored_response_continues_is_read_listed_and_deleted(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        client = app.openai()
        first = await client.responses.create(model=app.model, input=Q)  # store omitted
        assert first.store is True
        again = await client.responses.retrieve(first.id)
        assert again.id == first.id and again.output_text == first.output_text
        second = await client.responses.create(
            model=app.model, input="Compute 1+1 mod 10.", previous_response_id=first.id
        )
        assert second.previous_response_id == first.id
        prompt = testbed_tokens.decode(app.engine.calls[-1].prompt_token_ids)
        # Turn 1's question, its reasoning and answer come before turn 2's question.
        assert prompt.index("3+4 mod") < prompt.index("3+4=7") < prompt.index("1+1 mod")
        items = await client.responses.input_items.list(second.id, order="asc")
        assert [i.type for i in items.data] == ["message", "reasoning", "message", "message"]
        assert items.data[0].content[0].text == Q  # type: ignore[union-attr]
        newest = await client.responses.input_items.list(second.id)  # desc by default
        assert newest.data[0].content[0].text == "Compute 1+1 mod 10."  # type: ignore[union-attr]
        # A chain continues: the third sees both earlier turns.
        await client.responses.create(
            model=app.model, input="Go on.", previous_response_id=second.id
        )
        third = testbed_tokens.decode(app.engine.calls[-1].prompt_token_ids)
        assert "3+4 mod" in third and "1+1 mod" in third
        deleted = await client.responses.delete(first.id)
        assert deleted is None or getattr(deleted, "deleted", True)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(first.id)
        with pytest.raises(openai.BadRequestError) as info:
            await client.responses.create(model=app.model, input=Q, previous_response_id=first.id)
        assert info.value.body["param"] == "previous_response_id"  # type: ignore[index]
        # store false: nothing kept.
        unkept = await client.responses.create(model=app.model, input=Q, store=False)
        assert unkept.store is False
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(unkept.id)


async def test_a_streamed_response_is_stored_too(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens)) as app:
        client = app.openai()
        async with client.responses.stream(model=app.model, input=Q) as stream:
            final = await stream.get_final_response()
        assert (await client.responses.retrieve(final.id)).output_text == final.output_text


async def test_another_key_cannot_read_a_response(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens), api_keys=("alice", "bob")) as app:
        alice = app.openai(api_key="alice")
        bob = app.openai(api_key="bob")
        mine = await alice.responses.create(model=app.model, input=Q)
        assert (await alice.responses.retrieve(mine.id)).id == mine.id
        with pytest.raises(openai.NotFoundError):
            await bob.responses.retrieve(mine.id)
        with pytest.raises(openai.NotFoundError):
            await bob.responses.delete(mine.id)
        with pytest.raises(openai.BadRequestError):
            await bob.responses.create(model=app.model, input=Q, previous_response_id=mine.id)


async def test_every_key_of_a_tenant_shares_its_responses(
    scripted_app: Callable[..., Any], testbed_tokens: Any, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[tenants.team]\nkeys = ["{hashed("tg-one")}", "{hashed("tg-two")}"]\n'
        f'[tenants.other]\nkeys = ["{hashed("tg-three")}"]\n'
    )
    async with scripted_app(_handler(testbed_tokens), keys_file=str(keys)) as app:
        one, two = app.openai(api_key="tg-one"), app.openai(api_key="tg-two")
        mine = await one.responses.create(model=app.model, input=Q)
        assert (await two.responses.retrieve(mine.id)).id == mine.id
        follow = await two.responses.create(model=app.model, input=Q, previous_response_id=mine.id)
        assert follow.id != mine.id
        with pytest.raises(openai.NotFoundError):
            await app.openai(api_key="tg-three").responses.retrieve(mine.id)
        await two.responses.delete(mine.id)
        with pytest.raises(openai.NotFoundError):
            await one.responses.retrieve(mine.id)


async def test_a_response_stored_per_key_before_tenants_stays_readable_with_that_key(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens), api_keys=("alice", "bob")) as app:
        gw = app.asgi.state.gateway
        gw.responses.put(
            "resp_old", owner_of("alice"), {"id": "resp_old", "object": "response"}, [], []
        )
        alice, bob = app.openai(api_key="alice"), app.openai(api_key="bob")
        assert (await alice.responses.retrieve("resp_old")).id == "resp_old"
        with pytest.raises(openai.NotFoundError):
            await bob.responses.retrieve("resp_old")


async def test_retention_expires_and_zero_stores_nothing(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    async with scripted_app(_handler(testbed_tokens), response_retention_s=0.2) as app:
        client = app.openai()
        r = await client.responses.create(model=app.model, input=Q)
        import asyncio

        await asyncio.sleep(0.3)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(r.id)
    async with scripted_app(_handler(testbed_tokens), response_retention_s=0) as app:
        client = app.openai()
        r = await client.responses.create(model=app.model, input=Q)  # omitted: not kept
        assert r.store is False
        with pytest.raises(openai.BadRequestError) as info:
            await client.responses.create(model=app.model, input=Q, store=True)
        assert info.value.body["param"] == "store"  # type: ignore[index]


async def test_item_references_resolve_against_the_tenants_stored_items(
    scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    """The AI SDK's Responses provider, with store left on, sends earlier turns' items as
    ``{"type": "item_reference", "id": ...}``: each is the stored item it names, so the
    prompt is the one the items themselves make; an unknown id and another tenant's are
    404s naming the reference."""
    async with scripted_app(_handler(testbed_tokens), api_keys=("alice", "bob")) as app:
        alice = app.openai(api_key="alice")
        first = await alice.responses.create(model=app.model, input=Q)
        items = [i.model_dump(exclude_none=True) for i in first.output]
        assert [i["type"] for i in items] == ["reasoning", "message"]
        refs = [{"type": "item_reference", "id": i["id"]} for i in items]
        turn = [{"role": "user", "content": Q}]
        again = [{"role": "user", "content": "And plus 1?"}]
        by_item = await alice.responses.create(model=app.model, input=[*turn, *items, *again])
        prompt_of_items = app.engine.calls[-1].prompt_token_ids
        by_ref = await alice.responses.create(model=app.model, input=[*turn, *refs, *again])
        assert app.engine.calls[-1].prompt_token_ids == prompt_of_items
        assert THOUGHT in testbed_tokens.decode(prompt_of_items)
        assert by_item.status == by_ref.status == "completed"
        # The resolved items are stored as items: a reference to a turn's input resolves.
        listed = await alice.responses.input_items.list(by_ref.id)
        assert "item_reference" not in {i.type for i in listed.data}
        with pytest.raises(openai.NotFoundError) as unknown:
            await alice.responses.create(
                model=app.model, input=[*turn, {"type": "item_reference", "id": "rs_nope"}]
            )
        assert "input.1.id" in str(unknown.value) and "rs_nope" in str(unknown.value)
        bob = app.openai(api_key="bob")
        with pytest.raises(openai.NotFoundError):
            await bob.responses.create(model=app.model, input=[*turn, refs[1]])


async def test_two_gateways_on_one_postgresql_continue_each_others_responses(
    tmp_path: Path, scripted_app: Callable[..., Any], testbed_tokens: Any
) -> None:
    """With ``--batch-store postgresql://...`` stored responses live in it too: what one
    replica stored, another continues, reads, resolves items of and deletes (behind a
    Service, a fleet's replicas take turns)."""
    from postgres import fresh_database, postgres_server

    with postgres_server() as pg:
        url = fresh_database(pg)
        handler = _handler(testbed_tokens)
        async with (
            # Each its own state directory, as two pods have.
            scripted_app(handler, batch_store=url, state_dir=str(tmp_path / "a")) as one,
            scripted_app(handler, batch_store=url, state_dir=str(tmp_path / "b")) as two,
        ):
            a, b = one.openai(), two.openai()
            turns = [await a.responses.create(model=one.model, input=Q)]
            for i in range(4):  # each turn continued on the other gateway
                via, app = (b, two) if i % 2 == 0 else (a, one)
                turns.append(
                    await via.responses.create(
                        model=app.model,
                        input=f"Compute {i}+1 mod 10.",
                        previous_response_id=turns[-1].id,
                    )
                )
                prompt = testbed_tokens.decode(app.engine.calls[-1].prompt_token_ids)
                assert Q in prompt  # the first turn, stored by the first gateway
            assert (await b.responses.retrieve(turns[0].id)).output_text == turns[0].output_text
            said = turns[0].output[-1]
            ref = await b.responses.create(
                model=two.model,
                input=[
                    {"type": "item_reference", "id": said.id},
                    {"role": "user", "content": "And 2+2?"},
                ],
            )
            assert ref.status == "completed"
            await b.responses.delete(turns[0].id)
            with pytest.raises(openai.NotFoundError):
                await a.responses.retrieve(turns[0].id)
