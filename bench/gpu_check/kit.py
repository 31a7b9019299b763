"""`make gpu-kit`: everything the GPU check needs that the lent GPU machine lacks, in one folder.

    python -m bench.gpu_check.kit

The GPU machine (docs/benchmarks.md, "GPU check") has Python 3.12 with torch, numpy, pyarrow and
tiktoken, no network, and receives the working tree plus carried ignored folders, 64 MiB in all.
The kit (ignored, under var/) holds:

- wheels/: CPython 3.12 manylinux x86-64 wheels of every package the server, worker, runner and
  CLI need beyond the GPU image's own big ones (IMAGE_PROVIDED), at the versions pinned in
  requirements.txt: the runtime imports of our code (found by reading it) and their requirements,
  evaluated for that machine;
- debs/: bubblewrap and git and the libraries they link (for a machine without them), unpacked
  there without installing anything;
- corpus/ and data/: the built-in corpus of this machine (its Python standard library) as a
  `local` source, prepared for the `gpu-check` preset. A `local` source, not `builtin`: the built-in
  corpus depends on the Python version, and the GPU machine's differs, so there `prepare` would
  rebuild everything and the harness id would change. The local corpus's files get a fixed
  modification time and are named by a path relative to the repository, so `prepare` finds every
  stage done on both machines;
- kit.json: what is in it, the data's harness id and the sizes.

The kit and the tracked working tree must fit in the 64 MiB a device call carries.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

from filelock import FileLock
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bench.gpu_check.environment import TOOLS
from bench.gpu_check.layout import (
    CORPUS,
    DATA,
    DEBS,
    KIT,
    LOCAL_VAL_FILE,
    MANIFEST,
    PRESET,
    REPO,
    WHEELS,
    kit_env,
    pin_corpus_mtimes,
)
from harness.config import HarnessSettings, load_settings
from harness.data.builtin import fetch_builtin
from harness.data_layout import prepared_paths, read_manifest
from harness.prepare import prepare

# A device call carries the working tree and the carried folders, at most this much in all.
CARRY_LIMIT_BYTES = 64 << 20

# The code that runs on the GPU machine; its imports are the roots of the wheel set.
RUNTIME_PACKAGES = ("harness", "server", "worker", "client", "cli", "agent", "migrations")
# Already on the GPU image (docs/benchmarks.md): never carried, and their requirements not followed.
IMAGE_PROVIDED = frozenset({"torch", "numpy", "pyarrow", "tiktoken"})
# Imported by runtime code but not needed by the check, with the reason.
NOT_NEEDED = {"psycopg": "PostgreSQL only; the check's server uses SQLite"}
# Needed at runtime without an import of ours naming them, and why.
EXTRA_ROOTS = {
    "jinja2": "fastapi.templating imports it for the server's pages",
    "httptools": "uvicorn's fast HTTP parser, used when installed (docs/benchmarks.md)",
    "uvloop": "uvicorn's fast event loop, used when installed",
}
# The GPU machine's interpreter and platform, for wheel tags and requirement markers.
TARGET_ENV = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "extra": "",
}
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
# The programs the GPU machine may lack (bubblewrap, git) and the libraries they link beyond libc.
DEB_PACKAGES = tuple(sorted({name for tool in TOOLS for name in tool.packages}))


class KitError(RuntimeError):
    """The kit cannot be built or is not complete; the message says what to fix."""


def kit_settings() -> HarnessSettings:
    """The settings every process of the check gets from `kit_env()`."""
    fields = {key.lower(): value for key, value in kit_env().items() if key != "PRESET"}
    return load_settings(PRESET, **fields)


# ---------------------------------------------------------------------------------------------
# Wheels


def requirement_pins(path: Path = REPO / "requirements.txt") -> dict[str, str]:
    """name -> pinned version, from requirements.txt (names canonicalised)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            versions = [spec.version for spec in requirement.specifier if spec.operator == "=="]
            if len(versions) != 1:
                raise KitError(f"{path}: {line!r} is not pinned to one exact version")
            pins[canonicalize_name(requirement.name)] = versions[0]
    return pins


def runtime_imports(root: Path = REPO) -> set[str]:
    """Top-level names of every module the runtime packages import (standard library left out)."""
    names: set[str] = set()
    for package in RUNTIME_PACKAGES:
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return {name for name in names if name not in sys.stdlib_module_names and name not in RUNTIME_PACKAGES}


def root_distributions() -> set[str]:
    """The distributions our runtime code imports, plus uvicorn's optional fast paths."""
    owners = importlib.metadata.packages_distributions()
    roots = set(EXTRA_ROOTS)
    for name in runtime_imports():
        if name not in owners:
            raise KitError(f"runtime code imports {name!r}, which no installed distribution provides")
        roots.update(owners[name])
    return {canonicalize_name(name) for name in roots} - set(NOT_NEEDED)


