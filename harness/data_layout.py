"""Where prepared data lives, and reading its manifest.

Layout (see docs/architecture.md): {DATA_DIR}/prepared/{source}-v{vocab_size}/ with raw/,
tokenizer/, train/ (the only part the sandboxed training process sees), val/ (only the trusted
scorer reads it) and manifest.json.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.config import DataSource, HarnessSettings, scoring_fields
from harness.data.errors import DataError
from harness.manifest import compute_harness_id, harness_source_sha256

MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class PreparedPaths:
    root: Path
    raw_dir: Path
    tokenizer_dir: Path
    train_dir: Path
    val_dir: Path
    manifest_path: Path


def prepared_paths(settings: HarnessSettings) -> PreparedPaths:
    root = Path(settings.data_dir) / "prepared" / f"{settings.data_source}-v{settings.vocab_size}"
    return PreparedPaths(
        root=root,
        raw_dir=root / "raw",
        tokenizer_dir=root / "tokenizer",
        train_dir=root / "train",
        val_dir=root / "val",
        manifest_path=root / MANIFEST_FILE,
    )


def prepare_command(settings: HarnessSettings) -> str:
    """The command that prepares data for these settings, for error messages."""
    command = f"autoresearch prepare --preset {settings.preset}"
    if settings.data_source != DataSource.SPEECHES:
        command += f" --source {settings.data_source}"
    return command + f" --data-dir {settings.data_dir}"


def read_manifest(settings: HarnessSettings) -> dict[str, Any]:
    """The manifest of the prepared data for `settings`, with the harness id of the running code.

    The harness id is recomputed from the stored data hashes, the harness source as it is now,
    and `settings`, so it always describes the code and settings actually in use.
    """
    path = prepared_paths(settings).manifest_path
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise DataError(f"{path}: data not prepared; run `{prepare_command(settings)}`") from exc
    except ValueError as exc:
        raise DataError(f"{path}: corrupt manifest ({exc}); run `{prepare_command(settings)}`") from exc
    for key in ("seq_len", "eval_tokens", "vocab_size"):
        if manifest.get(key) != getattr(settings, key):
            raise DataError(
                f"{path}: prepared with {key.upper()}={manifest.get(key)}, but the settings say "
                f"{getattr(settings, key)}; run `{prepare_command(settings)}`"
            )
    source_sha = harness_source_sha256()
    manifest["harness_source_sha256"] = source_sha
    manifest["scoring"] = scoring_fields(settings)
    manifest["harness_id"] = compute_harness_id(
        manifest["val_sha256"], manifest["tokenizer_sha256"], source_sha, manifest["scoring"]
    )
    return manifest
