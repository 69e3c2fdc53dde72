"""The side by side in one invocation (``python -m bench.run --dispatchers kueue,kueue-fixed,multikueue``): each
variant on a fresh bed of the same shape under the same load, one after the other, so that the ratios between them
are taken minutes apart on the same machine rather than on different days. With ``--rounds R`` the sequence runs R
times, rotated each round, so that a machine growing busier over the session does not always fall on the same
variant. The planning and naming are here; bench/run.py runs each one.
"""

from __future__ import annotations

import argparse
import copy
from dataclasses import dataclass
from pathlib import Path

VARIANTS = {
    "kueue": "Kueue v0.19.2 as released (its own MultiKueue)",
    "kueue-fixed": "Kueue with the fix (worker clients at clientConnection 1000/1000)",
    "multikueue": "this project beside Kueue's scheduler",
}


def parse_variants(text: str) -> list[str]:
    """``kueue,kueue-fixed,multikueue`` -> the variants in that order; unknown or repeated names are refused."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("--dispatchers: name at least one of " + ", ".join(VARIANTS))
    for name in names:
        if name not in VARIANTS:
            raise ValueError(f"--dispatchers: {name!r} is not one of {', '.join(VARIANTS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"--dispatchers: {text!r} names a variant twice")
    return names


@dataclass(frozen=True)
class Slot:
    """One run of the session: which round, which variant, and where its result goes."""

    round: int
    variant: str
    out: Path


def schedule(variants: list[str], rounds: int, out_dir: Path, stem: str) -> list[Slot]:
    """Every variant once per round, the order rotated by one each round (round 2 of a,b,c runs b,c,a)."""
    if rounds < 1:
        raise ValueError(f"--rounds {rounds}: must be at least 1")
    slots = []
    for r in range(rounds):
        shift = r % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            suffix = f"-r{r + 1}" if rounds > 1 else ""
            slots.append(Slot(r + 1, variant, out_dir / f"{stem}-{variant}{suffix}.json"))
    return slots


def variant_args(args: argparse.Namespace, slot: Slot, session: str) -> argparse.Namespace:
    """The flags of one run: the session's, with this variant dispatching (real Kueue on the manager for all)."""
    one = copy.copy(args)
    one.dispatcher, one.kueue, one.out = slot.variant, "real", slot.out
    one.side_by_side = {"session": session, "round": slot.round, "variant": slot.variant}
    if args.logs is not None:
        one.logs = args.logs / slot.out.stem
    return one
