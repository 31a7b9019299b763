"""Whether a train.py may be run here: the rule every train.py the server makes must pass.

A submitted file is checked when it arrives (server/flows/submit.py: the 413 or 422 it answers);
a change carried onto a new best makes a new file no one submitted, checked the same way before
it is queued (server/trainpy/carry.py: stale when refused). Without the second, two changes that each
fit could carry their halves of a table into one file past every bound. The measures are
server/trainpy/data.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.trainpy.data import densest_statement, information, measure


@dataclass(frozen=True)
class Limits:
    """What a train.py may be (ServerSettings.train_py_limits)."""

    max_bytes: int  # TRAIN_PY_MAX_BYTES
    max_data_bytes: int  # TRAIN_PY_MAX_DATA_BYTES: literals and comments
    max_information_bytes: int  # TRAIN_PY_MAX_INFORMATION_BYTES: its size under deflate


@dataclass(frozen=True)
class Refusal:
    status: int  # the HTTP status a submission gets
    kind: str  # its problem type
    detail: str  # what is over which limit, and where: "train.py is ..." (the caller says which)


def refusal(source: str, limits: Limits) -> Refusal | None:
    """Why `source` may not be a train.py under `limits`, or None when it may."""
    size = len(source.encode())
    if size > limits.max_bytes:
        return Refusal(
            413, "train-py-too-large", f"train.py is {size} bytes; the limit is {limits.max_bytes}"
        )
    share = measure(source)
    if share.total > limits.max_data_bytes and share.largest is not None:
        block = share.largest
        return Refusal(
            422,
            "train-py-carries-data",
            f"train.py has {share.total} bytes of literals and comments; the limit is"
            f" {limits.max_data_bytes} (TRAIN_PY_MAX_DATA_BYTES). The largest block is lines"
            f" {block.line}-{block.end_line} ({block.size} bytes). train.py is code: compute tables while"
            " training, not before.",
        )
    held = information(source)
    if held > limits.max_information_bytes:
        statement = densest_statement(source)
        return Refusal(
            422,
            "train-py-carries-data",
            f"train.py holds {held} bytes of information (its size under deflate); the limit is"
            f" {limits.max_information_bytes} (TRAIN_PY_MAX_INFORMATION_BYTES). The statement on lines"
            f" {statement.line}-{statement.end_line} holds the most ({statement.size} bytes). train.py is"
            " code: data spelled as names or statements counts too; compute tables while training, not"
            " before.",
        )
    return None
