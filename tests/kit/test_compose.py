"""docker-compose.yml, the Dockerfile and .env.example against the settings the code reads.

No Docker engine runs here: the compose file is validated and resolved by Debian's docker-compose
(`docker-compose config`), and the resolved services are checked against the settings classes.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from client.api import API_PREFIX
from harness.config import PRESETS, HarnessSettings
from server.api.routes import ops
from server.core.config import ServerSettings
from tests.kit.settings_catalog import AGENT_CLI, HARNESS, REPO, SERVER, WORKER

COMPOSE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"
APP_SERVICES = ("migrate", "server", "worker")
EXAMPLE_LINE = re.compile(r"^(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$")


def example_entries() -> dict[str, tuple[bool, str]]:
    """NAME -> (commented out, value) for every setting line of .env.example."""
    entries: dict[str, tuple[bool, str]] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = EXAMPLE_LINE.match(line)
        if match:
            assert match[2] not in entries, f".env.example sets {match[2]} twice"
            entries[match[2]] = (match[1] is not None, match[3])
    return entries


def compose_config(tmp_path: Path, env_lines: list[str]) -> subprocess.CompletedProcess[str]:
    env_file = tmp_path / "compose.env"
    env_file.write_text("\n".join(env_lines) + "\n")
    return subprocess.run(
        ["docker-compose", "-f", str(COMPOSE), "--env-file", str(env_file), "config"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},  # nothing leaks in from this shell
        timeout=60,
    )


def example_as_env() -> list[str]:
    """.env.example as a user's .env: its uncommented lines, with the required password filled in."""
    lines = [f"{name}={value}" for name, (commented, value) in example_entries().items() if not commented]
    return [*lines, "POSTGRES_PASSWORD=s3cret", "MIN_DELTA=0.002"]


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    done = compose_config(tmp_path_factory.mktemp("compose"), example_as_env())
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def environment(resolved: dict[str, Any], service: str) -> dict[str, Any]:
    return resolved["services"][service]["environment"]


def test_compose_validates_and_has_the_four_services(resolved: dict[str, Any]) -> None:
    assert set(resolved["services"]) == {"postgres", "migrate", "server", "worker"}
    assert set(resolved["volumes"]) >= {"postgres-data", "server-data", "worker-data"}


def test_every_variable_passed_to_an_app_service_is_a_setting_the_code_reads(
    resolved: dict[str, Any],
) -> None:
    known = SERVER | HARNESS | WORKER
    for service in APP_SERVICES:
        unknown = set(environment(resolved, service)) - known
        assert not unknown, f"{service} is given variables no settings class reads: {sorted(unknown)}"


def test_every_setting_reaches_the_services_that_read_it(resolved: dict[str, Any]) -> None:
    for service in ("migrate", "server"):
        missing = (SERVER | HARNESS) - set(environment(resolved, service))
        assert not missing, f"{service} never receives {sorted(missing)}"
    missing = (HARNESS | WORKER) - set(environment(resolved, "worker"))
    assert not missing, f"worker never receives {sorted(missing)}"


def test_env_file_values_pass_through_and_unset_ones_stay_unset(resolved: dict[str, Any]) -> None:
    server = environment(resolved, "server")
    assert server["MIN_DELTA"] == "0.002"  # set in the env file
    assert server["PRESET"] == example_entries()["PRESET"][1]
    assert server["LEASE_SECONDS"] is None  # not set: not passed, so the code's default applies
    assert "s3cret@postgres:5432" in server["DATABASE_URL"]
    assert environment(resolved, "worker")["AUTORESEARCH_SERVER"] == "http://server:8000"


def test_a_missing_password_is_refused_with_the_fix(tmp_path: Path) -> None:
    done = compose_config(tmp_path, ["PRESET=cpu"])
    assert done.returncode != 0
    assert "set POSTGRES_PASSWORD in .env" in done.stderr


def test_services_start_in_order_and_workers_get_gpus_and_a_working_sandbox(
    resolved: dict[str, Any],
) -> None:
    services = resolved["services"]
    assert services["postgres"]["healthcheck"]["test"]
    assert any(volume.endswith(":/var/lib/postgresql/data:rw") for volume in services["postgres"]["volumes"])
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    server_deps = services["server"]["depends_on"]
    assert server_deps["migrate"]["condition"] == "service_completed_successfully"
    worker = services["worker"]
    assert "depends_on" not in worker  # workers on other hosts start without the server's services
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
    assert set(worker["security_opt"]) == {
        "seccomp=unconfined",
        "apparmor=unconfined",
        "systempaths=unconfined",
    }
    assert not worker.get("privileged") and not worker.get("cap_add")


