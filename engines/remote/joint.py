"""Several engine requests as one call to a vLLM server: ``/v1/completions`` with a list
of prompts (``RemoteEngine.generate_batch``).

A step of a search sends every live path's next step at once. As separate HTTP calls
each costs the gateway and vLLM's API server a request's parsing, scheduling and
answer, and they reach the engine core over a few milliseconds, not in one step. vLLM's
completions endpoint takes a list of prompts with one set of sampling parameters and
adds them to the engine together; its answer lists prompt ``i``'s samples at choice
indices ``i * n`` to ``i * n + n - 1``.

Requests share a call when their sampling parameters are the same apart from ``n``
and ``max_tokens``; they are unseeded (vLLM gives each prompt of a call the same seed,
which would draw copies of one prompt alike); their ``max_tokens`` is set and, with
vLLM's cap at each prompt's room in the context, comes out the same from the call's
one value (:func:`calls`); and no prompt logprobs are asked for (the answer's are per
prompt). Requests with different ``n`` go as one prompt per sample with
``n = 1``: vLLM draws ``n`` samples of a prompt as ``n`` requests over the same cached
prefix anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from core.engine import GenerateRequest, Sample, SamplingConfig


def _key(sampling: SamplingConfig) -> SamplingConfig | None:
    """What requests sharing a call must have alike; None: the request goes alone."""
    if sampling.seed is not None or sampling.max_tokens is None:
        return None
    if sampling.prompt_logprobs is not None:
        return None
    return replace(sampling, n=1, max_tokens=None)


@dataclass(frozen=True, slots=True)
class Group:
    """Requests (by index) sharing one call, and the call's ``max_tokens``."""

    members: tuple[int, ...]
    max_tokens: int | None


def calls(requests: Sequence[GenerateRequest], max_model_len: int) -> list[Group]:
    """The requests grouped into calls; a request that can share with no other is a
    call of its own.

    vLLM caps a call's ``max_tokens`` at each prompt's room in the context, so a request
    whose ``max_tokens`` is its room (a search path near the end of the context) shares
    a call whose ``max_tokens`` is at least that room; any other request needs the
    call's ``max_tokens`` to be its own."""
    groups: list[tuple[SamplingConfig, int, list[int]]] = []
    alone: list[Group] = []
    room = [max_model_len - len(r.prompt_token_ids) for r in requests]
    exact: list[int] = []
    to_room: list[int] = []
    for i, r in enumerate(requests):
        limit = r.sampling.max_tokens
        if _key(r.sampling) is None or limit is None:
            alone.append(Group(members=(i,), max_tokens=limit))
        elif limit < room[i]:
            exact.append(i)
        else:
            to_room.append(i)
    for i in exact:
        key, limit = _key(requests[i].sampling), requests[i].sampling.max_tokens
        assert key is not None and limit is not None
        for known, cap, members in groups:
            if known == key and cap == limit:
                members.append(i)
                break
        else:
            groups.append((key, limit, [i]))
    # The longest rooms first: the call each opens takes the shorter ones after it.
    for i in sorted(to_room, key=lambda j: -room[j]):
        key, limit = _key(requests[i].sampling), requests[i].sampling.max_tokens
        assert key is not None and limit is not None
        for known, cap, members in groups:
            if known == key and cap >= room[i]:
                members.append(i)
                break
        else:
            groups.append((key, limit, [i]))
    joint = [Group(members=tuple(sorted(m)), max_tokens=cap) for _, cap, m in groups]
    return sorted([*joint, *alone], key=lambda g: g.members[0])


@dataclass(frozen=True, slots=True)
class JointCall:
    """One call standing for ``parts``: ``prompts`` with ``n`` samples each, at most
    ``max_tokens`` each."""

    parts: tuple[GenerateRequest, ...]
    prompts: tuple[tuple[int, ...], ...]
    n: int
    max_tokens: int | None

    @classmethod
    def of(cls, parts: Sequence[GenerateRequest], max_tokens: int | None) -> JointCall:
        ns = {p.sampling.n for p in parts}
        if len(ns) == 1:
            prompts = tuple(p.prompt_token_ids for p in parts)
            return cls(parts=tuple(parts), prompts=prompts, n=ns.pop(), max_tokens=max_tokens)
        prompts = tuple(p.prompt_token_ids for p in parts for _ in range(p.sampling.n))
        return cls(parts=tuple(parts), prompts=prompts, n=1, max_tokens=max_tokens)

    @property
    def samples(self) -> int:
        return len(self.prompts) * self.n

    def lead(self) -> GenerateRequest:
        """The request that places the call and holds its lease: the first part with
        every sample of the call."""
        first = self.parts[0]
        return replace(
            first,
            request_id=f"{first.request_id}-joint{len(self.parts)}",
            sampling=replace(first.sampling, n=self.samples, max_tokens=self.max_tokens),
        )

    def split(self, samples: Sequence[Sample]) -> list[list[Sample]]:
        """The call's samples (ordered by choice index) back to each part, indexed from
        0 within it."""
        out: list[list[Sample]] = []
        at = 0
        for part in self.parts:
            n = part.sampling.n
            out.append([replace(s, index=j) for j, s in enumerate(samples[at : at + n])])
            at += n
        return out
