"""`autoresearch submit`: queue a change of train.py (a patch file, an edited train.py, or edits)."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from cli import views
from cli.connection import add_connection_args, add_track_arg, connect, reporting, track_of
from cli.follow import follow
from protocol.schemas import Edits
from protocol.states import ExperimentStatus

EXIT_NOT_KEPT = 3  # --wait: the experiment finished without becoming the new best
CHANGE_KINDS = ["patch", "train.py", "edits"]  # how FILE may be read
EDITS: TypeAdapter[list[Any]] = TypeAdapter(Edits)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "submit",
        help="queue a change of train.py (patch file or edited train.py); prints the experiment id",
        description="Send a change of train.py to the server, which validates it at once, commits it on "
        "top of the base (default: the current best) and queues it for a worker. FILE is a unified diff "
        "of train.py (e.g. from `git diff` or `diff -u`), a whole edited train.py (*.py), or search/replace "
        'edits as JSON (*.json: [{"old": ..., "new": ...}], each old occurring once); - reads standard '
        "input. An identical train.py that was already submitted is not run again: its experiment is "
        "shown instead.",
        epilog=f"exit status with --wait: 0 kept (the new best), {EXIT_NOT_KEPT} finished but not kept "
        "(reverted, stale, cancelled, failed), 1 on errors.",
    )
    parser.add_argument("file", metavar="FILE", help="a patch, a train.py or edits (JSON); - reads stdin")
    parser.add_argument(
        "-m", "--description", required=True, help="what this change is, in one line (shown everywhere)"
    )
    parser.add_argument("--hypothesis", help="why it should help (kept with the experiment for other agents)")
    parser.add_argument("--base", metavar="COMMIT", help="commit the change applies to (default: the best)")
    parser.add_argument("--as", dest="kind", choices=CHANGE_KINDS, help="how to read FILE (default: guessed)")
    parser.add_argument("--wait", action="store_true", help="follow the experiment live until its decision")
    parser.add_argument(
        "--timeout", type=float, metavar="S", help="with --wait: give up after S seconds (default: never)"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("-q", "--quiet", action="store_true", help="print only the experiment id")
    output.add_argument("--json", action="store_true", help="print the experiment as JSON")
    add_track_arg(parser, "the track to run it on (with --base: the base's)")
    add_connection_args(parser)
    parser.set_defaults(func=run)


def looks_like_patch(text: str) -> bool:
    """A unified diff has a `--- ` line followed by a `+++ ` line and a hunk header."""
    lines = text.splitlines()
    for first, second in itertools.pairwise(lines):
        if first.startswith("--- ") and second.startswith("+++ "):
            return any(line.startswith("@@ ") for line in lines)
    return False


def read_change(path: str, kind: str | None, command: str = "submit") -> tuple[str, str]:
    """("patch" | "train.py" | "edits", text) of FILE; exits with the fix when it cannot be used."""
    name = "standard input" if path == "-" else path
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except FileNotFoundError:
        raise SystemExit(f"autoresearch {command}: {name}: no such file") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise SystemExit(f"autoresearch {command}: {name}: cannot read it ({exc.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SystemExit(f"autoresearch {command}: {name}: not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise SystemExit(f"autoresearch {command}: {name} is empty; give a patch of train.py or a train.py")
    if kind is None:
        if path.endswith(".json"):
            kind = "edits"
        else:
            kind = "train.py" if path.endswith(".py") or not looks_like_patch(text) else "patch"
    if kind == "patch" and not looks_like_patch(text):
        raise SystemExit(
            f"autoresearch {command}: {name} is not a unified diff (no ---/+++/@@ lines); "
            "make one with `git diff` or `diff -u`, or submit the edited train.py itself"
        )
    return kind, text


def change_fields(kind: str, text: str, path: str, command: str = "submit") -> dict[str, Any]:
    """The request's change (`patch`, `train_py` or `edits`) from FILE as read_change read it."""
    if kind == "patch":
        return {"patch": text}
    if kind == "train.py":
        return {"train_py": text}
    name = "standard input" if path == "-" else path
    try:
        edits = json.loads(text)
    except ValueError as exc:
        raise SystemExit(f"autoresearch {command}: {name}: not JSON ({exc})") from None
    try:  # the request's own type for them, checked before sending
        EDITS.validate_python(edits)
    except ValidationError:
        raise SystemExit(
            f'autoresearch {command}: {name}: give a JSON list of edits, [{{"old": "...", "new": "..."}}]'
        ) from None
    return {"edits": edits}


def run(args: argparse.Namespace) -> int:
    kind, text = read_change(args.file, args.kind)
    if args.timeout is not None and args.timeout <= 0:
        raise SystemExit("autoresearch submit: --timeout must be a positive number of seconds")
    client = connect(args, "submit", token_required=True)
    with reporting("submit", client):
        change = change_fields(kind, text, args.file)
        experiment = client.submit(
            args.description, base=args.base, hypothesis=args.hypothesis, track=track_of(args), **change
        )
        # With -q or --json, stdout carries only the id or the JSON; the live report goes to stderr.
        stream = sys.stderr if args.quiet or args.json else sys.stdout
        if args.quiet:
            print(experiment.id, flush=True)
        elif args.json and not args.wait:
            print(views.as_json(experiment), flush=True)
        if experiment.existing and not args.quiet:
            again = f"experiment {experiment.id}: this train.py was already submitted; not queued again"
            print(again, file=stream)
        if not (args.quiet or (args.json and not args.wait)):
            print(views.summary(experiment), file=stream, flush=True)
        if experiment.similar and not args.quiet:
            tried = "tried before (most alike first):\n" + "\n".join(views.similar(experiment.similar))
            print(tried, file=stream, flush=True)
        if not args.wait:
            return 0

        def say(line: str) -> None:
            print(line, file=stream, flush=True)

        try:
            final = follow(client, experiment.id, say, args.timeout)
        except TimeoutError as exc:
            raise SystemExit(f"autoresearch submit: {exc}; follow it with `autoresearch status`") from None
        if args.json:
            print(views.as_json(final), flush=True)
        else:
            say(views.summary(final))
        return 0 if final.status == ExperimentStatus.KEPT else EXIT_NOT_KEPT