def test_the_worker_entrypoint_is_installed_by_the_dockerfile(resolved: dict[str, Any]) -> None:
    (entrypoint,) = resolved["services"]["worker"]["entrypoint"]
    copies = [
        line.split() for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith("COPY")
    ]
    installed = {words[-1]: words[-2] for words in copies}
    assert installed[f"/usr/local/bin/{entrypoint}"] == "docker/gpu-worker.sh"


def test_the_dockerfile_copies_every_package_and_only_existing_paths() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    sources = {
        source
        for line in dockerfile.splitlines()
        if line.startswith("COPY")
        for source in [word for word in line.split()[1:] if not word.startswith("--")][:-1]
    }
    for source in sources:
        assert (REPO / source).exists(), f"the Dockerfile copies {source}, which does not exist"
    pyproject = (REPO / "pyproject.toml").read_text()
    packages = set(re.findall(r'"(\w+)\*"', pyproject.split("[tool.setuptools.packages.find]")[1]))
    assert packages <= sources, f"packages missing from the image: {sorted(packages - sources)}"
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()}
    assert not sources & ignored, "the Dockerfile copies something .dockerignore leaves out"


def test_the_dockerfile_installs_torch_at_the_pinned_version() -> None:
    """Runs the Dockerfile's own `$(...)` that picks torch's pin out of requirements.txt."""
    dockerfile = (REPO / "Dockerfile").read_text()
    (expression,) = re.findall(r'"\$\((grep[^)]*)\)"', dockerfile)
    picked = subprocess.run(["sh", "-c", expression], cwd=REPO, capture_output=True, text=True, check=True)
    pins = [line.split()[0] for line in (REPO / "requirements.txt").read_text().splitlines()]
    assert picked.stdout.strip() in pins and picked.stdout.startswith("torch==")
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu12" in dockerfile


def test_env_example_covers_every_setting_and_compose_variable() -> None:
    compose_variables = set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", COMPOSE.read_text()))
    wanted = SERVER | HARNESS | WORKER | AGENT_CLI | compose_variables
    missing = wanted - set(example_entries())
    assert not missing, f".env.example does not mention {sorted(missing)}"


def test_env_example_values_are_valid_and_commented_ones_are_the_defaults() -> None:
    entries = example_entries()
    h100 = PRESETS["h100"]
    for settings_class in (ServerSettings, HarnessSettings):
        values = {
            name: value
            for name, (_commented, value) in entries.items()
            if name.lower() in settings_class.model_fields and value != ""
        }
        parsed = settings_class.model_validate({name.lower(): value for name, value in values.items()})
        for name, (commented, value) in entries.items():
            field = name.lower()
            if not commented or field not in settings_class.model_fields:
                continue
            default = h100.get(field, settings_class.model_fields[field].default)
            shown = getattr(parsed, field) if value != "" else None
            expected = default if default not in ("", None) else None
            assert shown == expected, f".env.example shows {name}={value!r}; the default is {expected!r}"


def test_env_example_is_what_compose_reads(tmp_path: Path) -> None:
    """Every uncommented .env.example line is a plain NAME=value that docker-compose accepts."""
    lines = [line for line in ENV_EXAMPLE.read_text().splitlines() if line and not line.startswith("#")]
    assert all(EXAMPLE_LINE.match(line) for line in lines)
    assert all(shlex.split(line.split("=", 1)[1] or "''") for line in lines)
    done = compose_config(tmp_path, [*lines, "POSTGRES_PASSWORD=x"])
    assert done.returncode == 0, done.stderr


def test_the_server_health_check_asks_a_route_the_server_has(resolved: dict[str, Any]) -> None:
    command = " ".join(resolved["services"]["server"]["healthcheck"]["test"])
    (path,) = re.findall(r"http://127\.0\.0\.1:8000(/[\w/]+)", command)
    assert path in {API_PREFIX + route.path for route in ops.router.routes}
