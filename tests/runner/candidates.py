"""Candidate train.py files for the runner tests, composed from the files in candidates/.

`good_bigram.py` is a complete honest candidate. The files in `hostile/` and `broken/` are
appended to it, in the order given: they replace `build_model` and/or `train`, and may call the
honest versions as `honest_build_model` and `honest_train` (and what an earlier part defined).
`HOSTILE_ARGS` carries test-specific values (ports, host paths, markers) into the candidate;
`include` adds helper files before the parts, and `comment` (lines that each start with #) is
appended as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parent / "candidates"
GOOD = FOLDER / "good_bigram.py"


def compose(
    folder: Path, *parts: str, include: tuple[Path, ...] = (), comment: str = "", **args: Any
) -> Path:
    """Write good_bigram.py + `parts` (e.g. "hostile/fake_val_bpb.py") as `folder`/train.py."""
    assert all(line.startswith("#") for line in comment.splitlines())
    text = "\n".join(
        [
            f"HOSTILE_ARGS = {args!r}",
            GOOD.read_text(),
            "honest_build_model, honest_train = build_model, train",
            *(path.read_text() for path in include),
            *((FOLDER / part).read_text() for part in parts),
            comment,
        ]
    )
    path = folder / "train.py"
    path.write_text(text)
    return path
