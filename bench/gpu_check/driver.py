"""The GPU check's driver: set up the kit, run each step under its own time limit, merge the JSON.

Run through `bench/gpu_check.sh` (which also keeps the log). Standard library only until the
kit's wheels are installed. The steps (issue 15), each a process of its own:

  0_environment         what the machine is: Python, torch, CUDA, the GPU, which packages came
                        from the kit, whether the kit's data gives the kit's harness id here,
                        whether bubblewrap can make a sandbox
  1_sandboxed_baseline  the baseline train.py through run_experiment on CUDA in the sandbox
  4_loader_wait         the loader's wait per training step, measured in that same run
  3_logits_handover     the logits hand-over to the scorer: host shared memory and CUDA IPC
  2_server_and_worker   the baseline through a real server and GPU worker (SQLite, 127.0.0.1)

Step 2 runs last because it is the longest and needs the most moving parts: a failure or a slow
compile there cannot cost the figures of the others. Time: the device lends 15 minutes in all and
a machine takes minutes to start, so the whole check stays under TOTAL_S; a step gets at most its
cap and never more than what is left, and one that cannot get its minimum is skipped, saying so.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.gpu_check.environment import TOOLS, install_wheels, link_site, provide
from bench.gpu_check.layout import MANIFEST, REPO, kit_env, pin_corpus_mtimes

# The whole check, setup included, in seconds: under the 8 minutes the issue allows one call,
# with room for the machine's start inside the 10-minute command limit of the device tool.
TOTAL_S = {"gpu": 450.0, "cpu": 900.0}
# Seconds a stopped step gets to end its children before it is killed.
STOP_GRACE_S = 15.0
# Lines of a step's output kept in the report when it ends without reporting a section.
TAIL_LINES = 30
# The --cpu dry run: a few seconds of training and small score batches (the logits of one row
# of the gpu-check shape are 64 MiB, and on a CPU the new memory of each model process's buffer
# costs more than its forward), so that it passes in a few minutes on 2 cores. Two rows still make
# a process's one-row first batch differ from the rest. On a CPU the score phase is measured in
# the model's CPU seconds (harness/runner/scoring/score_budget.py), so a loaded machine does not push an
# honest run over its bound, and a short budget is enough. Its probe is sized for a lookahead on
# 60 % of positions (two batches of 2 variants): it checks the path, not the probe's power, which
# the GPU run has at the preset's share.
CPU_ENV = {"TIME_BUDGET": "5", "EVAL_BATCH_ROWS": "2", "PROBE_SHARE": "0.6"}


@dataclass(frozen=True)
class Step:
    module: str  # bench.gpu_check.<module>
    sections: tuple[str, ...]
    cap_s: float  # at most this long on the GPU machine
    min_s: float  # not started with less time left


STEPS = (
    Step("probe", ("0_environment",), cap_s=90, min_s=30),
    # compile (up to the 120 s allowance) + 60 s of training + scoring + process starts
    Step("baseline", ("1_sandboxed_baseline", "4_loader_wait"), cap_s=240, min_s=150),
    Step("handover", ("3_logits_handover",), cap_s=80, min_s=30),
    # the baseline three times (10 s each; the first compiles, the others reuse it), the pickup of a fourth
    Step("through_server", ("2_server_and_worker",), cap_s=300, min_s=100),
)


class Report:
    """The check's JSON file in $OUT, rewritten after every step."""

    def __init__(self, path: Path, mode: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "check": "gpu-check (issue 15)",
            "mode": mode,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "kit": json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else None,
            "setup": {},
            "steps": {},
            "runs": {},
        }
        self.write()

    def write(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str) + "\n")
        os.replace(tmp, self.path)


def stream(pipe: Any, prefix: str, tail: deque[str]) -> None:
    """Echo a step's output into the log, keeping its last lines for the report."""
    for line in pipe:
        print(f"[{prefix}] {line}", end="", flush=True)
        tail.append(line)


