"""Unified diffs of train.py: strict validation, application and creation, in pure Python.

`parse_patch` accepts what `git diff` and `diff -u` print for one file (`diff --git`, `index`,
`---`/`+++` headers, hunks, "\\ No newline at end of file") and rejects everything that could
touch more than train.py: other paths, paths outside the repo, creation or deletion, renames,
copies, mode changes and binary patches. `apply_patch` applies hunks like `git apply` (exact
context, hunks in order, a hunk may sit at an offset from its stated line) and never fuzzes.
"""

from __future__ import annotations

import difflib
import posixpath
import re
from dataclasses import dataclass, field

TARGET = "train.py"
_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = "\\ No newline at end of file"
_FORBIDDEN_HEADERS = {
    "old mode": "mode changes are not allowed",
    "new mode": "mode changes are not allowed",
    "new file mode": "the patch creates a file; only train.py may change, and it exists",
    "deleted file mode": "the patch deletes a file; train.py must stay",
    "similarity index": "renames and copies are not allowed",
    "dissimilarity index": "renames and copies are not allowed",
    "rename from": "renames are not allowed",
    "rename to": "renames are not allowed",
    "copy from": "copies are not allowed",
    "copy to": "copies are not allowed",
    "GIT binary patch": "binary patches are not allowed",
    "Binary files": "binary patches are not allowed",
}


