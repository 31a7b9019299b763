"""`autoresearch status`: the best, the queue and recent experiments, or single experiments."""

from __future__ import annotations

import argparse

from cli import views
from cli.connection import add_connection_args, add_track_arg, connect, reporting, track_of
from client import ApiError, Client
from protocol.schemas import PAGE_LIMIT, BestOut
from protocol.states import ExperimentStatus


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "status",
        help="show the best, the queue and recent experiments, or given experiments in detail",
        description="Without IDs: the current best (the mean of its runs), the noise of the platform, how "
        "many experiments are queued and running, and the most recent experiments (filter with "
        "--agent / --state; --on-best: only those tried on the "
        "current best, including queued and running ones). With IDs: each experiment in detail: "
        "status, decision and its reason, the harness's measurements and error; --diff and --log add "
        "the change and the end of the run's output.",
    )
    parser.add_argument("ids", nargs="*", type=int, metavar="ID", help="experiment ids to show in detail")
    parser.add_argument("-n", "--limit", type=int, default=15, help="recent experiments to list (default 15)")
    parser.add_argument("--agent", help="only this agent's experiments")
    parser.add_argument(
        "--state",
        choices=list(ExperimentStatus),
        help="only experiments in this state",
    )
    parser.add_argument(
        "--on-best",
        action="store_true",
        help="only experiments on top of the current best (what is already tried or in flight there)",
    )
    parser.add_argument("--diff", action="store_true", help="with IDs: also print each change (unified diff)")
    parser.add_argument("--log", action="store_true", help="with IDs: also print the end of each run's log")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_track_arg(parser)
    add_connection_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= PAGE_LIMIT:
        raise SystemExit(f"autoresearch status: --limit must be between 1 and {PAGE_LIMIT}")
    if (args.diff or args.log) and not args.ids:
        raise SystemExit("autoresearch status: --diff and --log need experiment IDs, e.g. `status 12 --log`")
    client = connect(args, "status", token_required=False)
    with reporting("status", client):
        if args.ids:
            show_experiments(client, args)
        else:
            show_overview(client, args)
    return 0


def show_experiments(client: Client, args: argparse.Namespace) -> None:
    experiments = [client.experiment(experiment_id) for experiment_id in args.ids]
    if args.json:
        shown = [experiment.model_dump(mode="json") for experiment in experiments]
        for data, experiment in zip(shown, experiments, strict=True):
            if args.diff:
                data["diff"] = client.diff(experiment.id)
            if args.log:
                data["log"] = client.log(experiment.id)
        print(views.as_json(shown if len(shown) > 1 else shown[0]))
        return
    for index, experiment in enumerate(experiments):
        if index:
            print()
        print(views.details(experiment))
        if args.diff:
            print("--- change ---")
            print(client.diff(experiment.id).rstrip("\n"))
        if args.log:
            print("--- log (end) ---")
            print(client.log(experiment.id).rstrip("\n") or "(no result yet)")


def _count(client: Client, state: ExperimentStatus, track: str | None) -> str:
    page = client.search(status=state, limit=PAGE_LIMIT, track=track)
    return f"{len(page.items)}{'+' if page.next_cursor else ''}"


def _best(client: Client, track: str | None) -> BestOut | None:
    try:
        return client.best(track)
    except ApiError as error:
        if error.status == 409:  # no project yet: say so below instead of failing
            return None
        raise


def show_overview(client: Client, args: argparse.Namespace) -> None:
    track = track_of(args)
    best = _best(client, track)
    track = track or (best.track if best is not None else None)
    if args.on_best and best is not None:
        children = client.children(best.commit).children
        recent = [
            experiment
            for experiment in children
            if args.agent in (None, experiment.agent) and args.state in (None, experiment.status)
        ][: args.limit]
    else:
        recent = client.search(agent=args.agent, status=args.state, limit=args.limit, track=track).items
    counts = {
        state.value: _count(client, state, track)
        for state in (ExperimentStatus.QUEUED, ExperimentStatus.RUNNING)
    }
    noise = next((e for e in client.noise(track).estimates if e.current), None) if best is not None else None
    if args.json:
        overview: dict[str, object] = {
            "best": None if best is None else best.model_dump(mode="json", exclude={"train_py"}),
            "noise": None if noise is None else noise.model_dump(mode="json"),
            **counts,
            "experiments": [experiment.model_dump(mode="json") for experiment in recent],
        }
        print(views.as_json(overview))
        return
    if best is None:
        print("no project yet: run `autoresearch init` on the server host")
    else:
        origin = f"experiment {best.experiment_id}" if best.experiment_id else "baseline"
        spread = f" ± {best.se:.4f}" if best.se is not None else ""
        runs = f", mean of {best.runs} runs" if best.runs > 1 else ""
        if best.val_bpb is None:
            print(
                f"best: not measured ({origin}, commit {best.commit[:12]}): it has no valid run yet, "
                "and nothing is kept until it has"
            )
        else:
            value = f"{views.bpb(best.val_bpb)}{spread}"
            print(f"best: val_bpb {value} ({origin}{runs}, commit {best.commit[:12]})")
            if best.measured_on:
                print(f"      measured: {best.measured_on}")
        print(f"noise: {views.noise(noise)}")
    queued, running = counts[ExperimentStatus.QUEUED], counts[ExperimentStatus.RUNNING]
    print(f"queue: {queued} queued, {running} running")
    print()
    if args.on_best and best is not None:
        print(f"on the best ({best.commit[:12]}):")
    print(views.table(recent) if recent else "no experiments match")