def run_step(step: Step, mode: str, env: dict[str, str], work: Path, limit: float) -> dict[str, Any]:
    """Run one step's process under `limit` seconds; its sections (partial ones too) and run facts."""
    result = work / f"{step.module}.json"
    command = [
        sys.executable,
        "-m",
        f"bench.gpu_check.{step.module}",
        "--mode",
        mode,
        "--result",
        str(result),
    ]
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a stop reaches the server and worker too
    )
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    reader = threading.Thread(target=stream, args=(process.stdout, step.module, tail), daemon=True)
    reader.start()
    timed_out = False
    try:
        process.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    reader.join(timeout=5)  # a sandbox of another session may still hold the pipe
    run = {
        "exit_code": process.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "limit_s": round(limit, 1),
        "timed_out": timed_out,
    }
    sections = json.loads(result.read_text()) if result.is_file() else {}
    for name in step.sections:
        section = sections.setdefault(name, {})
        if "status" not in section:
            section["status"] = "timed_out" if timed_out else "failed"
            ended = f"the step's process ended with exit code {process.returncode}; its last output:\n"
            section.setdefault("error", ended + "".join(tail))
    return {"sections": sections, "run": run}


def attempt(part: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One part of the setup; its failure is recorded and the steps run all the same (each then
    reports what the missing part broke)."""
    try:
        return part()
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def setup(mode: str, work: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """Install the kit's wheels, provide bwrap, pin the corpus times; the facts and the steps' env."""
    facts: dict[str, Any] = {"python": sys.executable, "work": str(work)}
    site = work / "site"
    facts["wheels"] = attempt(lambda: install_wheels(site, dry_run=mode == "cpu"))
    if mode == "gpu":
        facts["site"] = attempt(lambda: link_site(site))
    for tool in TOOLS:
        facts[tool.name] = attempt(functools.partial(provide, tool, work, force_kit=mode == "cpu"))
    facts["corpus_files_pinned"] = attempt(lambda: {"files": pin_corpus_mtimes()})
    env = {**os.environ, **kit_env(), "PYTHONUNBUFFERED": "1"}
    if any("bin_dir" in facts[tool.name] for tool in TOOLS):
        env["PATH"] = f"{work / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    if mode == "gpu":
        env["GPU_CHECK_SITE"] = str(site)
    else:
        env.update(CPU_ENV)
    facts["env"] = {key: env[key] for key in sorted({*kit_env(), *CPU_ENV}) if key in env}
    return facts, env


def summary_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for name, section in sorted(report["steps"].items()):
        figures = {k: v for k, v in section.items() if k in section.get("headline", ())}
        lines.append(f"{name}: {section.get('status')} {json.dumps(figures)}")
        if section.get("status") != "ok" and section.get("error"):
            lines.append(f"  error: {str(section['error']).strip().splitlines()[-1][:300]}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("gpu", "cpu"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    started = time.monotonic()
    deadline = started + TOTAL_S[args.mode]
    args.out.mkdir(parents=True, exist_ok=True)
    report = Report(args.out / "gpu_check.json", args.mode)
    if report.data["kit"] is None:
        print(f"no kit at {MANIFEST.parent}: run `make gpu-kit` here and carry it", flush=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    try:
        run_all(args.mode, report, work, deadline)
    finally:
        if args.mode == "cpu":  # on the GPU machine the .pth names it; the machine goes back anyway
            shutil.rmtree(work, ignore_errors=True)
    report.data["seconds"] = round(time.monotonic() - started, 1)
    report.data["summary"] = summary_lines(report.data)
    report.write()
    print(f"== summary ({report.data['seconds']:.0f} s; {report.path})", flush=True)
    for line in report.data["summary"]:
        print(line, flush=True)
    failed = [name for name, section in report.data["steps"].items() if section.get("status") != "ok"]
    sys.exit(1 if failed else 0)


def run_all(mode: str, report: Report, work: Path, deadline: float) -> None:
    """The setup, then every step that the time left allows."""
    started = time.monotonic()
    facts, env = setup(mode, work)
    report.data["setup"] = {**facts, "seconds": round(time.monotonic() - started, 1)}
    report.write()
    print(f"setup: {json.dumps(report.data['setup'], default=str)}", flush=True)
    for step in STEPS:
        left = deadline - time.monotonic()
        limit = min(step.cap_s, left) if mode == "gpu" else left
        if limit < step.min_s:
            reason = f"{left:.0f} s left of the check's {TOTAL_S[mode]:.0f} s; it needs {step.min_s:.0f}"
            for name in step.sections:
                report.data["steps"][name] = {"status": "skipped", "error": reason}
            report.write()
            continue
        print(f"== {step.module}: {', '.join(step.sections)} (at most {limit:.0f} s)", flush=True)
        outcome = run_step(step, mode, env, work, limit)
        report.data["steps"].update(outcome["sections"])
        report.data["runs"][step.module] = outcome["run"]
        report.write()


if __name__ == "__main__":
    main()
