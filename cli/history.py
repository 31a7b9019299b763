"""`autoresearch near-misses` and `autoresearch keep-rates`: what was tried and what nearly helped."""

from __future__ import annotations

import argparse

from cli import views
from cli.connection import add_connection_args, add_track_arg, connect, reporting, track_of
from protocol.schemas import KeepRatesOut, NearMissesOut


def register(subparsers: argparse._SubParsersAction) -> None:
    near = subparsers.add_parser(
        "near-misses",
        help="changes not kept that measured a gain (candidates to combine)",
        description="Reverted experiments that measured better than their reference (effect < 0, "
        "short of significance), strongest evidence (z = effect / se) first: candidates to combine "
        "into one change.",
    )
    near.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    near.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    add_track_arg(near)
    add_connection_args(near)
    near.set_defaults(func=run_near_misses)

    rates = subparsers.add_parser(
        "keep-rates",
        help="tried, measured and kept per kind of change (a constant up or down, a region)",
        description="How often each kind of change was tried, measured and kept, most tried first: "
        "per constant and direction, and per region of train.py.",
    )
    rates.add_argument("--part", choices=("constant", "region"), help="only constants or only regions")
    rates.add_argument("--name", help="only this constant or region")
    rates.add_argument("--min-tried", type=int, default=1, help="kinds tried at least this often (default 1)")
    rates.add_argument("--limit", type=int, default=100, help="at most this many kinds (default 100)")
    rates.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    add_track_arg(rates)
    add_connection_args(rates)
    rates.set_defaults(func=run_keep_rates)


def run_near_misses(args: argparse.Namespace) -> int:
    client = connect(args, "near-misses", token_required=False)
    with reporting("near-misses", client):
        answer = client.near_misses(limit=args.limit, track=track_of(args))
    print(views.as_json(answer) if args.json else near_misses_table(answer))
    return 0


def run_keep_rates(args: argparse.Namespace) -> int:
    client = connect(args, "keep-rates", token_required=False)
    with reporting("keep-rates", client):
        answer = client.keep_rates(
            part=args.part, name=args.name, min_tried=args.min_tried, limit=args.limit, track=track_of(args)
        )
    print(views.as_json(answer) if args.json else keep_rates_table(answer))
    return 0


def near_misses_table(answer: NearMissesOut) -> str:
    if not answer.items:
        return "no near misses (no reverted change measured a gain)"
    lines = [f"{'id':>5}  {'effect':>8}  {'se':>7}  {'z':>5}  {'runs':>4}  description"]
    for item in answer.items:
        evidence = f"{item.effect:+.4f}  {item.se:.4f}  {item.z:+5.1f}"
        numbers = f"{item.experiment_id:>5}  {evidence}  {item.runs:>4}"
        lines.append(f"{numbers}  {item.description}")
    return "\n".join(lines)


def keep_rates_table(answer: KeepRatesOut) -> str:
    overall = answer.overall
    lines = [f"overall: {overall.kept} kept of {overall.tried} tried ({overall.measured} measured)"]
    lines.append(f"{'kind':<32}  {'tried':>5}  {'measured':>8}  {'kept':>4}  {'best effect':>11}")
    for kind in answer.kinds:
        name = f"{kind.name} {kind.direction}" if kind.direction else f"{kind.part} {kind.name}"
        best = f"{kind.best.effect:+.4f}" if kind.best else "-"
        lines.append(f"{name:<32}  {kind.tried:>5}  {kind.measured:>8}  {kind.kept:>4}  {best:>11}")
    return "\n".join(lines)