def needed(requirement: Requirement, extras: frozenset[str] = frozenset()) -> bool:
    """Whether a requirement applies on the GPU machine to a distribution installed with `extras`
    (a requirement such as `pyjwt[crypto]` asks for the lines marked `extra == "crypto"`)."""
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**TARGET_ENV, "extra": extra}) for extra in ("", *sorted(extras)))


def wheel_set(pins: dict[str, str]) -> dict[str, str]:
    """name -> version of every distribution to carry: the roots' requirement closure with the
    extras each requirement asks for, pinned."""
    chosen: dict[str, str] = {}
    extras: dict[str, frozenset[str]] = {}  # the extras asked of each chosen distribution so far
    pending: list[tuple[str, frozenset[str]]] = [(name, frozenset()) for name in sorted(root_distributions())]
    while pending:
        name, asked = pending.pop()
        if name in IMAGE_PROVIDED or (name in chosen and asked <= extras[name]):
            continue
        if name not in pins:
            raise KitError(f"{name} is needed at runtime but not pinned in requirements.txt; pin it")
        installed = importlib.metadata.version(name)
        if installed != pins[name]:
            raise KitError(f"{name} {installed} is installed, requirements.txt pins {pins[name]}: reinstall")
        chosen[name] = pins[name]
        extras[name] = extras.get(name, frozenset()) | asked
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if needed(requirement, extras[name]):
                pending.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return dict(sorted(chosen.items()))


