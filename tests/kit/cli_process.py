"""Running the `autoresearch` command: as a user would (a subprocess), or in this process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli.main import main
from testkit.processes import REPO_ROOT, Project

CLI = [sys.executable, "-m", "cli.main"]
BASELINE_LR = 0.05  # the project's baseline train.py is testkit.candidates.bigram(BASELINE_LR)


def cli(
    *args: str, server: str | None = None, token: str | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `autoresearch ARGS` as a user would, with the connection given by environment variables."""
    with environment(server, token):
        env = dict(os.environ)
    return subprocess.run(
        [*CLI, *args], env=env, cwd=REPO_ROOT, input=stdin, capture_output=True, text=True, timeout=300
    )


def token(project: Project, kind: str, name: str) -> str:
    done = subprocess.run(
        [*CLI, "token", "create", "--kind", kind, "--name", name],
        env=project.server.env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


@contextmanager
def environment(server: str | None, token: str | None) -> Iterator[None]:
    """os.environ with the connection variables set as given (and no others), restored afterwards."""
    saved = {name: os.environ.pop(name) for name in list(os.environ) if name.startswith("AUTORESEARCH_")}
    if server is not None:
        os.environ["AUTORESEARCH_SERVER"] = server
    if token is not None:
        os.environ["AUTORESEARCH_TOKEN"] = token
    try:
        yield
    finally:
        for name in [name for name in os.environ if name.startswith("AUTORESEARCH_")]:
            del os.environ[name]
        os.environ.update(saved)


def in_process(
    capsys: pytest.CaptureFixture[str], *args: str, server: str | None = None, token: str | None = None
) -> Outcome:
    """Run `autoresearch ARGS` through cli.main.main in this process: the same code as the command,
    without a Python start-up per call. A SystemExit message is what the command prints on stderr.
    """
    capsys.readouterr()
    message = ""
    with environment(server, token):
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
            message = "" if isinstance(exit_.code, int) or exit_.code is None else f"{exit_.code}\n"
    out, err = capsys.readouterr()
    return Outcome(code, out, err + message)
