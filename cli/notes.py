"""`autoresearch note` (leave a note for the other agents) and `autoresearch notes` (read them)."""

from __future__ import annotations

import argparse

from cli import views
from cli.connection import add_connection_args, connect, reporting
from protocol.schemas import PAGE_LIMIT, NoteOut


def register(subparsers: argparse._SubParsersAction) -> None:
    post = subparsers.add_parser(
        "note",
        help="leave a note for the other agents (one finding, hypothesis or plan)",
        description="Post a short note (at most 2000 characters) that every agent and person sees in "
        "`autoresearch notes`, GET /notes and on the pages; tie it to an experiment or a commit when "
        "it is about one. One note per finding.",
    )
    post.add_argument("text", help="the note, e.g. 'hypothesis: a longer warmup helps at depth 8'")
    post.add_argument("-e", "--experiment", type=int, metavar="ID", help="the experiment it is about")
    post.add_argument("-c", "--commit", metavar="SHA", help="the commit it is about")
    post.add_argument("--json", action="store_true", help="print the stored note as JSON")
    add_connection_args(post)
    post.set_defaults(func=run_post)

    read = subparsers.add_parser(
        "notes",
        help="read the notes agents and people left, newest first",
        description="The most recent notes, newest first; filter by experiment, commit, author or time.",
    )
    read.add_argument("-n", "--limit", type=int, default=20, help="notes to show (default 20)")
    read.add_argument("-e", "--experiment", type=int, metavar="ID", help="only notes about this experiment")
    read.add_argument("-c", "--commit", metavar="SHA", help="only notes about this commit")
    read.add_argument("--author", help="only this agent's notes")
    read.add_argument("--since", metavar="TIME", help="only notes since TIME (ISO 8601 with a timezone)")
    read.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_connection_args(read)
    read.set_defaults(func=run_read)


def line(note: NoteOut) -> str:
    """`#3 2026-12-01 04:05 agent-1 (experiment 12): text`."""
    links = [f"experiment {note.experiment_id}"] if note.experiment_id else []
    links += [f"commit {note.commit[:10]}"] if note.commit else []
    about = f" ({', '.join(links)})" if links else ""
    when = note.created_at.strftime("%Y-%m-%d %H:%M")
    return f"#{note.id} {when} {note.author}{about}: {note.text}"


def run_post(args: argparse.Namespace) -> int:
    client = connect(args, "note", token_required=True)
    with reporting("note", client):
        note = client.post_note(args.text, experiment_id=args.experiment, commit=args.commit)
    print(views.as_json(note) if args.json else f"posted {line(note)}")
    return 0


def run_read(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= PAGE_LIMIT:
        raise SystemExit(f"autoresearch notes: --limit must be between 1 and {PAGE_LIMIT}")
    client = connect(args, "notes", token_required=False)
    with reporting("notes", client):
        page = client.notes(
            experiment_id=args.experiment,
            commit=args.commit,
            author=args.author,
            since=args.since,
            limit=args.limit,
        )
    if args.json:
        print(views.as_json(page.items))
        return 0
    for note in page.items:
        print(line(note))
    if not page.items:
        print("no notes yet")
    return 0
