"""Step 0 of the GPU check: what the machine is, and whether the kit works on it.

Python and torch, CUDA and the GPU; for every package the kit carries, which copy is imported
(the image's own or the kit's) and whether every module of the code it runs imports; whether the
kit's data gives, here, the harness id it was built with (if not, `prepare` would redo it);
whether bubblewrap can make the harness's sandbox, with the exact error if not; and whether torch
finds the GPU inside that sandbox (which clears LD_LIBRARY_PATH: libcuda must be in the dynamic
linker's cache or under the bound driver folders).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import pkgutil
import platform
import subprocess
import sys
from typing import Any

from bench.gpu_check.layout import MANIFEST, REPO, WHEELS
from bench.gpu_check.results import Results, run_step

SECTION = "0_environment"
# The code a GPU machine runs (server with MCP, worker, CLI, runner): every module of it is imported
# here, before any GPU step, so that a wheel missing from the kit is named with the module that
# needs it instead of a server that does not start (../shared/gpu/README.md, the first try).
RUNTIME_PACKAGES = ("harness", "server", "worker", "client", "protocol", "cli")


def gpu_facts() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        facts.update(
            device=torch.cuda.get_device_name(0),
            capability=list(torch.cuda.get_device_capability(0)),
            memory_gib=round(properties.total_memory / 2**30, 1),
            multiprocessors=properties.multi_processor_count,
            bf16_supported=torch.cuda.is_bf16_supported(),
        )
        query = ["nvidia-smi", "--query-gpu=driver_version,name,clocks.max.sm", "--format=csv,noheader"]
        try:
            smi = subprocess.run(query, capture_output=True, text=True, timeout=60, check=False)
            facts["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
        except (OSError, subprocess.TimeoutExpired) as exc:
            facts["nvidia_smi"] = f"did not run: {exc}"
    return facts


def package_origins() -> dict[str, str]:
    """For each package the kit carries: the version imported and where from (the image or the
    kit's private folder, which the driver names in GPU_CHECK_SITE on the GPU machine)."""
    carried = json.loads(MANIFEST.read_text())["wheels"] if MANIFEST.is_file() else {}
    site = os.environ.get("GPU_CHECK_SITE")
    origins = {}
    for name in carried:
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            origins[name] = "MISSING"
            continue
        where = str(distribution.locate_file(""))
        origin = "kit" if site and where.startswith(site) else "this interpreter's own"
        origins[name] = f"{distribution.version} ({origin})"
    return origins


def import_errors() -> dict[str, str]:
    """module -> why it does not import, for every module of RUNTIME_PACKAGES."""
    errors = {}
    for package in RUNTIME_PACKAGES:
        for info in pkgutil.walk_packages([str(REPO / package)], f"{package}."):
            try:
                importlib.import_module(info.name)
            except Exception as exc:
                errors[info.name] = f"{type(exc).__name__}: {exc}"
    return errors


def harness_facts() -> dict[str, Any]:
    from harness.config import PRESETS, load_settings
    from harness.data_layout import read_manifest
    from harness.runner import SandboxUnavailableError
    from harness.runner.sandbox import check_bwrap

    # The kit's harness id is that of the preset as it is; the --cpu dry run shortens the budget.
    settings = load_settings()
    as_built = settings.model_copy(update={"time_budget": PRESETS[settings.preset]["time_budget"]})
    manifest = read_manifest(as_built)
    kit_id = json.loads(MANIFEST.read_text())["data"]["harness_id"] if MANIFEST.is_file() else None
    facts: dict[str, Any] = {
        "preset": settings.preset,
        "harness_id": manifest["harness_id"],
        "kit_harness_id": kit_id,
        "harness_id_matches_kit": manifest["harness_id"] == kit_id,
    }
    try:
        facts["bwrap"] = check_bwrap()
        facts["sandbox"] = "bubblewrap can make the harness's sandbox"
    except SandboxUnavailableError as exc:
        facts["sandbox"] = f"UNAVAILABLE: {exc}"
    return facts


# Run inside the harness's sandbox: does torch find the GPU there (device nodes, driver files,
# and libcuda through the dynamic linker's cache, since the sandbox clears LD_LIBRARY_PATH)?
SANDBOX_CUDA = """
import json, torch
facts = {"cuda_available": torch.cuda.is_available()}
if facts["cuda_available"]:
    x = torch.ones(256, 256, device="cuda")
    facts.update(device=torch.cuda.get_device_name(0), matmul_sum=float((x @ x).sum()))
print(json.dumps(facts))
"""


def sandbox_cuda(mode: str) -> dict[str, Any]:
    from harness.runner.sandbox import SandboxSpec, bwrap_argv

    argv = bwrap_argv(SandboxSpec(cwd="/tmp", cuda=mode == "gpu"), [sys.executable, "-I", "-c", SANDBOX_CUDA])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        return {"exit_code": done.returncode, "stderr": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def linker_facts() -> dict[str, Any]:
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except OSError as exc:
        cache = f"ldconfig did not run: {exc}"
    return {
        "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH"),
        "libcuda_in_linker_cache": [line.strip() for line in cache.splitlines() if "libcuda.so" in line],
    }


def body(results: Results, mode: str) -> None:
    results.update(
        SECTION,
        python=sys.version,
        executable=sys.executable,
        machine=platform.platform(),
        cpus=len(os.sched_getaffinity(0)),
        wheels_in_kit=len(list(WHEELS.glob("*.whl"))),
    )
    results.update(SECTION, **gpu_facts())
    results.update(SECTION, packages=package_origins(), import_errors=import_errors())
    results.update(SECTION, **harness_facts(), linker=linker_facts())
    try:
        results.update(SECTION, cuda_in_sandbox=sandbox_cuda(mode))
    except Exception as exc:
        results.update(SECTION, cuda_in_sandbox={"error": f"{type(exc).__name__}: {exc}"})
    problems = []
    if results.sections[SECTION]["import_errors"]:
        problems.append("some imports fail (see import_errors)")
    if mode == "gpu" and not results.sections[SECTION]["cuda_available"]:
        problems.append("torch sees no CUDA GPU")
    if mode == "gpu" and not results.sections[SECTION]["cuda_in_sandbox"].get("cuda_available"):
        problems.append("torch sees no CUDA GPU inside the sandbox (see cuda_in_sandbox)")
    if not results.sections[SECTION]["harness_id_matches_kit"]:
        problems.append("the kit's data gives another harness id here: `prepare` would redo it")
    results.update(
        SECTION,
        status="failed" if problems else "ok",
        error="; ".join(problems) or None,
        headline=("device", "torch", "harness_id_matches_kit", "sandbox", "cuda_in_sandbox"),
    )


if __name__ == "__main__":
    run_step((SECTION,), body)
