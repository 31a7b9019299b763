"""`autoresearch init`: create the research repo from the baseline and queue the baseline."""

from __future__ import annotations

from pathlib import Path

from client.states import ExperimentStatus, RunKind
from server.core.config import ServerSettings
from server.core.db import Database, create_db_engine
from server.core.migrate import upgrade
from server.crud.project import load_project
from server.crud.requeue import requeue_unmeasured_best
from server.crud.runs import queue_runs
from server.models import Experiment, utcnow
from server.research_repo import EXPERIMENT_REF_PREFIX, ResearchRepo, blob_sha, init_research_repo

HARNESS_BASELINE = Path(__file__).resolve().parents[1] / "harness" / "baseline"
DEFAULT_TRAIN_PY = HARNESS_BASELINE / "train.py"
DEFAULT_PROGRAM_MD = HARNESS_BASELINE / "program.md"


class InitError(RuntimeError):
    pass


def init_project(
    settings: ServerSettings, train_py: Path = DEFAULT_TRAIN_PY, program_md: Path = DEFAULT_PROGRAM_MD
) -> int:
    """Create the repo and database state; return the id of the queued baseline experiment. On an
    existing project whose best has no valid measurement because its runs lost their workers, queue
    the best again and return its id instead."""
    for path in (train_py, program_md):
        if not path.is_file():
            raise InitError(f"{path}: no such file (the baseline to start the research repo from)")
    train_source = train_py.read_bytes()
    try:
        train_source.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InitError(f"{train_py}: not UTF-8 text") from exc
    url = settings.resolved_database_url
    upgrade(url)
    db = Database(create_db_engine(url, settings.sqlite_busy_timeout_ms))
    try:
        with db.write() as session:
            if load_project(session, lock=True).best_commit is not None:
                again = requeue_unmeasured_best(session, utcnow())
                if again is not None:  # its runs lost their workers: measure it first
                    return again.id
                raise InitError(
                    f"the database at {url} already has a project; use a new DATA_DIR or DATABASE_URL"
                )
        repo_path = settings.resolved_research_repo
        try:
            commit = init_research_repo(repo_path, train_source, program_md.read_bytes())
        except FileExistsError as exc:
            raise InitError(str(exc)) from exc
        with db.write() as session:
            project = load_project(session, lock=True)
            baseline = Experiment(
                agent_id=None,
                source="baseline",
                description="baseline",
                base_commit=None,
                commit_sha=commit,
                train_py_blob=blob_sha(train_source),
                status=ExperimentStatus.QUEUED,
                cancel_requested=False,
                created_at=utcnow(),
                queued_at=utcnow(),
            )
            session.add(baseline)
            session.flush()
            queue_runs(session, baseline.id, RunKind.FIRST, baseline.queued_at, new=True)
            project.baseline_commit = project.best_commit = commit
            project.best_experiment_id = baseline.id
            project.best_since_experiment_id = baseline.id
            project.updated_at = utcnow()
            repo = ResearchRepo(repo_path)
            repo.set_experiment_ref(baseline.id, commit)
            repo.close()
            return baseline.id
    finally:
        db.dispose()


__all__ = ["EXPERIMENT_REF_PREFIX", "InitError", "init_project"]
