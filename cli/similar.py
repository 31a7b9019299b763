"""`autoresearch similar`: has this been tried? The experiments that made the same change as a
patch or an edited train.py (before submitting it), or as an existing experiment, or nearly."""

from __future__ import annotations

import argparse

from cli import views
from cli.connection import add_connection_args, add_track_arg, connect, reporting, track_of
from cli.submit import CHANGE_KINDS, change_fields, read_change


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "similar",
        help="has this been tried? experiments that made the same or nearly the same change",
        description="Before submitting FILE (a patch of train.py or an edited train.py; - reads stdin), "
        "or for an existing experiment (-e ID): the experiments whose change is the same or nearly the "
        "same (the same train.py, the same lines changed, the same diff on another base, the same "
        "constants set to nearby values or moved the same way, mostly the same code), most alike "
        "first, with their outcomes. "
        "Nothing is submitted.",
    )
    parser.add_argument("file", metavar="FILE", nargs="?", help="a patch of train.py or a train.py")
    parser.add_argument("-e", "--experiment", type=int, metavar="ID", help="an existing experiment instead")
    parser.add_argument("--base", metavar="COMMIT", help="commit FILE applies to (default: the best)")
    parser.add_argument("--as", dest="kind", choices=CHANGE_KINDS, help="how to read FILE (default: guessed)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_track_arg(parser, "the track whose best FILE applies to")
    add_connection_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if (args.file is None) == (args.experiment is None):
        raise SystemExit(
            "autoresearch similar: give FILE (a patch or a train.py) or --experiment ID, not both"
        )
    client = connect(args, "similar", token_required=False)
    with reporting("similar", client):
        if args.experiment is not None:
            answer = client.similar(args.experiment)
        else:
            kind, text = read_change(args.file, args.kind, command="similar")
            change = change_fields(kind, text, args.file, command="similar")
            answer = client.similar(base=args.base, track=track_of(args), **change)
    if args.json:
        print(views.as_json(answer))
    elif not answer.similar and args.experiment is not None:
        print(f"no other experiment made the change of experiment {args.experiment} or a similar one")
    elif not answer.similar:
        print("not tried: no experiment made this change or a similar one")
    else:
        print(f"{len(answer.similar)} similar experiment(s), most alike first:")
        print("\n".join(views.similar(answer.similar)))
    return 0
