"""Finding a delimiter that is a token sequence in a stream of token ids.

``</think>`` is one token in most reasoning models but several BPE tokens in others,
and gpt-oss's hand-over from thinking to the answer is always several. A
:class:`SequenceMatcher` follows a stream one token at a time with the usual
Knuth-Morris-Pratt automaton: its state is how many tokens of the sequence the stream
currently ends with (a proper prefix), so a partial match that diverges falls back to
the longest prefix still matching instead of being lost or double counted.

Plain Python, no torch: the HTTP layer (``strategies.reasoning``) uses it as well as
the host-side bookkeeping of the logits processors.
"""

from __future__ import annotations

from collections.abc import Sequence


class SequenceMatcher:
    """The KMP automaton of one non-empty token sequence (immutable; states are ints).

    A state ``k`` in ``[0, len(seq))`` means the tokens seen so far end with
    ``seq[:k]`` and contain no complete ``seq``; ``len(seq)`` means complete.
    """

    __slots__ = ("_fail", "seq")

    def __init__(self, seq: Sequence[int]) -> None:
        if not seq:
            raise ValueError("a delimiter sequence needs at least one token")
        self.seq: tuple[int, ...] = tuple(seq)
        # _fail[k]: the longest proper prefix of seq[:k] that is also its suffix.
        fail = [0] * (len(self.seq) + 1)
        k = 0
        for i in range(1, len(self.seq)):
            while k and self.seq[i] != self.seq[k]:
                k = fail[k]
            if self.seq[i] == self.seq[k]:
                k += 1
            fail[i + 1] = k
        self._fail = tuple(fail)

    def __len__(self) -> int:
        return len(self.seq)

    def advance(self, state: int, token: int) -> int:
        """The state after ``token`` (``len(self)`` when it completes the sequence)."""
        if state == len(self.seq):
            state = self._fail[state]
        while state and token != self.seq[state]:
            state = self._fail[state]
        return state + 1 if token == self.seq[state] else 0

    def find(
        self, tokens: Sequence[int], start: int = 0, state: int = 0, stop: int | None = None
    ) -> tuple[int, int]:
        """Scan ``tokens[start:stop]`` from ``state``: ``(end, state)`` where ``end`` is
        the index just past the first complete sequence (-1 if none, and ``state`` is
        the partial match the scan ended in). No copy: a live list is scanned in place."""
        for i in range(start, len(tokens) if stop is None else stop):
            state = self.advance(state, tokens[i])
            if state == len(self.seq):
                return i + 1, state
        return -1, state


def find_sequence(tokens: Sequence[int], seq: Sequence[int], start: int = 0) -> int:
    """Index of the first complete ``seq`` in ``tokens[start:]``, -1 if none."""
    end, _ = SequenceMatcher(seq).find(tokens, start)
    return end - len(seq) if end >= 0 else -1