def wheel_name_version(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return canonicalize_name(name), version


def wheel_metadata(path: Path) -> Any:
    with zipfile.ZipFile(path) as archive:
        member = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(archive.read(member).decode())


def download_wheels(wanted: dict[str, str]) -> None:
    """Fetch the wheels from PyPI (one pip call); drop any other version left from an older kit."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    present = {wheel_name_version(p): p for p in WHEELS.glob("*.whl")}
    for (name, version), path in present.items():
        if wanted.get(name) != version:
            path.unlink()  # two versions of one package would stop the install there
    missing = [f"{name}=={version}" for name, version in wanted.items() if (name, version) not in present]
    if not missing:
        return
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--python-version", TARGET_ENV["python_version"], "--implementation", "cp",
        *platforms, "--dest", str(WHEELS), *missing,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KitError(f"pip download failed (is PyPI reachable?):\n{done.stderr[-3000:]}")


def check_wheels(wanted: dict[str, str], folder: Path = WHEELS) -> list[str]:
    """Problems with the wheels in `folder`: missing, extra, or a requirement that neither another
    wheel nor the GPU image meets."""
    problems = []
    have = {wheel_name_version(p): p for p in folder.glob("*.whl")}
    versions = {name: version for name, version in have}
    requires = {
        name: [Requirement(line) for line in wheel_metadata(path).get_all("Requires-Dist") or []]
        for (name, _), path in have.items()
    }
    for name, version in wanted.items():
        if versions.get(name) != version:
            problems.append(f"{name}=={version}: no wheel")
    for (name, version), path in have.items():
        if wanted.get(name) != version:
            problems.append(f"{path.name}: not in the wanted set")
    asked = asked_extras(requires)
    for name, requirements in requires.items():
        for requirement in requirements:
            dependency = canonicalize_name(requirement.name)
            if not needed(requirement, asked.get(name, frozenset())) or dependency in IMAGE_PROVIDED:
                continue
            if dependency not in versions:
                problems.append(f"{name} needs {requirement}, which has no wheel")
            elif not requirement.specifier.contains(versions[dependency], prereleases=True):
                problems.append(f"{name} needs {requirement}, the kit has {versions[dependency]}")
    return problems


def asked_extras(requires: dict[str, list[Requirement]]) -> dict[str, frozenset[str]]:
    """The extras that the applicable requirements of the distributions in `requires` ask of each
    other (to a fixed point: an extra's own requirements may ask for more)."""
    asked: dict[str, frozenset[str]] = {}
    changed = True
    while changed:
        changed = False
        for name, requirements in requires.items():
            for requirement in requirements:
                dependency = canonicalize_name(requirement.name)
                more = asked.get(dependency, frozenset()) | frozenset(requirement.extras)
                if needed(requirement, asked.get(name, frozenset())) and more != asked.get(dependency):
                    asked[dependency], changed = more, True
    return asked


# ---------------------------------------------------------------------------------------------
# Programs (bubblewrap, git)


def apt_download() -> None:
    """The .deb files of DEB_PACKAGES for amd64, from the Debian mirror this machine uses."""
    DEBS.mkdir(parents=True, exist_ok=True)
    if all(any(DEBS.glob(f"{name}_*_amd64.deb")) for name in DEB_PACKAGES):
        return
    arch = ["-o", "APT::Architecture=amd64", "-o", "APT::Architectures=amd64"]
    done = subprocess.run(
        ["apt-get", *arch, "download", *DEB_PACKAGES], cwd=DEBS, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        # No package lists yet (a fresh container): fetch them into a private folder and retry.
        lists = KIT.parent / "gpu-kit-apt-lists"
        (lists / "partial").mkdir(parents=True, exist_ok=True)
        private = [*arch, "-o", f"Dir::State::Lists={lists}"]
        update = subprocess.run(["apt-get", *private, "update"], capture_output=True, text=True, check=False)
        done = subprocess.run(
            ["apt-get", *private, "download", *DEB_PACKAGES],
            cwd=DEBS,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise KitError(
                f"apt-get download {' '.join(DEB_PACKAGES)} failed:\n{update.stderr[-1500:]}{done.stderr}"
            )


# ---------------------------------------------------------------------------------------------
# Data


def build_data() -> dict[str, Any]:
    """The corpus (this machine's built-in one) and its preparation for the gpu-check preset."""
    if not (CORPUS / LOCAL_VAL_FILE).is_file():
        building = KIT / ".corpus-building"
        shutil.rmtree(building, ignore_errors=True)
        fetch_builtin(building, 0)
        shutil.rmtree(CORPUS, ignore_errors=True)
        building.rename(CORPUS)
    pin_corpus_mtimes()
    settings = kit_settings()
    cwd = Path.cwd()
    os.chdir(REPO)  # LOCAL_DATA_DIR is relative to the repository root
    try:
        prepare(settings, progress=False)
        manifest = read_manifest(settings)
    finally:
        os.chdir(cwd)
    return {
        "preset": PRESET,
        "harness_id": manifest["harness_id"],
        "val_sha256": manifest["val_sha256"],
        "tokenizer_sha256": manifest["tokenizer_sha256"],
        "train_tokens": manifest["train_tokens"],
        "train_docs": manifest["train_docs"],
        "eval_rows": manifest["eval_rows"],
        "corpus": f"the Python {sys.version.split()[0]} standard library of the machine that built the kit",
        "prepared": str(prepared_paths(settings).root.relative_to(KIT)),
    }


# ---------------------------------------------------------------------------------------------
# Sizes and the whole build


def tree_bytes() -> int:
    """Bytes of the files a device call sends besides the carried folders (tracked and untracked,
    not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    paths = (REPO / name for name in listed.decode().split("\0") if name)
    return sum(path.stat().st_size for path in paths if path.is_file() and not path.is_symlink())


def git_commit() -> str:
    """The commit the kit was built from, marked when the working tree had changes."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout

    changed = " with uncommitted changes" if git("status", "--porcelain") else ""
    return git("rev-parse", "HEAD").strip() + changed


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def build() -> dict[str, Any]:
    """Build or refresh the kit (each part is skipped when already current); returns kit.json."""
    started = time.monotonic()
    KIT.mkdir(parents=True, exist_ok=True)
    with FileLock(KIT.parent / f".{KIT.name}.lock"):
        wanted = wheel_set(requirement_pins())
        download_wheels(wanted)
        problems = check_wheels(wanted)
        if problems:
            raise KitError("the wheels are not a complete set:\n  " + "\n  ".join(problems))
        apt_download()
        data = build_data()
        kit_size, tree_size = folder_bytes(KIT), tree_bytes()
        record = {
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "commit": git_commit(),
            "wheels": wanted,
            "wheel_files": sorted(p.name for p in WHEELS.glob("*.whl")),
            "debs": sorted(p.name for p in DEBS.glob("*.deb")),
            "data": data,
            "bytes": {
                "wheels": folder_bytes(WHEELS),
                "debs": folder_bytes(DEBS),
                "corpus": folder_bytes(CORPUS),
                "data": folder_bytes(DATA),
                "kit": kit_size,
                "working_tree": tree_size,
                "limit": CARRY_LIMIT_BYTES,
            },
        }
        if kit_size + tree_size > CARRY_LIMIT_BYTES:
            raise KitError(
                f"the kit ({kit_size / 2**20:.1f} MiB) and the working tree ({tree_size / 2**20:.1f} MiB) "
                f"exceed the {CARRY_LIMIT_BYTES >> 20} MiB a device call carries"
            )
        MANIFEST.write_text(json.dumps(record, indent=1) + "\n")
    record["seconds"] = round(time.monotonic() - started, 1)
    return record


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()
    try:
        record = build()
    except KitError as exc:
        raise SystemExit(f"make gpu-kit: {exc}") from exc
    mib = {key: value / 2**20 for key, value in record["bytes"].items()}
    print(
        f"{KIT}: {len(record['wheels'])} wheels ({mib['wheels']:.1f} MiB), {len(record['debs'])} debs "
        f"({mib['debs']:.2f} MiB), corpus {mib['corpus']:.1f} MiB, prepared data {mib['data']:.1f} MiB; "
        f"kit {mib['kit']:.1f} MiB + working tree {mib['working_tree']:.1f} MiB of {mib['limit']:.0f} MiB; "
        f"harness id {record['data']['harness_id'][:16]}; {record['seconds']:.0f} s"
    )
    print(f'carry it with: carry=["{KIT.relative_to(REPO)}"]')


if __name__ == "__main__":
    main()
