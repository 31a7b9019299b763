"""Arguments a tool does not take: each named, with the one it probably meant. Pure.

The MCP SDK drops an argument its tool does not declare, and the call then answers as if it had
not been given: `search {"state": "kept"}` listed every experiment. A tool refuses such a call
instead (server/mcp/tools.py), and names for each unknown argument the tool's own closest one:
the word another interface uses for it (the CLI's `--state` is the tools' `status`), else the
most alike by spelling (`experiment` for `experiment_id`).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable

# Words other interfaces (the CLI, the REST API, earlier versions of the tools) use for an argument.
OTHER_WORDS = {
    "state": "status",
    "timeout": "wait_s",
    "timeout_s": "wait_s",
    "wait": "wait_s",
    "id": "experiment_id",
    "ids": "experiment_ids",
    "experiment": "experiment_id",
    "experiments": "experiment_ids",
    "message": "description",
    "author": "agent",
    "agent": "author",
}


def meant(name: str, known: Collection[str]) -> str | None:
    """The known argument `name` probably stands for, or None when none is alike."""
    word = OTHER_WORDS.get(name.lower())
    if word in known:
        return word
    alike = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return alike[0] if alike else None


def unknown_arguments(given: Iterable[str], known: Collection[str]) -> list[dict[str, str]]:
    """One error (`argument`, `problem`) for each given argument that is not known."""
    errors = []
    for name in given:
        if name in known:
            continue
        guess = meant(name, known)
        hint = f"did you mean `{guess}`?" if guess else f"it takes {', '.join(sorted(known)) or 'none'}"
        errors.append({"argument": name, "problem": f"unknown argument; {hint}"})
    return errors
