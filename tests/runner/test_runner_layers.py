"""The runner's sides of the trust boundary, read from the code's own imports (issue 54): the code
that runs in a sandbox beside train.py (harness/runner/sandboxed) imports none of the trusted
orchestration or the scorer, and the scorer (harness/runner/scoring) none of the sandboxed
entries; both may use the modules shared by the two sides."""

from __future__ import annotations

import ast
from pathlib import Path

RUNNER = Path(__file__).resolve().parents[2] / "harness" / "runner"
SHARED = {
    "harness.runner.messages",
    "harness.runner.limits",
    "harness.runner.preload",
    "harness.runner.conditions",
    "harness.runner.cuda_handover",
    "harness.runner.compile_cache",
    "harness.runner.timing",
    "harness.runner.sandbox",  # the handover's check of bubblewrap
}


def runner_imports(path: Path) -> set[str]:
    """The harness.runner modules `path` imports (`from harness.runner import x` as the module x)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness.runner"):
            if node.module == "harness.runner":
                found.update(f"harness.runner.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("harness.runner"))
    return found


def test_sandboxed_code_imports_only_what_both_sides_share() -> None:
    modules = sorted((RUNNER / "sandboxed").glob("*.py"))
    assert len(modules) >= 5
    beyond = {
        path.name: sorted(
            name for name in runner_imports(path) if name not in SHARED and ".sandboxed" not in name
        )
        for path in modules
    }
    assert {name: found for name, found in beyond.items() if found} == {}


def test_the_scorer_imports_no_sandboxed_entry() -> None:
    modules = sorted((RUNNER / "scoring").glob("*.py"))
    assert len(modules) >= 5
    entries = {path.name: sorted(n for n in runner_imports(path) if ".sandboxed" in n) for path in modules}
    assert {name: found for name, found in entries.items() if found} == {}


def test_the_orchestration_starts_entries_by_name_and_imports_none() -> None:
    """The runner and the train phase name the entries only as the modules their processes run."""
    modules = sorted(RUNNER.glob("*.py"))
    entries = {path.name: sorted(n for n in runner_imports(path) if ".sandboxed" in n) for path in modules}
    assert {name: found for name, found in entries.items() if found} == {}
    assert "harness.runner.sandboxed.train_entry" in (RUNNER / "train_phase.py").read_text()