class PatchError(ValueError):
    """The patch is malformed or touches something other than train.py (client error)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass
class Hunk:
    old_start: int
    new_start: int
    old: list[str] = field(default_factory=list)  # context and removed lines, with line ends
    new: list[str] = field(default_factory=list)  # context and added lines, with line ends


def split_lines(text: str) -> list[str]:
    """Lines with their '\\n' (only '\\n' ends a line, as in git); the last may lack it."""
    lines = text.split("\n")
    result = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        result.append(lines[-1])
    return result


def _header_path(raw: str, line_no: int) -> str:
    """The repo-relative path named by a ---/+++ header, after the a/ or b/ prefix."""
    path = raw.split("\t", 1)[0].strip()
    if path.startswith('"'):
        raise PatchError("patch-path", f"line {line_no}: quoted path {path}; only train.py may change")
    if path == "/dev/null":
        raise PatchError(
            "patch-creates-or-deletes", f"line {line_no}: /dev/null: the patch creates or deletes a file"
        )
    if path.startswith(("a/", "b/")):
        path = path[2:]
    normal = posixpath.normpath(path) if path else path
    if path.startswith("/") or normal == ".." or normal.startswith("../"):
        raise PatchError("patch-path", f"line {line_no}: path {path!r} is outside the repo")
    if normal != TARGET:
        raise PatchError("patch-path", f"line {line_no}: patch touches {path!r}; only train.py may change")
    return normal


def _check_git_header(line: str, line_no: int) -> None:
    parts = line.split()
    if len(parts) != 4:
        raise PatchError("patch-path", f"line {line_no}: cannot read the paths in {line!r}")
    _header_path(parts[2], line_no)
    _header_path(parts[3], line_no)


def parse_patch(patch: str) -> list[Hunk]:
    """The hunks of a one-file patch of train.py, or PatchError saying precisely what is wrong."""
    if "\0" in patch:
        raise PatchError("patch-binary", "the patch contains NUL bytes; binary patches are not allowed")
    lines = patch.split("\n")
    if lines[-1] == "":
        lines.pop()  # the text after the final newline is not a line
    hunks: list[Hunk] = []
    seen_file = False
    header, hunk_ended_at = "", -1  # the last hunk's header, and the line just past what it counts
    i = 0
    while i < len(lines):
        line = lines[i]
        line_no = i + 1
        for prefix, reason in _FORBIDDEN_HEADERS.items():
            if line.startswith(prefix):
                raise PatchError("patch-forbidden", f"line {line_no}: {reason} ({line.strip()!r})")
        if line.startswith("diff --git "):
            if seen_file:
                raise PatchError("patch-multiple-files", f"line {line_no}: a second file section; send one")
            _check_git_header(line, line_no)
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            if seen_file:
                raise PatchError("patch-multiple-files", f"line {line_no}: a second file section; send one")
            _header_path(line[4:], line_no)
            _header_path(lines[i + 1][4:], line_no + 1)
            seen_file = True
            i += 1
        elif line.startswith("@@"):
            if not seen_file:
                raise PatchError("patch-malformed", f"line {line_no}: hunk before the ---/+++ file header")
            header = line
            hunk, i = _parse_hunk(lines, i)
            hunks.append(hunk)
            hunk_ended_at = i
            continue
        elif seen_file and line.strip() and not line.startswith("index "):
            why = f"line {line_no}: unexpected line {line[:80]!r} outside a hunk"
            if i == hunk_ended_at and line[:1] in " +-":  # the usual cause: a hand-edited hunk
                why += (
                    f"; hunk {len(hunks)}'s header {header[:80]!r} counts fewer lines than follow it: "
                    "correct its counts, or make the patch with `git diff` or `diff -u`"
                )
            raise PatchError("patch-malformed", why)
        i += 1
    if not seen_file:
        raise PatchError("patch-malformed", "no ---/+++ file header found; send a unified diff of train.py")
    if not hunks:
        raise PatchError("empty-change", "the patch has no hunks: nothing would change")
    return hunks


def _parse_hunk(lines: list[str], start: int) -> tuple[Hunk, int]:
    header = _HUNK_HEADER.match(lines[start])
    if header is None:
        raise PatchError("patch-malformed", f"line {start + 1}: malformed hunk header {lines[start][:80]!r}")
    old_count = int(header.group(2)) if header.group(2) is not None else 1
    new_count = int(header.group(4)) if header.group(4) is not None else 1
    hunk = Hunk(old_start=int(header.group(1)), new_start=int(header.group(3)))
    old_left, new_left = old_count, new_count
    i = start + 1
    last: list[list[str]] = []
    while old_left > 0 or new_left > 0:
        if i >= len(lines):
            raise PatchError(
                "patch-malformed",
                f"line {start + 1}: hunk ends early ({old_left} old and {new_left} new lines missing)",
            )
        line = lines[i]
        tag, text = (line[0], line[1:]) if line else (" ", "")  # editors strip a lone space
        if tag == " " and old_left > 0 and new_left > 0:
            hunk.old.append(text + "\n")
            hunk.new.append(text + "\n")
            last = [hunk.old, hunk.new]
            old_left -= 1
            new_left -= 1
        elif tag == "-" and old_left > 0:
            hunk.old.append(text + "\n")
            last = [hunk.old]
            old_left -= 1
        elif tag == "+" and new_left > 0:
            hunk.new.append(text + "\n")
            last = [hunk.new]
            new_left -= 1
        elif line.startswith("\\") and last:
            i = _strip_newline(last, lines, i)
            continue
        else:
            raise PatchError(
                "patch-malformed",
                f"line {i + 1}: {line[:80]!r} does not fit the hunk header at line {start + 1} "
                f"({old_count} old, {new_count} new lines)",
            )
        i += 1
    while i < len(lines) and lines[i].startswith("\\") and last:
        i = _strip_newline(last, lines, i)
    return hunk, i


def _strip_newline(targets: list[list[str]], lines: list[str], i: int) -> int:
    if lines[i].strip() != _NO_NEWLINE:
        raise PatchError("patch-malformed", f"line {i + 1}: unknown marker {lines[i][:80]!r}")
    for target in targets:
        target[-1] = target[-1][:-1]
    targets.clear()
    return i + 1


def apply_patch(original: str, hunks: list[Hunk]) -> str:
    """Apply hunks in order like `git apply`: exact context, any offset after the previous hunk."""
    lines = split_lines(original)
    out: list[str] = []
    cursor = 0
    for number, hunk in enumerate(hunks, 1):
        stated = max(hunk.old_start - 1, 0) if hunk.old else hunk.old_start
        at = _find(lines, hunk.old, stated, cursor)
        if at is None:
            raise PatchError(
                "patch-does-not-apply",
                f"hunk {number} (@@ -{hunk.old_start},{len(hunk.old)}) does not apply: its context and "
                f"removed lines are not in train.py of the base (after line {cursor})",
            )
        out.extend(lines[cursor:at])
        out.extend(hunk.new)
        cursor = at + len(hunk.old)
    out.extend(lines[cursor:])
    result = "".join(out)
    return result


def _find(lines: list[str], block: list[str], stated: int, cursor: int) -> int | None:
    """The position nearest `stated`, not before `cursor`, where `block` occurs in `lines`."""
    size = len(block)
    last_start = len(lines) - size
    if last_start < cursor:
        return None
    for distance in range(len(lines) + 1):
        for at in (stated - distance, stated + distance) if distance else (stated,):
            if cursor <= at <= last_start and lines[at : at + size] == block:
                return at
        if stated - distance < cursor and stated + distance > last_start:
            return None
    return None


def make_patch(old: str, new: str, context: int = 3) -> str:
    """A unified diff of train.py from `old` to `new` that `parse_patch`/`apply_patch` accept."""
    old_lines, new_lines = split_lines(old), split_lines(new)
    out = [f"--- a/{TARGET}\n", f"+++ b/{TARGET}\n"]
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{_range(i1, i2)} +{_range(j1, j2)} @@\n")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                out.extend(_diff_line(" ", line) for line in old_lines[a1:a2])
                continue
            out.extend(_diff_line("-", line) for line in old_lines[a1:a2])
            out.extend(_diff_line("+", line) for line in new_lines[b1:b2])
    return "".join(out)


def carry_over(base: str, changed: str, onto: str) -> str:
    """The change from `base` to `changed`, applied to `onto` (PatchError when it does not apply)."""
    return apply_patch(onto, parse_patch(make_patch(base, changed)))


def _range(start: int, end: int) -> str:
    count = end - start
    first = start + 1 if count else start
    return f"{first},{count}"


def _diff_line(tag: str, line: str) -> str:
    return f"{tag}{line}" if line.endswith("\n") else f"{tag}{line}\n{_NO_NEWLINE}\n"
