"""deploy/kubernetes/, offline: every overlay renders, validates and names only real settings.

No cluster runs here: each overlay is rendered by `kubectl kustomize` (the kustomize built into
kubectl), every rendered object is validated against the Kubernetes API schemas that
kubernetes-validate ships (strict: an unknown field is an error), and the containers of our
image are checked against the settings the code reads, as tests/kit/test_compose.py does for
docker-compose.yml.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from client.api import API_PREFIX
from harness.config import PRESETS, HarnessSettings
from server.api.routes import ops
from server.core.config import ServerSettings
from tests.kit.settings_catalog import HARNESS, REPO, SERVER, WORKER

KUBERNETES = REPO / "deploy" / "kubernetes"
OVERLAYS = sorted(path.name for path in (KUBERNETES / "overlays").iterdir())
GPU_OVERLAYS = [name for name in OVERLAYS if name != "cpu-demo"]
# The oldest Kubernetes the manifests are for: pods in a user namespace of their own
# (hostUsers: false) with an unmasked /proc, which bubblewrap needs (docs/operations.md).
OLDEST = "1.33"
IMAGE = "autoresearch-server:latest"
# Which settings each container of our image may be given, by container name.
READS = {
    "server": SERVER | HARNESS,
    "init-project": SERVER | HARNESS,
    "migrate": SERVER,
    "worker": HARNESS | WORKER,
}
SECRET_SETTINGS = {"DATABASE_URL", "ADMIN_TOKEN", "AUTORESEARCH_WORKER_TOKEN"}


def render(overlay: str) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl is needed to render deploy/kubernetes (it has kustomize built in)")
    done = subprocess.run(
        [kubectl, "kustomize", str(KUBERNETES / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {overlay: render(overlay) for overlay in OVERLAYS}


def objects(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == kind}


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        doc["metadata"]["name"]: doc["spec"]["template"]["spec"]
        for doc in docs
        if doc["kind"] in ("Deployment", "StatefulSet", "Job")
    }


def app_containers(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) for every container of our image, init containers included."""
    return [
        (spec, container)
        for spec in pod_specs(docs).values()
        for container in [*spec.get("initContainers", []), *spec["containers"]]
        if container["image"] == IMAGE
    ]


def worker_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return objects(docs, "Deployment")["autoresearch-worker"]["spec"]["template"]["spec"]


def variables(docs: list[dict[str, Any]], container: dict[str, Any]) -> set[str]:
    """Every environment variable the container gets: `env` and the ConfigMaps of `envFrom`."""
    config_maps = objects(docs, "ConfigMap")
    names = {entry["name"] for entry in container.get("env", [])}
    for source in container.get("envFrom", []):
        names |= set(config_maps[source["configMapRef"]["name"]]["data"])
    return names


