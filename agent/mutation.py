"""Random mutation of the hyperparameter constants of `train.py`.

A constant is what protocol/constants.py finds: `NAME = <number>` at module level, NAME
UPPER_CASE, and the knobs set inside such an assignment (`DEVICE_SETTINGS["cpu"].width`). Only
the text of the chosen values is rewritten, so comments, formatting and the rest of the file
stay byte for byte the same.

How a value moves (so that a random walk stays in sensible territory):
- a power-of-two int (batch sizes, widths, head counts) doubles or halves and stays a power of two;
- any other int is scaled by a log-uniform factor in [1/2, 2], stays an int and keeps its sign;
- a float strictly between 0 and 1 (learning rates, betas, ratios) moves in logit space, so it
  stays strictly between 0 and 1;
- any other float is scaled by a log-uniform factor in [1/2, 2] and keeps its sign;
- zero is left alone: it usually means "off", and scaling cannot move it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

from protocol.constants import Constant, find_constants

_SCALE = math.log(2.0)  # log-uniform factor range [1/2, 2]
_LOGIT_STEP = 1.0  # a uniform step in logit space: 0.5 -> [0.27, 0.73], 0.95 -> [0.88, 0.98]
_SIGNIFICANT_DIGITS = 3
_SECOND_CHANGE_PROBABILITY = 0.3  # usually one change at a time, sometimes two together


class NoConstantsError(ValueError):
    """The source has no top-level UPPER_CASE numeric constant that can be mutated."""


def _mutate_int(value: int, power_form: bool, rng: random.Random) -> str:
    magnitude, sign = abs(value), (-1 if value < 0 else 1)
    if magnitude & (magnitude - 1) == 0:  # a power of two: step the exponent
        exponent = magnitude.bit_length() - 1
        exponent = 1 if exponent == 0 else exponent + rng.choice((-1, 1))
        if power_form:
            return f"-2**{exponent}" if sign < 0 else f"2**{exponent}"
        return str(sign * 2**exponent)
    exact = magnitude * math.exp(rng.uniform(-_SCALE, _SCALE))
    # Three significant digits: 11091083 reads as noise, 11100000 as a choice.
    scaled = max(1, int(round(exact, min(0, _SIGNIFICANT_DIGITS - len(str(round(exact)))))))
    if scaled == magnitude:
        scaled = magnitude + rng.choice((-1, 1))
    return str(sign * scaled)


def _sigmoid(logit: float) -> float:
    if logit >= 0:
        return 1.0 / (1.0 + math.exp(-logit))
    small = math.exp(logit)  # this form cannot overflow for very negative logits
    return small / (1.0 + small)


def _float_literal(proposal: float, accept: Callable[[float], bool]) -> str | None:
    """A short float literal for `proposal` whose value `accept`s, or None if none is."""
    for text in (f"{proposal:.3g}", repr(proposal)):
        if not any(mark in text for mark in ".eE"):
            text += ".0"  # "2" would be an int literal; the constant must stay a float
        if accept(float(text)):
            return text
    return None


def _mutate_float(value: float, rng: random.Random) -> str:
    if 0.0 < value < 1.0:
        logit = math.log(value) - math.log1p(-value)

        def propose() -> float:
            return _sigmoid(logit + rng.uniform(-_LOGIT_STEP, _LOGIT_STEP))

        def accept(new: float) -> bool:
            return new != value and 0.0 < new < 1.0

    else:

        def propose() -> float:
            return value * math.exp(rng.uniform(-_SCALE, _SCALE))

        def accept(new: float) -> bool:
            return new != value and math.isfinite(new) and new != 0 and (new > 0) == (value > 0)

    while True:  # a proposal that leaves the bounds or rounds back to `value` is drawn again
        proposal = propose()
        text = _float_literal(proposal, accept) if math.isfinite(proposal) else None
        if text is not None:
            return text


def _mutate(constant: Constant, rng: random.Random) -> str:
    if isinstance(constant.value, int):
        return _mutate_int(constant.value, constant.power_form, rng)
    return _mutate_float(constant.value, rng)


def mutate_constants(source: str, rng: random.Random) -> tuple[str, str]:
    """Change one (sometimes two) constants of `source` (protocol/constants.py).

    Returns the new source and a one-line description such as `DEPTH 8 -> 16`.
    Raises SyntaxError if `source` does not parse and NoConstantsError if it has nothing to mutate.
    """
    constants = [constant for constant in find_constants(source) if constant.value != 0]
    if not constants:
        raise NoConstantsError(
            "train.py has no top-level UPPER_CASE numeric constant to mutate "
            "(the random agent changes lines like `LEARNING_RATE = 3e-4`)"
        )
    count = 2 if len(constants) > 1 and rng.random() < _SECOND_CHANGE_PROBABILITY else 1
    chosen = sorted(rng.sample(constants, count), key=lambda constant: constant.start)
    pieces: list[str] = []
    changes: list[str] = []
    position = 0
    for constant in chosen:
        new_text = _mutate(constant, rng)
        pieces += [source[position : constant.start], new_text]
        position = constant.end
        changes.append(f"{constant.name} {source[constant.start : constant.end]} -> {new_text}")
    pieces.append(source[position:])
    return "".join(pieces), ", ".join(changes)
