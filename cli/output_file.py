"""Writing a command's result to `-o FILE`, with errors that name the file and the fix."""

from __future__ import annotations

from pathlib import Path


def check_output_path(command: str, path: Path | None, example: str) -> None:
    """Refuse a folder as `-o` before any request is made."""
    if path is not None and path.is_dir():
        raise SystemExit(f"autoresearch {command}: -o {path} is a folder; give a file name, e.g. {example}")


def write_output(command: str, path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as exc:
        raise SystemExit(f"autoresearch {command}: cannot write {path} ({exc.strerror})") from None