def test_there_are_the_three_overlays() -> None:
    assert OVERLAYS == ["cpu-demo", "external-db", "in-cluster-db"]


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", [OLDEST, latest_version()])
def test_every_rendered_object_validates_against_the_kubernetes_schemas(
    rendered: dict[str, list[dict[str, Any]]], overlay: str, version: str
) -> None:
    for doc in rendered[overlay]:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{overlay}: {doc['kind']} {doc['metadata']['name']} (Kubernetes {version}): {exc}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_variable_given_to_our_containers_is_a_setting_the_code_reads(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    docs = rendered[overlay]
    containers = app_containers(docs)
    assert {container["name"] for _spec, container in containers} == set(READS)
    for _spec, container in containers:
        unknown = variables(docs, container) - READS[container["name"]]
        assert not unknown, f"{overlay}: {container['name']} is given {sorted(unknown)}, which nothing reads"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_what_each_container_needs_reaches_it_and_tokens_come_from_secrets(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    docs = rendered[overlay]
    by_name = {container["name"]: container for _spec, container in app_containers(docs)}
    assert {"DATABASE_URL", "DATA_DIR", "PRESET", "DATA_SOURCE"} <= variables(docs, by_name["server"])
    assert {"HOST", "PORT"} <= variables(docs, by_name["server"])
    assert {"AUTORESEARCH_SERVER", "AUTORESEARCH_WORKER_TOKEN", "DATA_DIR", "PRESET"} <= variables(
        docs, by_name["worker"]
    )
    assert "DATABASE_URL" in variables(docs, by_name["migrate"])
    for name, container in by_name.items():
        for entry in container.get("env", []):
            if entry["name"] in SECRET_SETTINGS:
                assert "secretKeyRef" in entry.get("valueFrom", {}), (
                    f"{name}: {entry['name']} is not a Secret"
                )
        if name != "worker":
            assert "AUTORESEARCH_WORKER_TOKEN" not in variables(docs, container)
    # The server and the workers read the harness settings from one ConfigMap: they agree.
    harness_maps = [
        {source["configMapRef"]["name"] for source in by_name[name]["envFrom"]}
        for name in ("server", "worker")
    ]
    (shared,) = harness_maps[0] & harness_maps[1]
    values = objects(docs, "ConfigMap")[shared]["data"]
    assert set(values) <= HARNESS
    HarnessSettings.model_validate({key.lower(): value for key, value in values.items()})
    assert values["PRESET"] in PRESETS


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_config_maps_hold_valid_settings(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    for config_map in objects(rendered[overlay], "ConfigMap").values():
        values = {key.lower(): value for key, value in config_map["data"].items()}
        settings_class = HarnessSettings if set(config_map["data"]) <= HARNESS else ServerSettings
        assert set(config_map["data"]) <= {name.upper() for name in settings_class.model_fields}
        settings_class.model_validate(values)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_server_is_one_pod_probed_on_healthz_with_its_repo_on_a_volume(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    docs = rendered[overlay]
    server = objects(docs, "Deployment")["autoresearch-server"]
    assert server["spec"]["replicas"] == 1 and server["spec"]["strategy"]["type"] == "Recreate"
    spec = server["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    routes = {API_PREFIX + route.path for route in ops.router.routes}
    port = {entry["name"]: entry.get("value") for entry in container["env"]}["PORT"]
    (container_port,) = container["ports"]
    assert str(container_port["containerPort"]) == port
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] in routes
        assert container[probe]["httpGet"]["port"] == container_port["name"]
    data_dir = {entry["name"]: entry.get("value") for entry in container["env"]}["DATA_DIR"]
    (mount,) = container["volumeMounts"]
    assert mount["mountPath"] == data_dir  # the research repo (DATA_DIR/research.git) persists
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    claim = objects(docs, "PersistentVolumeClaim")[volume["persistentVolumeClaim"]["claimName"]]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # The init container makes the repo on that volume before the first start.
    (init,) = spec["initContainers"]
    assert init["volumeMounts"] == container["volumeMounts"] and "autoresearch init" in init["command"][-1]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_ingress_and_disruption_budget_select_pods_that_exist(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    docs = rendered[overlay]
    pod_labels = [
        doc["spec"]["template"]["metadata"]["labels"] for doc in docs if "template" in doc.get("spec", {})
    ]

    def selects_one(selector: dict[str, str]) -> bool:
        return sum(selector.items() <= labels.items() for labels in pod_labels) == 1

    for service in objects(docs, "Service").values():
        assert selects_one(service["spec"]["selector"]), service["metadata"]["name"]
    budget = objects(docs, "PodDisruptionBudget")["autoresearch-worker"]
    assert selects_one(budget["spec"]["selector"]["matchLabels"])
    workers = objects(docs, "Deployment")["autoresearch-worker"]
    assert (
        budget["spec"]["selector"]["matchLabels"].items()
        <= workers["spec"]["template"]["metadata"]["labels"].items()
    )
    services = objects(docs, "Service")
    for ingress in objects(docs, "Ingress").values():
        for rule in ingress["spec"]["rules"]:
            for path in rule["http"]["paths"]:
                backend = path["backend"]["service"]
                target = services[backend["name"]]
                assert backend["port"]["name"] in {port["name"] for port in target["spec"]["ports"]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_workers_finish_or_release_their_run_before_they_are_killed(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    spec = worker_pod(rendered[overlay])
    (container,) = spec["containers"]
    assert "--stop-now" in container["args"]  # SIGTERM releases the run at once
    command = container["lifecycle"]["preStop"]["exec"]["command"][-1]
    assert command.startswith("kill -USR1 1;")  # first: finish the run (the worker is PID 1)
    (waited,) = [int(n) for n in re.findall(r'"\$waited" -lt (\d+)', command)]
    h100 = PRESETS["h100"]
    assert waited >= h100["time_budget"] + h100["compile_allowance"] + 120  # a run and its scoring
    assert spec["terminationGracePeriodSeconds"] >= waited + 30  # then SIGTERM: time to release


@pytest.mark.parametrize("overlay", GPU_OVERLAYS)
def test_gpu_workers_get_one_gpu_each_and_a_sandbox_that_works(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    spec = worker_pod(rendered[overlay])
    (container,) = spec["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["args"][:3] == ["work", "--gpu", "0"]  # the one GPU the pod sees
    security = container["securityContext"]
    assert security["procMount"] == "Unmasked" and spec["hostUsers"] is False
    assert security["seccompProfile"]["type"] == security["appArmorProfile"]["type"] == "Unconfined"
    assert not security.get("privileged") and security["capabilities"]["drop"] == ["ALL"]
    (volume,) = spec["volumes"]
    cache = objects(rendered[overlay], "PersistentVolumeClaim")[volume["persistentVolumeClaim"]["claimName"]]
    assert cache["spec"]["accessModes"] == ["ReadWriteMany"]  # one prepared copy for all workers


def test_the_cpu_demo_runs_cpu_workers_on_the_cpu_preset(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["cpu-demo"]
    (container,) = objects(docs, "Deployment")["autoresearch-worker"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert "--cpu" in container["args"] and "nvidia.com/gpu" not in container["resources"]["limits"]
    assert {"PRESET": "cpu", "DATA_SOURCE": "speeches"}.items() <= next(
        m["data"].items() for m in objects(docs, "ConfigMap").values() if "PRESET" in m["data"]
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_has_requests_and_limits(
    rendered: dict[str, list[dict[str, Any]]], overlay: str
) -> None:
    for name, spec in pod_specs(rendered[overlay]).items():
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), f"{name}/{container['name']}"
            assert "memory" in resources["limits"], f"{name}/{container['name']}"


def test_postgres_is_in_the_cluster_or_outside_it(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for overlay in ("in-cluster-db", "cpu-demo"):
        (postgres,) = objects(rendered[overlay], "StatefulSet").values()
        assert postgres["spec"]["volumeClaimTemplates"]
        (container,) = postgres["spec"]["template"]["spec"]["containers"]
        password = {entry["name"]: entry for entry in container["env"]}["POSTGRES_PASSWORD"]
        assert password["valueFrom"]["secretKeyRef"]["name"] == "autoresearch-db"
    assert not objects(rendered["external-db"], "StatefulSet")


def test_the_image_is_the_one_compose_builds() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert compose["x-app"]["image"] == IMAGE


def test_manifests_are_only_the_ones_the_overlays_use() -> None:
    """Every YAML file under deploy/kubernetes is a kustomization or listed by one."""
    listed: set[Path] = set()
    for kustomization in KUBERNETES.rglob("kustomization.yaml"):
        listed.add(kustomization)
        spec = yaml.safe_load(kustomization.read_text())
        for entry in [*spec.get("resources", []), *spec.get("components", [])]:
            path = (kustomization.parent / entry).resolve()
            if path.is_file():
                listed.add(path)
    assert set(KUBERNETES.rglob("*.yaml")) == listed
