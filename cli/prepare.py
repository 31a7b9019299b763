"""`autoresearch prepare`: download or build the data, train the tokenizer, write token files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli import views
from harness.config import PRESETS, DataSource, load_settings
from harness.data.errors import DataError
from harness.data_layout import read_manifest


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "prepare",
        help="prepare data, tokenizer and evaluation rows (idempotent, resumable)",
        description="Prepare the data for a preset: fetch or build the text shards, train the tokenizer, "
        "tokenize the training data into token files and fix the evaluation rows. Re-running is cheap.",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), help="settings preset (default: $PRESET or cpu)")
    sources = [source.value for source in DataSource]
    parser.add_argument("--source", choices=sources, help="data source ($DATA_SOURCE)")
    parser.add_argument("--data-dir", type=Path, help="where prepared data lives ($DATA_DIR)")
    parser.add_argument("--local-dir", type=Path, help="folder of parquet/jsonl/txt files for --source local")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--json", action="store_true", help="print the prepared folder and its manifest's figures as JSON"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: it loads numpy, whose thread pool must not start in `autoresearch work` before
    # the worker blocks its stop signals (worker/signals.py).
    from harness.prepare import prepare

    try:
        settings = load_settings(
            args.preset, data_source=args.source, data_dir=args.data_dir, local_data_dir=args.local_dir
        )
        paths = prepare(settings, progress=not args.quiet)
        manifest = read_manifest(settings)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        shown = ("train_tokens", "train_docs", "eval_rows", "seq_len", "vocab_size", "harness_id")
        print(views.as_json({"data_dir": str(paths.root)} | {name: manifest[name] for name in shown}))
        return 0
    print(f"prepared {paths.root}")
    print(
        f"  train: {manifest['train_tokens']:,} tokens in {manifest['train_docs']:,} documents; "
        f"eval: {manifest['eval_rows']} rows of {manifest['seq_len']} tokens; vocab {manifest['vocab_size']}"
    )
    print(f"  harness id: {manifest['harness_id']}")
    return 0
