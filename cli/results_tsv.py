"""`autoresearch export` and `import`: the autoresearch results.tsv log, out of and into a server.

results.tsv has five tab-separated columns: commit, val_bpb, memory_gb, status, description.
Imported rows are history: they are shown, never compared with the best.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cli import views
from cli.connection import add_connection_args, add_track_arg, connect, reporting, track_of
from cli.output_file import check_output_path, write_output


def register(subparsers: argparse._SubParsersAction) -> None:
    export = subparsers.add_parser(
        "export",
        help="write every result as results.tsv (commit, val_bpb, memory_gb, status, description)",
        description="Export every result so far, imported history first, in autoresearch's 5-column "
        "results.tsv format: to standard output, or to a file with -o.",
    )
    export.add_argument(
        "-o", "--output", type=Path, metavar="FILE", help="write to FILE (results.tsv), the count to stderr"
    )
    add_track_arg(export)
    add_connection_args(export)
    export.set_defaults(func=run_export)

    imports = subparsers.add_parser(
        "import",
        help="bring a results.tsv in as history (admin token)",
        description="Import an autoresearch results.tsv (commit, val_bpb, memory_gb, status, "
        "description; a header line is allowed) as history: listed with the results, never compared "
        "with the best. Rows already present are skipped, so importing twice changes nothing. "
        "Needs an admin token.",
    )
    imports.add_argument("file", metavar="FILE", type=Path, help="results.tsv to import")
    imports.add_argument("--json", action="store_true", help="print the imported and skipped counts as JSON")
    add_track_arg(imports, "the track whose history it becomes")
    add_connection_args(imports, token_kind="admin")
    imports.set_defaults(func=run_import)


def run_export(args: argparse.Namespace) -> int:
    check_output_path("export", args.output, "results.tsv")
    client = connect(args, "export", token_required=False)
    with reporting("export", client):
        tsv = client.results_tsv(track_of(args))
    if args.output is None:
        sys.stdout.write(tsv)
        return 0
    write_output("export", args.output, tsv)
    # A message, not data: standard output stays for results.tsv itself (without -o).
    print(f"wrote {max(len(tsv.splitlines()) - 1, 0)} results to {args.output}", file=sys.stderr)
    return 0


def run_import(args: argparse.Namespace) -> int:
    try:
        text = args.file.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SystemExit(f"autoresearch import: {args.file}: no such file") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise SystemExit(f"autoresearch import: {args.file}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SystemExit(f"autoresearch import: {args.file}: not UTF-8 text") from None
    client = connect(args, "import", token_required=True)
    with reporting("import", client):
        answer = client.import_results_tsv(text, track_of(args))
    if args.json:
        print(views.as_json(answer))
        return 0
    print(f"imported {answer.imported} rows from {args.file}; skipped {answer.skipped} already present")
    return 0
