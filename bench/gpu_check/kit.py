"""`make gpu-kit`: everything the GPU check needs that the lent GPU machine lacks, in one folder.

    python -m bench.gpu_check.kit

The GPU machine (docs/benchmarks.md, "GPU check") has Python 3.12 with torch, numpy, pyarrow and
tiktoken, no network, and receives the working tree plus carried ignored folders, 64 MiB in all.
The kit (ignored, under var/) holds:

- wheels/: CPython 3.12 manylinux x86-64 wheels of every package the server, worker, runner and
  CLI need beyond the GPU image's own big ones (IMAGE_PROVIDED): pip's resolution of
  requirements-runtime.txt for that machine, with requirements.txt's pins as constraints;
- debs/: bubblewrap and git and the libraries they link (for a machine without them), unpacked
  there without installing anything;
- corpus/ and data/: the default corpus (harness.data.speeches, downloaded here: the GPU machine has
  no network) as a `local` source, prepared for the `gpu-check` preset, with the validation secret
  `prepare` made in data/. The local corpus's files get a fixed modification time and are named by
  a path relative to the repository, so `prepare` finds every stage done on both machines;
- kit.json: what is in it, the data's harness id and the sizes.

The kit and the tracked working tree must fit in the 64 MiB a device call carries.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
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
from harness.data.speeches import fetch_speeches
from harness.data_layout import prepared_paths, read_manifest
from harness.prepare import prepare

# A device call carries the working tree and the carried folders, at most this much in all.
CARRY_LIMIT_BYTES = 64 << 20

# What the server, worker, CLI and runner need at run time (no test tools), resolved for the GPU
# machine; requirements.txt pins every version.
RUNTIME_REQUIREMENTS = REPO / "requirements-runtime.txt"
PINS = REPO / "requirements.txt"
# Already on the GPU image (docs/benchmarks.md): never carried; nothing in the runtime list may
# come to need them through the resolver (it would pick versions the image does not have).
IMAGE_PROVIDED = frozenset({"torch", "numpy", "pyarrow", "tiktoken"})
# The GPU machine's interpreter and platforms, for pip's resolution and the wheels' tags.
PYTHON_VERSION = "3.12"
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


def requirement_pins(path: Path = PINS) -> dict[str, str]:
    """name -> pinned version, from requirements.txt (names canonicalised)."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            versions = [spec.version for spec in requirement.specifier if spec.operator == "=="]
            if len(versions) != 1:
                raise KitError(f"{path}: {line!r} is not pinned to one exact version")
            pins[canonicalize_name(requirement.name)] = versions[0]
    return pins


def target_args() -> list[str]:
    """pip's options for wheels of the GPU machine's CPython and platforms."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    return ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp", *platforms]


def requirements_sha256() -> str:
    """What a resolution depends on: the runtime list and the pins."""
    return hashlib.sha256(RUNTIME_REQUIREMENTS.read_bytes() + PINS.read_bytes()).hexdigest()


def resolve_runtime(pins: dict[str, str]) -> dict[str, str]:
    """name -> version of every distribution pip's resolver installs for requirements-runtime.txt
    on the GPU machine, requirements.txt's pins as constraints (a dry run: nothing is installed,
    only metadata is fetched from PyPI). Each must be pinned, and none may be the image's own."""
    with tempfile.TemporaryDirectory(prefix="gpu-kit-resolve-") as tmp:
        constraints, report = Path(tmp) / "constraints.txt", Path(tmp) / "report.json"
        constraints.write_text("".join(f"{n}=={v}\n" for n, v in pins.items() if n not in IMAGE_PROVIDED))
        command = [
            sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
            "--report", str(report), "--target", str(Path(tmp) / "target"), *target_args(),
            "-r", str(RUNTIME_REQUIREMENTS), "-c", str(constraints),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise KitError(f"pip could not resolve {RUNTIME_REQUIREMENTS.name} (is PyPI reachable?):\n"
                           f"{done.stderr[-3000:]}")  # fmt: skip
        installed = json.loads(report.read_text())["install"]
    resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in installed}
    if IMAGE_PROVIDED & set(resolved):
        raise KitError(
            f"{RUNTIME_REQUIREMENTS.name} now needs {sorted(IMAGE_PROVIDED & set(resolved))}, which the GPU "
            "image provides at its own versions: pin the requirement that pulls it to a version that does not"
        )
    unpinned = sorted(set(resolved) - set(pins))
    if unpinned:
        raise KitError(f"{', '.join(unpinned)}: needed at run time on Python {PYTHON_VERSION} but not "
                       "pinned in requirements.txt; pin them")  # fmt: skip
    return dict(sorted(resolved.items()))


def wanted_wheels(pins: dict[str, str]) -> dict[str, str]:
    """The resolution, reused from kit.json while the requirement files are unchanged (a resolve
    asks PyPI for the metadata of every package)."""
    if MANIFEST.is_file():
        record = json.loads(MANIFEST.read_text())
        if record.get("requirements_sha256") == requirements_sha256():
            return dict(record["wheels"])
    return resolve_runtime(pins)


def wheel_name_version(path: Path) -> tuple[str, str]:
    name, version = path.name.split("-")[:2]
    return canonicalize_name(name), version


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
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *target_args(),
        "--dest", str(WHEELS), *missing,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise KitError(f"pip download failed (is PyPI reachable?):\n{done.stderr[-3000:]}")


def check_wheels(wanted: dict[str, str], folder: Path = WHEELS) -> list[str]:
    """Problems with the wheels in `folder` against the resolution `wanted`: missing or extra."""
    have = {wheel_name_version(p): p for p in folder.glob("*.whl")}
    problems = [
        f"{name}=={version}: no wheel" for name, version in wanted.items() if (name, version) not in have
    ]
    problems += [f"{path.name}: not in the wanted set" for (n, v), path in have.items() if wanted.get(n) != v]
    return problems


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
    """The corpus (the default one, as a local source) and its preparation for the gpu-check preset."""
    if not (CORPUS / LOCAL_VAL_FILE).is_file():
        building = KIT / ".corpus-building"
        shutil.rmtree(building, ignore_errors=True)
        fetch_speeches(building, REPO / "var" / "downloads", 0)  # the wheel stays out of the kit
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
        wanted = wanted_wheels(requirement_pins())
        download_wheels(wanted)
        problems = check_wheels(wanted)
        if problems:
            raise KitError("the wheels are not a complete set:\n  " + "\n  ".join(problems))
        apt_download()
        data = build_data()
        kit_size, tree_size = folder_bytes(KIT), tree_bytes()
        record: dict[str, Any] = {
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "commit": git_commit(),
            "requirements_sha256": requirements_sha256(),
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
