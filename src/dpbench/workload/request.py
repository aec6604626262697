"""One request of a trace, and the token streams its prompt is made of.

A leaf module: the generator (:mod:`.trace`), the importers (:mod:`.importers`) and the
tiers all build and read :class:`TraceRequest`; it imports nothing of the workload package.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

SPLITMIX_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_STREAM_GROUP = 1
_STREAM_SESSION = 2
_STREAM_BLOCK = 3
ARRIVAL_DECIMALS = 6  # arrival_s is written (and generated) rounded to the microsecond


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output mix of each uint64 state (wrapping arithmetic, vectorised)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64, copy=True)
        z ^= z >> np.uint64(30)
        z *= _M1
        z ^= z >> np.uint64(27)
        z *= _M2
        z ^= z >> np.uint64(31)
    return z


def _stream_key(kind: int, index: int) -> np.uint64:
    return splitmix64(np.array([(kind << 56) ^ index], dtype=np.uint64))[0]


def _id_key(request_id: str) -> np.uint64:
    return np.uint64(
        int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "little")
    )


def stream_tokens(key: np.uint64, count: int, vocab_size: int) -> np.ndarray:
    """Positions ``0..count-1`` of the token stream ``key``: ids in ``0..vocab_size-1``.

    Position ``i`` depends only on ``key`` and ``i``, so a shorter read is a prefix of a longer one.
    """
    with np.errstate(over="ignore"):
        state = key + (np.arange(1, count + 1, dtype=np.uint64) * SPLITMIX_GAMMA)
    return (splitmix64(state) % np.uint64(vocab_size)).astype(np.int64)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace; ``input_len`` counts the shared prefix too."""

    id: str
    arrival_s: float
    input_len: int
    prefix_group: int | None
    prefix_len: int
    max_new_tokens: int
    ignore_eos: bool
    session: int | None
    turn: int | None
    blocks: tuple[int, ...] | None = None  # imported traces: KV block ids of the prompt
    block_size: int | None = None  # tokens per block (the last one partial)

    def token_ids(self, vocab_size: int) -> list[int]:
        """The prompt as token ids in ``0..vocab_size-1`` (same result on every machine)."""
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be ≥ 2, got {vocab_size!r}")
        if self.blocks is not None:
            assert self.block_size is not None
            return block_tokens(self.blocks, self.block_size, self.input_len, vocab_size).tolist()
        parts = []
        if self.prefix_group is not None and self.prefix_len > 0:
            key = _stream_key(_STREAM_GROUP, self.prefix_group)
            parts.append(stream_tokens(key, self.prefix_len, vocab_size))
        own = (
            _stream_key(_STREAM_SESSION, self.session)
            if self.session is not None
            else _id_key(self.id)
        )
        parts.append(stream_tokens(own, self.input_len - self.prefix_len, vocab_size))
        return np.concatenate(parts).tolist()

    def as_dict(self) -> dict[str, object]:
        blocks: dict[str, object] = (
            {}
            if self.blocks is None
            else {"blocks": list(self.blocks), "block_size": self.block_size}
        )
        return {
            "id": self.id,
            "arrival_s": self.arrival_s,
            "input_len": self.input_len,
            "prefix_group": self.prefix_group,
            "prefix_len": self.prefix_len,
            "max_new_tokens": self.max_new_tokens,
            "ignore_eos": self.ignore_eos,
            "session": self.session,
            "turn": self.turn,
            **blocks,
        }


def block_tokens(
    blocks: tuple[int, ...] | list[int], block_size: int, input_len: int, vocab_size: int
) -> np.ndarray:
    """The ``input_len`` token ids of a prompt made of KV blocks: block ``h`` is positions
    ``0..block_size-1`` of stream ``h`` (the last block cut to what is left of the prompt)."""
    n = len(blocks)
    if n != -(-input_len // block_size):
        raise ValueError(
            f"{n} blocks of {block_size} tokens cannot hold a prompt of {input_len} tokens"
        )
    keys = splitmix64((np.uint64(_STREAM_BLOCK) << np.uint64(56)) ^ np.asarray(blocks, np.uint64))
    with np.errstate(over="ignore"):
        steps = np.arange(1, block_size + 1, dtype=np.uint64) * SPLITMIX_GAMMA
        state = keys[:, None] + steps[None, :]
    ids = (splitmix64(state.ravel()) % np.uint64(vocab_size)).astype(np.int64)
    return ids[:input_len]
