"""Raw JSON bodies into request models, strictly, for every route (OpenAI's, Responses',
Messages', the Batch API's): any problem is an ``InvalidRequest`` naming the field.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from core.errors import InvalidRequest

B = TypeVar("B", bound=BaseModel)


class Strict(BaseModel):
    """A body part that takes only the fields it declares: any other is a 400 naming it."""

    model_config = ConfigDict(extra="forbid")


def set_fields(body: BaseModel) -> set[str]:
    """The declared fields a request set to something (not null)."""
    return {k for k in body.model_fields_set if getattr(body, k, None) is not None}


def validate_json(model: type[B], raw: bytes) -> B:
    """``raw`` as ``model``, strictly (any body model of any route); a problem is an
    ``InvalidRequest`` naming the field."""
    if not raw.strip():
        raise InvalidRequest("the request body is empty; expected a JSON object")
    try:
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        raise invalid(exc) from None


def validate(model: type[B], value: object, *, prefix: str = "") -> B:
    """A decoded JSON value as ``model`` (strictly); errors name the field under
    ``prefix`` (``input.2``)."""
    try:
        return model.model_validate(value, strict=True)
    except ValidationError as exc:
        err = invalid(exc)
        if prefix:
            param = f"{prefix}.{err.param}" if err.param else prefix
            message = f"{prefix}.{err.message}" if err.param else f"{prefix}: {err.message}"
            raise InvalidRequest(message, param=param) from None
        raise err from None


def invalid(exc: ValidationError) -> InvalidRequest:
    """The first problem pydantic found, as a 400 naming the field: one of our own
    validators' reasons first (in a union, the branch that says why beats the branch
    that only says the value is not a string)."""
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "value_error"), errors[0])
    if err["type"] == "json_invalid":
        return InvalidRequest(f"malformed JSON body: {err['msg']}")
    # Drop union-branch tags pydantic inserts ("str", "list[...]") from the path.
    loc = [str(p) for p in err["loc"] if not _is_tag(p)]
    # A discriminated union repeats its tag as a path part (``response_format`` of type
    # json_schema puts ``json_schema`` before its own ``json_schema`` field).
    loc = [p for i, p in enumerate(loc) if i == 0 or p != loc[i - 1]]
    param = ".".join(loc) or None
    if err["type"] == "model_type":
        # A nested object that is not one (``messages: [[]]``) names its field; only the
        # body itself is "the request body".
        if param is None:
            return InvalidRequest("the request body must be a JSON object")
        return InvalidRequest(f"{param}: must be a JSON object", param=param)
    msg = err["msg"].removeprefix("Value error, ")  # our validators' reasons, as they are
    if err["type"] == "missing":
        msg = "is required"
    return InvalidRequest(f"{param}: {msg}" if param else msg, param=param)


def _is_tag(part: object) -> bool:
    return isinstance(part, str) and (
        part
        in (
            "str",
            "int",
            "float",
            "bool",
            "function-after[_content_present(), ChatMessage]",
            "client-tool",  # the Messages API's tool kinds (server.apis.messages.request)
            "server-tool",
        )
        or part.startswith(("list[", "function-", "constrained-"))
    )
