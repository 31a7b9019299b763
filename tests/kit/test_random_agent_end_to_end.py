"""`autoresearch agent --strategy random` runs the research loop against a real server and worker."""

from __future__ import annotations

import re

from client import Client
from testkit.processes import Project
from tests.kit.cli_process import cli, token


def test_random_agent_submits_mutations_of_the_best_and_learns_the_decisions(project: Project) -> None:
    agent_token = token(project, "agent", "random-control")
    done = cli(
        "agent",
        "--strategy",
        "random",
        "--count",
        "2",
        "--seed",
        "3",
        "--poll",
        "0.3",
        server=project.url,
        token=agent_token,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    submitted = [
        int(n) for n in re.findall(r"^submitted experiment (\d+): LEARNING_RATE ", done.stdout, re.M)
    ]
    decided = re.findall(
        r"^experiment (\d+) (kept|reverted|stale|rebased|cancelled|infra_failed): ", done.stdout, re.M
    )
    assert len(submitted) == 2 and len(decided) == 2, done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith("submitted 2, decided 2, kept ")

    with Client(project.url) as client:
        for experiment_id in submitted:
            experiment = client.experiment(experiment_id)
            assert experiment.agent == "random-control"
            assert experiment.description.startswith("random: LEARNING_RATE 0.")
            changed = [
                line
                for line in client.diff(experiment_id).splitlines()
                if line[:1] in "+-" and not line.startswith(("+++", "---"))
            ]
            # The bigram's only constant is the learning rate: exactly that line changes.
            assert len(changed) == 2 and all("LEARNING_RATE = " in line for line in changed), changed
        standing = {row.agent: row for row in client.agents().agents}
    assert standing["random-control"].submitted == 2
