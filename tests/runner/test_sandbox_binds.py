"""The GPU folders a sandbox shows, against fake host layouts, in a real bubblewrap sandbox.

On the first GPU machine every sandbox failed to start: /usr/local/cuda was an absolute link to
/usr/local/cuda-13.0 inside the already bound /usr, and binding it at its own path made bwrap fail
("Can't bind mount ... No such file or directory", ../shared/gpu/README.md). No CPU test bound a
CUDA folder. Here a folder of the test stands for /usr, with the layouts a host may have.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.runner.sandbox import check_bwrap, system_args, visible_args, whole_roots


def layout(tmp: Path) -> tuple[Path, dict[str, Path]]:
    """A bound tree (`usr`) and, by what each is, the paths to show; a file `id` in each folder."""
    usr, opt = tmp / "usr", tmp / "opt"
    for folder in (usr / "local" / "cuda-13.0", opt / "nvidia", opt / "ext-13"):
        folder.mkdir(parents=True)
        (folder / "id").write_text(folder.name)
    paths = {
        "link in the tree to a folder in it": usr / "local" / "cuda",
        "dangling link": usr / "local" / "nvidia",
        "real folder outside the tree": opt / "nvidia",
        "link in the tree to a folder outside it": usr / "local" / "ext",
        "link outside the tree to a folder in it": opt / "cuda-link",
        "missing": opt / "cuda",
    }
    paths["link in the tree to a folder in it"].symlink_to(usr / "local" / "cuda-13.0")  # absolute
    paths["dangling link"].symlink_to(tmp / "gone")
    paths["link in the tree to a folder outside it"].symlink_to(opt / "ext-13")
    paths["link outside the tree to a folder in it"].symlink_to(usr / "local" / "cuda-13.0")
    return usr, paths


def sandboxed(usr: Path, binds: list[str], script: str) -> subprocess.CompletedProcess[str]:
    argv = [check_bwrap(), "--unshare-all", "--die-with-parent", *system_args()]
    argv += ["--ro-bind", str(usr), str(usr), *binds, "sh", "-c", script]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_the_layout_reproduces_the_failure_of_binding_each_folder_at_its_path(tmp_path: Path) -> None:
    usr, paths = layout(tmp_path)
    cuda = str(paths["link in the tree to a folder in it"])
    done = sandboxed(usr, ["--ro-bind", cuda, cuda], "true")  # what cuda_args() did
    assert done.returncode != 0 and "Can't bind mount" in done.stderr


def test_every_folder_is_visible_at_its_path_whatever_the_layout(tmp_path: Path) -> None:
    usr, paths = layout(tmp_path)
    roots = [usr.resolve(), *(root.resolve() for root in whole_roots())]
    binds = visible_args([str(path) for path in paths.values()], roots)
    # Only what is not visible yet is bound: never a folder inside the tree.
    bound = [binds[i + 1] for i, arg in enumerate(binds) if arg == "--ro-bind"]
    assert bound == [str(tmp_path / "opt" / "nvidia"), str(tmp_path / "opt" / "ext-13")]
    shown = {
        "link in the tree to a folder in it": "cuda-13.0",
        "real folder outside the tree": "nvidia",
        "link in the tree to a folder outside it": "ext-13",
        "link outside the tree to a folder in it": "cuda-13.0",
    }
    script = "; ".join(f"cat {paths[what]}/id; echo" for what in shown)
    script += f"; test -e {paths['dangling link']} || echo no-dangling"
    script += f"; test -e {paths['missing']} || echo no-missing"
    done = sandboxed(usr, binds, script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [*shown.values(), "no-dangling", "no-missing"]
    # Read-only like the rest of the system.
    denied = sandboxed(usr, binds, f"echo x > {paths['real folder outside the tree']}/id")
    assert denied.returncode != 0
