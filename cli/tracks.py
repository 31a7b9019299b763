"""`autoresearch track create|list|archive` (admin: tracks), `port` and `transfer` (agents).

A track is a preset on one kind of hardware with its own best, noise and leaderboard
(docs/operations.md, "A mixed fleet"); a port carries a kept change from one track to another,
where it is decided on its own runs; the transfer view shows how changes fared on each track.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli import views
from cli.connection import add_connection_args, connect, reporting
from protocol.schemas import TracksOut, TransferOut


def register(subparsers: argparse._SubParsersAction) -> None:
    track = subparsers.add_parser(
        "track",
        help="list, create or archive tracks (a preset on one kind of hardware each)",
        description="Tracks: one server for a mixed fleet and several presets. Each track has its own "
        "baseline, best, noise and leaderboard; workers serve the tracks that accept their device, "
        "harness and preset. Creating and archiving need an admin token.",
    )
    actions = track.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="every track with its pins, best and queue")
    listing.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    add_connection_args(listing)
    listing.set_defaults(func=run_list)

    create = actions.add_parser(
        "create",
        help="create a track and queue its baseline (admin token)",
        description="Create a track: its baseline (the first track's baseline train.py and program.md "
        "unless given) is queued at once for the workers it accepts.",
    )
    create.add_argument("name", help="lower-case letters, digits and hyphens (its branch: tracks/NAME/best)")
    create.add_argument("--preset", help="the harness preset its workers run (h100, cpu, ...)")
    create.add_argument(
        "--platforms",
        metavar="PATTERNS",
        help="devices that may serve it: names or fnmatch patterns, comma-separated ('NVIDIA H100*'); "
        "default: any. The first worker accepted pins its device as the platform",
    )
    create.add_argument("--platform", help="pin the platform now (a device name as workers report it)")
    create.add_argument("--harness-id", help="pin the harness id now (else the first worker accepted does)")
    create.add_argument("--train-py", type=Path, metavar="FILE", help="its baseline train.py")
    create.add_argument("--program-md", type=Path, metavar="FILE", help="its program.md (the rules)")
    create.add_argument("--json", action="store_true", help="print the new track as JSON")
    add_connection_args(create, token_kind="admin")
    create.set_defaults(func=run_create)

    archive = actions.add_parser(
        "archive",
        help="archive a track: no new experiments, no workers (admin token)",
        description="Archive a track: it takes no new experiments, no worker serves it and its queued "
        "experiments are cancelled; its history stays readable.",
    )
    archive.add_argument("name", help="the track")
    archive.add_argument("--json", action="store_true", help="print the track as JSON")
    add_connection_args(archive, token_kind="admin")
    archive.set_defaults(func=run_archive)

    port = subparsers.add_parser(
        "port",
        help="carry a kept change to another track, decided there on its own runs",
        description="Port kept experiment ID to track --to: its change is applied to that track's best "
        "as a rebase is and queued there as a new experiment of yours, linked to ID. Prints its id.",
    )
    port.add_argument("experiment_id", type=int, metavar="ID", help="a kept experiment")
    port.add_argument("--to", required=True, metavar="TRACK", help="the track to port it to")
    port.add_argument("-m", "--description", help="its description there (default: the origin's)")
    port.add_argument("--json", action="store_true", help="print the new experiment as JSON")
    add_connection_args(port)
    port.set_defaults(func=run_port)

    transfer = subparsers.add_parser(
        "transfer",
        help="changes tried on more than one track, with their effect on each",
        description="Every change tried on more than one track (the same lines removed and added), "
        "newest first, with its effect ± se and decision on each track.",
    )
    transfer.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    add_connection_args(transfer)
    transfer.set_defaults(func=run_transfer)


def run_list(args: argparse.Namespace) -> int:
    client = connect(args, "track list", token_required=False)
    with reporting("track list", client):
        answer = client.tracks()
    print(views.as_json(answer) if args.json else tracks_table(answer))
    return 0


def tracks_table(answer: TracksOut) -> str:
    rows = [("TRACK", "PRESET", "PLATFORM", "BEST", "EXPERIMENTS", "QUEUED", "WORKERS")]
    for t in answer.tracks:
        platform = t.platform or (f"({t.platforms})" if t.platforms else "(any)")
        name = t.name + (" (archived)" if t.archived_at else "")
        best = f"#{t.best_experiment_id}" if t.best_experiment_id else "-"
        rows.append(
            (name, t.preset or "-", platform, best, str(t.experiments), str(t.queued), str(t.workers))
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _read(path: Path | None, what: str) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"autoresearch track create: {what} {path}: cannot read it ({exc})") from None


def run_create(args: argparse.Namespace) -> int:
    fields = {
        "preset": args.preset,
        "platforms": args.platforms,
        "platform": args.platform,
        "harness_id": args.harness_id,
        "train_py": _read(args.train_py, "--train-py"),
        "program_md": _read(args.program_md, "--program-md"),
    }
    client = connect(args, "track create", token_required=True)
    with reporting("track create", client):
        created = client.create_track(args.name, **fields)
    if args.json:
        print(views.as_json(created))
    else:
        print(
            f"track {created.name} created on branch {created.branch}; its baseline is experiment "
            f"{created.best_experiment_id}, queued for the workers it accepts"
        )
    return 0


def run_archive(args: argparse.Namespace) -> int:
    client = connect(args, "track archive", token_required=True)
    with reporting("track archive", client):
        archived = client.archive_track(args.name)
    print(views.as_json(archived) if args.json else f"track {archived.name} is archived")
    return 0


def run_port(args: argparse.Namespace) -> int:
    client = connect(args, "port", token_required=True)
    with reporting("port", client):
        ported = client.port(args.experiment_id, args.to, args.description)
    if args.json:
        print(views.as_json(ported))
    elif ported.existing:
        print(f"experiment {ported.id}: this train.py is on track {ported.track} already; not queued again")
    else:
        print(f"experiment {ported.id} queued on track {ported.track} (ported from {args.experiment_id})")
    return 0


def run_transfer(args: argparse.Namespace) -> int:
    client = connect(args, "transfer", token_required=False)
    with reporting("transfer", client):
        answer = client.transfer()
    print(views.as_json(answer) if args.json else transfer_text(answer))
    return 0


def transfer_text(answer: TransferOut) -> str:
    if not answer.items:
        return "no change was tried on more than one track yet (`autoresearch port ID --to TRACK`)"
    lines = []
    for item in answer.items:
        lines.append(f"{item.description} (first: experiment {item.first_experiment_id}, {item.agent})")
        for t in item.tracks:
            effect = "-" if t.effect is None else f"{t.effect:+.4f}"
            if t.effect is not None and t.se is not None:
                effect += f" ± {t.se:.4f}"
            decided = t.decision or t.status
            lines.append(f"  {t.track:<20} #{t.experiment_id:<7} {decided:<9} {effect}")
    return "\n".join(lines)
