"""`autoresearch init`: create the research repo from the baseline and queue the baseline run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sqlalchemy.engine import make_url

from cli import views
from server.core.config import ServerSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    from server.project_init import DEFAULT_PROGRAM_MD, DEFAULT_TRAIN_PY

    parser = subparsers.add_parser(
        "init",
        help="create the research repo and queue the baseline",
        description="Create the research git repo (branch `best` = the baseline train.py and the agent "
        "instructions), migrate the database and queue the unmodified baseline as experiment 1.",
    )
    parser.add_argument(
        "--repo",
        type=Path,
        help="where to create the repo (default: $RESEARCH_REPO, else DATA_DIR/research.git)",
    )
    parser.add_argument("--train-py", type=Path, default=DEFAULT_TRAIN_PY, help="baseline train.py")
    parser.add_argument("--program-md", type=Path, default=DEFAULT_PROGRAM_MD, help="agent instructions")
    parser.add_argument(
        "--json", action="store_true", help="print the repo, database and baseline's id as JSON"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from server.project_init import InitError, init_project

    settings = ServerSettings(**({"research_repo": args.repo} if args.repo else {}))
    try:
        experiment_id = init_project(settings, args.train_py, args.program_md)
    except InitError as exc:
        print(f"autoresearch init: {exc}", file=sys.stderr)
        return 2
    repo = str(settings.resolved_research_repo)
    database = make_url(settings.resolved_database_url).render_as_string(hide_password=True)
    if args.json:
        print(views.as_json({"research_repo": repo, "database": database, "experiment_id": experiment_id}))
        return 0
    print(f"research repo: {repo}")
    print(f"database: {database}")
    print(f"baseline queued as experiment {experiment_id}")
    return 0
