"""Helpers shared by the sample generators (see `curation.samples` for the design)."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any, Callable

Record = dict[str, Any] | str  # a str is written verbatim (used for malformed lines)

EVAL_SLOTS = (0, 1)
RL_SLOTS = (2, 3, 4)
SFT_SLOTS = (5, 6, 7, 8, 9)


def slot(*key: Any) -> int:
    """Stable bucket 0..9 of an item, used to keep eval / RL / SFT items disjoint."""
    digest = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % 10


def make_rng(name: str, seed: int) -> random.Random:
    """The generator's private random stream."""
    return random.Random(f"{name}:{seed}")


def malformed_lines(domain_example: dict[str, Any], required: str) -> list[str]:
    """Three lines a loader must quarantine: bad JSON, a missing field, an empty field."""
    missing = {k: v for k, v in domain_example.items() if k != required}
    empty = dict(domain_example) | {required: ""}
    return ['{"prompt": "unterminated', json.dumps(missing), json.dumps(empty)]


def interleave(rows: list[Record], extra: list[Record], rng: random.Random) -> list[Record]:
    """Insert `extra` rows at deterministic random positions."""
    out = list(rows)
    for rec in extra:
        out.insert(rng.randrange(len(out) + 1), rec)
    return out


def draw(rng: random.Random, n: int, make: Callable[[random.Random], dict[str, Any]], slots: tuple[int, ...],
         max_tries: int = 200) -> list[dict[str, Any]]:
    """`n` items from `make` whose `key` falls in `slots`, each key at most once.

    Items carry a hashable-as-JSON `key` identifying the underlying problem, so two phrasings
    of the same problem land in the same slot and never cross the eval/RL/SFT partition.
    An optional `slot_key` partitions coarser than `key` (e.g. by topic, by function).
    """
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > n * max_tries:
            raise RuntimeError(f"could not draw {n} distinct items (got {len(out)})")
        item = make(rng)
        key = json.dumps(item["key"], sort_keys=True)
        if key in seen or slot(item.get("slot_key", item["key"])) not in slots:
            continue
        seen.add(key)
        out.append(item)
    return out


def public(item: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """The canonical fields of an item (drops helper keys such as `key`)."""
    return {f: item[f] for f in fields if f in item}
