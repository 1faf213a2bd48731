"""Strategy registration through the ``thinkgate.strategies`` entry-point group.

Loaded once, at start-up; a broken plugin fails start-up loudly instead of
failing the first request that names it.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from importlib.metadata import entry_points
from typing import Any

from core.base import ResourceKey, Strategy
from core.errors import InvalidRequest, UnknownStrategy
from core.near_names import has_our_prefix, nearest

GROUP = "thinkgate.strategies"


class PluginValidationError(ValueError):
    """A strategy class does not honour the contract (checked at registration)."""


class Registry:
    def __init__(self) -> None:
        self._classes: dict[str, type[Strategy]] = {}
        self._instances: dict[str, Strategy] = {}

    def register(self, cls: type[Strategy], *, name: str | None = None) -> None:
        """Register ``cls``; ``name`` (the entry-point name) must equal ``cls.name``."""
        cls_name = getattr(cls, "name", None)
        if not isinstance(cls_name, str) or not cls_name:
            raise PluginValidationError(f"{cls!r} has no class attribute 'name'")
        if name is not None and name != cls_name:
            raise PluginValidationError(
                f"entry point {name!r} loads {cls.__qualname__} whose name is {cls_name!r}"
            )
        if cls_name in self._classes:
            raise ValueError(f"strategy {cls_name!r} registered twice")
        if not inspect.isasyncgenfunction(getattr(cls, "run", None)):
            raise PluginValidationError(f"{cls.__qualname__}.run must be an async generator")
        for attr in ("budget_fields", "body_options"):
            value = getattr(cls, attr, None)
            if not isinstance(value, frozenset) or not all(isinstance(v, str) for v in value):
                raise PluginValidationError(f"{cls.__qualname__}.{attr} must be a frozenset of str")
        if not callable(getattr(cls, "validate", None)):
            raise PluginValidationError(f"{cls.__qualname__} has no validate()")
        self._classes[cls_name] = cls

    def load_entry_points(self, allow: Iterable[str] | None = None) -> None:
        """Register every installed strategy (or only those in ``allow``)."""
        allowed = set(allow) if allow is not None else None
        for ep in entry_points(group=GROUP):
            if allowed is not None and ep.name not in allowed:
                continue
            if ep.name in self._classes:
                continue
            try:
                cls = ep.load()
            except Exception as exc:
                raise RuntimeError(f"failed to load strategy plugin {ep.value!r}: {exc}") from exc
            self.register(cls, name=ep.name)
        if allowed is not None and (missing := allowed - set(self._classes)):
            raise RuntimeError(f"strategies not installed: {sorted(missing)}")

    def instantiate(self) -> None:
        """Build one instance per strategy; strategies are stateless across requests."""
        for name, cls in self._classes.items():
            self._instances.setdefault(name, cls())

    def get(self, name: str) -> Strategy:
        try:
            return self._instances[name]
        except KeyError:
            raise UnknownStrategy(
                f"unknown strategy {name!r}; available: {', '.join(sorted(self._classes))}",
                param="strategy",
            ) from None

    def options_of(self, name: str) -> frozenset[str]:
        """The body options strategy ``name`` declares."""
        return self._classes[name].body_options

    def needs_of(self, name: str) -> tuple[ResourceKey[Any], ...]:
        """The resources strategy ``name`` cannot run without (its optional ``needs``)."""
        return tuple(getattr(self._classes[name], "needs", ()))

    def check_options(
        self, name: str, fields: Iterable[str], *, ours: Iterable[str] = ()
    ) -> tuple[str, ...]:
        """The body fields (those the server has not taken as OpenAI's or vLLM's) that are
        nobody's here, sorted: a client's or a platform's own (Codex's
        ``client_metadata``), accepted and ignored as vLLM's server does. A field that is
        thinkgate's is a 400 naming it: an option of another strategy, a near miss of a
        strategy option, ``budget`` or one of ``ours``, or one carrying thinkgate's
        prefix."""
        accepted = self.options_of(name)
        takes = ", ".join(sorted(accepted)) or "none"
        known = {"strategy", "budget", *ours}
        for cls in self._classes.values():
            known |= cls.body_options
        ignored: list[str] = []
        for field in sorted(set(fields) - accepted):
            owners = sorted(n for n, cls in self._classes.items() if field in cls.body_options)
            if owners:
                hint = f"it is an option of {', '.join(owners)}, not of {name}"
            elif (near := nearest(field, known)) is not None:
                hint = f"did you mean {near!r}?"
            elif has_our_prefix(field):
                hint = "thinkgate's prefix, but not a field of thinkgate's"
            else:
                ignored.append(field)
                continue
            raise InvalidRequest(
                f"unknown body field {field!r}: {hint} (options of {name}: {takes})",
                param=field,
            )
        return tuple(ignored)

    def names(self) -> list[str]:
        return sorted(self._classes)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


# The server's registry, attached as a resource: a strategy that runs others (``auto``)
# finds them here, never by importing their modules.
REGISTRY_KEY = ResourceKey("strategies", Registry)
