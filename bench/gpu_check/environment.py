"""Make the kit usable on the machine the check runs on, without installing anything system-wide.

Standard library only (it runs before the carried wheels are importable).

- Wheels (GPU machine): installed with pip into a private folder, never over the image's own
  packages. The runner starts its processes with `python -I`, which ignores PYTHONPATH, so one
  `.pth` file in the interpreter's site-packages names the repository and that folder; a `.pth`
  appends to sys.path, so the image's torch, numpy and any package it already has win.
- Wheels (--cpu dry run here): installed for CPython 3.12 manylinux into a scratch folder, which
  checks that each wheel fits the GPU machine's interpreter and platform; this machine's own
  virtualenv then runs the steps.
- bubblewrap and git (TOOLS): the system's when there is one (and --cpu is not given); else the
  kit's .deb files unpacked into a private folder (a .deb is an `ar` archive holding data.tar.*),
  run through a wrapper script that adds the kit's libraries only when the system lacks them
  (always with --cpu, so that the dry run exercises that path).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.gpu_check.layout import DEBS, REPO, WHEELS

PTH_NAME = "autoresearch_gpu_check.pth"
WHEEL_PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


def run(command: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


def install_wheels(site: Path, dry_run: bool) -> dict[str, Any]:
    """pip-install the kit's wheels into `site` (for CPython 3.12 manylinux when `dry_run`)."""
    wheels = sorted(str(p) for p in WHEELS.glob("*.whl"))
    if not wheels:
        return {"ok": False, "error": f"no wheels in {WHEELS}: run `make gpu-kit` before the check"}
    shutil.rmtree(site, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile"]
    command += ["--no-cache-dir", "--disable-pip-version-check", "--target", str(site)]
    if dry_run:
        platforms = [arg for platform in WHEEL_PLATFORMS for arg in ("--platform", platform)]
        command += ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", *platforms]
    done = run([*command, *wheels])
    record: dict[str, Any] = {"ok": done.returncode == 0, "wheels": len(wheels), "site": str(site)}
    if done.returncode != 0:
        record["error"] = (done.stderr or done.stdout)[-2000:]
        if not dry_run:  # no pip there: a wheel is a zip archive of its files, so unpack them
            for wheel in wheels:
                zipfile.ZipFile(wheel).extractall(site)
            record.update(ok=True, method="unzipped (pip failed, see error)")
    return record


def link_site(site: Path) -> dict[str, Any]:
    """One .pth file in this interpreter's site-packages: the repository, then the private folder."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    pth = purelib / PTH_NAME
    try:
        pth.write_text(f"{REPO}\n{site}\n")
    except OSError as exc:
        return {"ok": False, "error": f"cannot write {pth} ({exc}): the runner's `python -I` processes "
                "will not find the harness"}  # fmt: skip
    return {"ok": True, "pth": str(pth)}


def extract_deb(deb: Path, dest: Path) -> None:
    """Unpack the files of a .deb under `dest`, as `dpkg-deb -x` does."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{deb}: not a .deb (ar) archive")
    offset = 8
    while offset + 60 <= len(data):
        header = data[offset : offset + 60]
        name, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
        body = data[offset + 60 : offset + 60 + size]
        offset += 60 + size + size % 2
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as archive:
                archive.extractall(dest, filter="data")
            return
    raise ValueError(f"{deb}: no data.tar member")


def missing_libraries(binary: Path) -> list[str]:
    """Shared libraries `binary` needs that the dynamic linker cannot find here (by ldd)."""
    try:
        done = run(["ldd", str(binary)], timeout=30)
    except OSError as exc:  # no ldd: say so, and the kit's libraries are used
        return [f"unknown: ldd did not run ({exc})"]
    return [line.split()[0] for line in done.stdout.splitlines() if "not found" in line]


@dataclass(frozen=True)
class Tool:
    """A program the check needs that the GPU machine may lack, carried as Debian packages."""

    name: str
    packages: tuple[str, ...]  # the .deb files it needs, by package name
    binary: str  # its path in the unpacked packages
    env: tuple[tuple[str, str], ...] = ()  # variables pointing it at its own files (paths in the root)


# bubblewrap: the sandbox. git: the server's research repository (GitPython runs the git binary).
# Their libraries beyond libc travel too and are used only where the system lacks them (ldd).
TOOLS = (
    Tool("bwrap", ("bubblewrap", "libcap2", "libselinux1", "libpcre2-8-0"), "usr/bin/bwrap"),
    Tool(
        "git",
        ("git", "zlib1g", "libpcre2-8-0"),
        "usr/bin/git",
        (("GIT_EXEC_PATH", "usr/lib/git-core"), ("GIT_TEMPLATE_DIR", "usr/share/git-core/templates")),
    ),
)
LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")


def provide(tool: Tool, work: Path, force_kit: bool) -> dict[str, Any]:
    """The system's `tool`, or the kit's unpacked behind a wrapper script in `bin_dir` (to put first
    on the steps' PATH); what was done. `force_kit` uses the kit's copy and libraries regardless."""
    system = shutil.which(tool.name)
    if system and not force_kit:
        return {"source": "system", "path": system, "version": run([system, "--version"]).stdout.strip()}
    root, bin_dir = work / f"{tool.name}-root", work / "bin"
    shutil.rmtree(root, ignore_errors=True)
    debs = [deb for name in tool.packages for deb in sorted(DEBS.glob(f"{name}_*.deb"))]
    if len(debs) < len(tool.packages):
        return {"source": "none", "error": f"no {tool.name} here and not all of {tool.packages} in {DEBS}"}
    for deb in debs:
        extract_deb(deb, root)
    binary = root / tool.binary
    missing = missing_libraries(binary)
    use_kit_libs = force_kit or bool(missing)
    settings = [f"{key}={root / value}" for key, value in tool.env]
    if use_kit_libs:
        settings.append(f"LD_LIBRARY_PATH={':'.join(str(root / d) for d in LIBRARY_DIRS)}")
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / tool.name
    # The variables are set for the tool alone (the runner clears a sandboxed process's environment).
    wrapper.write_text(f'#!/bin/sh\n{" ".join(settings)} exec {binary} "$@"\n')
    wrapper.chmod(0o755)
    version = run([str(wrapper), "--version"], timeout=30)
    return {
        "source": "kit",
        "path": str(wrapper),
        "bin_dir": str(bin_dir),
        "debs": [p.name for p in debs],
        "libraries_missing_here": missing,
        "kit_libraries": use_kit_libs,
        "version": version.stdout.strip() or version.stderr.strip(),
        "runs": version.returncode == 0,
    }
