"""A profile: what ``thinkgate fit`` measured of one model on one workload, as the planners
read it (``thinkgate serve --profile DIR``).

``DIR/profile.json`` names the model (its served name and a fingerprint of its tokenizer,
so a profile is refused in front of another model), the workload and its fit/test split,
and the measured constants: the answer's length (the deadline's reserve) and the decode
speed by load. ``DIR/auto-table.json`` is ``auto``'s table (``strategies.auto``);
``DIR/pets-table.json``, where the fit drew PETS's pools, is the PETS table.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from core.base import ResourceKey
from core.engine import ModelTokens
from strategies.auto import AutoTable

FORMAT: Final = 1
PROFILE_FILE: Final = "profile.json"
TABLE_FILE: Final = "auto-table.json"
# Text whose token ids, with the vocabulary's size and the special ids, name a tokenizer:
# digits, words, spacing and non-ASCII, where tokenizers differ most.
_PROBE: Final = "Thinkgate 0123456789 +-*/= \\boxed{42}  naïve 東京 ¿qué? <tag>\n\tend"


class ProfileError(ValueError):
    """A profile directory that cannot be read, or one made for another model."""


def tokenizer_fingerprint(tokens: ModelTokens) -> str:
    """The first 16 hex digits of a SHA-256 over what a tokenizer does to a probe text
    and its special ids: equal for one tokenizer, whichever engine loaded it."""
    facts = {
        "vocab": tokens.vocab_size,
        "think": [list(tokens.think_start_ids), list(tokens.think_end_ids)],
        "eos": list(tokens.eos_token_ids),
        "probe": tokens.encode(_PROBE),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    name: str
    directory: Path
    model: str  # the served name it was fitted behind
    tokenizer: str  # tokenizer_fingerprint of that model
    table: AutoTable
    answer_reserve: int  # tokens an answer takes after the thinking (its 90th percentile)
    seconds_per_token: float  # decode speed per row, one request in flight
    pets_table: Path | None = None  # PETS's table fitted on the workload, when there is one

    @classmethod
    def load(cls, directory: Path) -> Profile:
        path = directory / PROFILE_FILE
        try:
            doc = json.loads(path.read_text())
            if doc.get("format") != FORMAT:
                raise ProfileError(f"{path}: format {doc.get('format')!r}, this server reads 1")
            constants = doc["constants"]
            name = str(doc["name"])
            table = AutoTable.load(directory / doc.get("auto_table", TABLE_FILE), profile=name)
            return cls(
                name=name,
                directory=directory,
                model=str(doc["model"]),
                tokenizer=str(doc["tokenizer"]),
                table=table,
                answer_reserve=int(constants["answer_reserve"]),
                seconds_per_token=float(constants["seconds_per_token"]["1"]),
                pets_table=None if not doc.get("pets_table") else directory / doc["pets_table"],
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if isinstance(exc, ProfileError):
                raise
            raise ProfileError(f"{directory}: not a thinkgate profile ({exc})") from exc

    def check(self, model_name: str, tokens: ModelTokens) -> None:
        """Refuses a profile made for another model or tokenizer than the one served."""
        served = tokenizer_fingerprint(tokens)
        if served != self.tokenizer:
            raise ProfileError(
                f"profile {self.name!r} was fitted on a model with tokenizer {self.tokenizer}, "
                f"the served model {model_name!r} has {served}: fit a profile for this model"
            )
        if model_name != self.model:
            raise ProfileError(
                f"profile {self.name!r} was fitted on {self.model!r}, the served model is "
                f"{model_name!r} (serve it under that name, or fit a profile for it)"
            )


PROFILE_KEY: Final = ResourceKey("profile", Profile)
