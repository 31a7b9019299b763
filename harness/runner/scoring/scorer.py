"""The trusted scorer: holds the validation targets and computes val_bpb from model logits.

Run by the runner as `python -m harness.runner.scoring.scorer CONFIG_JSON`, outside any sandbox. It
starts two model sandboxes at once (they import torch while training runs, then wait). On `go`
(a JSON line on stdin, sent when the weights are ready, with the run's training tokens and
seconds):

1. the *eval* process is shown every validation input row once, in a random order, then some of
   them again (harness.runner.scoring.score_plan); the scorer applies log-softmax and cross-entropy to
   each batch (harness.evaluate.token_nats) and sums the first showing of each row into val_bpb;
2. when the eval process is gone, the *probe* process is shown batches of variants of random
   rows, their text replaced from a random cut on by training text, as many as the preset's
   `probe_share` needs (harness.runner.scoring.score_plan). It is fresh: it never coexists with the eval
   process after `go` and shares nothing with it, so whatever the eval process learned or cached
   it does not know;
3. the repeats and the probe's prefixes must agree with the first showing to numerical noise
   (harness.runner.scoring.agreement), or the run is `non_causal`;
4. each model process must finish within its bound (harness.runner.scoring.score_budget), measured here
   from outside, or the run is `score_over_budget`.

The result is one JSON line on stdout.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.data.tokens import open_token_dir
from harness.evaluate import DOC_FLOOR_MIN_BYTES, EvalRows, bpb, documents_below, load_eval_rows, token_nats
from harness.runner import preload
from harness.runner.cuda_handover import check_run_shm, empty_run_shm, handover_for
from harness.runner.limits import CPU_SPARE_CORES, Limits
from harness.runner.phases import Phases
from harness.runner.scoring import agreement
from harness.runner.scoring.model_process import ModelFailure, ModelJob, ModelProcess
from harness.runner.scoring.score_budget import (
    BATCH_JITTER_S,
    BATCH_SPREAD,
    ProcessBudget,
    forward_seconds_per_token,
    measured_in_cpu_seconds,
    process_budget,
    startup_allowance,
    uneven_batch,
)
from harness.runner.scoring.score_plan import (
    HEAD_ROWS,
    Probe,
    batches_of,
    plan_eval,
    plan_probes,
    probe_batches,
)
from harness.runner.train_phase import WEIGHTS_FILE


class Transfer:
    """The scorer's own time to take one batch of logits onto its device: the least seen so far
    (a model process cannot make it smaller; a busy moment can only make one copy slower)."""

    def __init__(self) -> None:
        self.least: float | None = None

    def observe(self, seconds: float) -> None:
        self.least = seconds if self.least is None else min(self.least, seconds)


@dataclass
class Clock:
    """What one model process has used, measured here, against its bound: wall seconds of its
    measured steps, or, with `cpu`, the CPU seconds of its process tree since `go`
    (harness.runner.scoring.score_budget.measured_in_cpu_seconds)."""

    budget: ProcessBudget
    transfer: Transfer
    outer_deadline: float  # the whole score phase's limit (a stuck scorer), status timeout
    cpu: Callable[[], float] | None = None  # the model's tree's CPU seconds so far
    used: float = 0.0
    startup: float = 0.0  # of `used`: from `go` to `loaded`
    running_since: float | None = None  # when the measured step under way began
    cpu_at_go: float | None = None
    given: int = 0  # batches commanded so far: the bound grows with them (ProcessBudget.bound)
    first_answer: float | None = None  # of `used`: up to its first batch's answer
    answers: list[tuple[int, float]] = field(default_factory=list)  # (rows, wall seconds) per batch

    @property
    def unit(self) -> str:
        return "s" if self.cpu is None else "CPU s"

    def bound(self) -> float:
        return self.budget.bound(self.transfer.least, self.given)

    def window(self) -> tuple[float, ModelFailure]:
        """Begin a measured step: its deadline, and the failure it ends in when passed. In CPU
        seconds the deadline is the outer one, and `check`, called while waiting, enforces the bound."""
        self.running_since = time.monotonic()
        if self.cpu is not None and self.cpu_at_go is None:
            self.cpu_at_go = self.cpu()
        over = self.running_since + self.bound() - self.used
        if self.cpu is None and over < self.outer_deadline:
            return over, self.over_budget(f"was still running at {self.bound():.2f} s")
        label = self.budget.label
        return self.outer_deadline, ModelFailure(
            "timeout", "timeout", f"score phase ({label}) ran past its time limit"
        )

    def check(self) -> None:
        """While waiting on the model: raise when its CPU seconds pass the bound."""
        if self.cpu is not None:
            self.settle()
            if self.used > self.bound():
                raise self.over_budget(f"was still running at {self.bound():.2f} CPU s")

    def charge(self, seconds: float) -> None:
        """End the measured step, which took `seconds` of wall time."""
        self.settle(seconds)
        if self.used > self.bound():
            raise self.over_budget(f"ran {self.used:.2f} {self.unit}")

    def settle(self, seconds: float | None = None) -> None:
        """End the step under way (if any): `seconds`, or up to now for one cut short; in CPU seconds,
        what the tree used so far (never less than before: a tree that is gone reads 0)."""
        if self.cpu is not None and self.cpu_at_go is not None:
            self.used = max(self.used, self.cpu() - self.cpu_at_go)
        elif self.running_since is not None:
            self.used += time.monotonic() - self.running_since if seconds is None else seconds
        self.running_since = None

    def answered(self, rows: int, seconds: float) -> None:
        """A batch of `rows` answered `seconds` after its command; in wall seconds (a GPU), its batches
        must stay even (score_budget.uneven_batch)."""
        self.answers.append((rows, seconds))
        if self.cpu is None and (slow := uneven_batch(self.answers)) is not None:
            number, took, fastest = slow
            raise ModelFailure(
                "invalid",
                "score_over_budget",
                f"score phase ({self.budget.label}): batch {number} took {took:.3f} s, more than "
                f"{BATCH_SPREAD:g} x the fastest batch of its size ({fastest:.3f} s) + {BATCH_JITTER_S:g} "
                "s: on a GPU the run has to itself, that is work beside the forward pass (training "
                "while scored)",
            )

    def first_answer_note(self) -> str:
        """What it used up to its first answer, of what its bound allowed by then: training hidden
        before the first answer can use no more than the difference (docs/runner.md)."""
        if self.first_answer is None:
            return ""
        allowed = self.budget.bound(self.transfer.least, 1)
        return f", its first answer at {self.first_answer:.2f} of {allowed:.2f}"

    def over_budget(self, what: str) -> ModelFailure:
        return ModelFailure(
            "invalid",
            "score_over_budget",
            f"score phase ({self.budget.label}): the model {what}, past its bound of "
            f"{self.budget.explain(self.transfer.least, self.unit, self.given)}. The bound follows from this "
            "run's own training throughput (a forward pass costs about a third of a training step); the "
            "score phase may only rebuild the model, load its weights and run forward passes: no training, "
            "no torch.compile (compile in train())",
        )


@dataclass
class Scoring:
    """The validation rows and what the scorer has learned of the model so far."""

    rows: EvalRows
    batch_rows: int
    device: torch.device
    transfer: Transfer
    phases: Phases
    donor: np.ndarray  # the training tokens (a memory map): the text probe variants continue with
    probe_share: float  # the share of positions a lookahead must use to be caught (PROBE_POWER)
    head_rows: int  # rows of each process's first batch; 0: a full batch (score_plan.HEAD_ROWS)
    received: np.ndarray | None = None  # the scorer's copy of the latest batch of logits
    received_on_device: torch.Tensor | None = None  # the same, on the GPU (CUDA IPC)

    def plan_probes(self, rng: np.random.Generator) -> list[list[Probe]]:
        inputs = self.rows.inputs.numpy()
        rows, seq_len = inputs.shape
        batches = probe_batches(rows, seq_len, self.batch_rows, self.probe_share)
        return (
            plan_probes(inputs, self.batch_rows, batches, self.donor, rng, self.head_rows) if batches else []
        )

    def take(
        self, model: ModelProcess, clock: Clock, work: list[tuple[np.ndarray, torch.Tensor]]
    ) -> Iterator[np.ndarray]:
        """Run the batches `work` (tokens [n, T] and targets [n, T] each) in `model`, timed against
        `clock`; the nats of each batch's targets [n, T] (float64), in order.

        The next batch is commanded as soon as this one's logits are copied out, before the scorer
        computes their loss: the model's forward pass and the scorer's loss overlap, and a model
        runs unmeasured between batches only while its logits are copied.
        """
        clock.given += 1
        deadline, late = clock.window()
        model.submit(work[0][0])
        for index, (_, targets) in enumerate(work):
            with self.phases(f"{model.label} waiting for logits", model.pids):
                view, seconds = model.receive(deadline, late, clock.check)
            with self.phases(f"{model.label} logits copy"):
                started = time.monotonic()
                logits = self.private_copy(view)
                if len(targets) == self.batch_rows:  # the bound's transfer is a full batch's
                    self.transfer.observe(time.monotonic() - started)
            clock.charge(seconds)
            clock.answered(len(targets), seconds)
            if clock.first_answer is None:
                clock.first_answer = clock.used
            if index + 1 < len(work):
                clock.given += 1
                deadline, late = clock.window()
                model.submit(work[index + 1][0])
            with self.phases(f"{model.label} loss (model running)", model.pids):
                if not all_finite(logits):
                    message = f"score phase ({model.label}): logits contain NaN or infinity"
                    raise ModelFailure("invalid", "invalid_output", message)
                nats = token_nats(logits, targets).cpu().numpy()
            yield nats

    def private_copy(self, view: np.ndarray | torch.Tensor) -> torch.Tensor:
        """`view`'s logits on the scoring device, copied out of the shared buffer (which the model
        can still write to) into one buffer of the scorer's own, reused for every batch: from host
        memory, or on the GPU from the model's own buffer (CUDA IPC). The buffer holds a full
        batch from the start, and a smaller batch (a process's first, score_plan.HEAD_ROWS) uses its
        first rows: made again for each size, it was new memory each time, and on a CPU the page
        faults of a fresh buffer at the h100 shapes cost more than the copy (docs/benchmarks.md)."""
        rows, shape = len(view), (max(len(view), self.batch_rows), *view.shape[1:])
        if isinstance(view, torch.Tensor):
            if self.received_on_device is None or self.received_on_device.shape != shape:
                self.received_on_device = torch.empty(shape, dtype=view.dtype, device=view.device)
            self.received_on_device[:rows].copy_(view)
            torch.cuda.synchronize(self.device)  # the copy is done, and its time measured, here
            return self.received_on_device[:rows]
        if self.received is None or self.received.shape != shape:
            self.received = np.empty(shape, dtype=np.float32)
        np.copyto(self.received[:rows], view)
        return torch.from_numpy(self.received[:rows]).to(self.device)

    def evaluate(
        self,
        model: ModelProcess,
        clock: Clock,
        order: np.ndarray,
        keep: set[int],
        repeats: agreement.Group,
        shape: agreement.Group,
    ) -> Evaluated:
        """val_bpb from the first showing of every row, the nats of the first showing of the rows in
        `keep`, the rows first shown in a batch smaller than a full one (the head), each document's
        nats, and the repeats compared with their first showing (into `repeats`, or `shape` when one
        of the two was in the head)."""
        inputs = self.rows.inputs.numpy()
        counted = (self.rows.target_bytes > 0).numpy()
        documents = self.rows.target_docs.numpy()
        doc_nats = np.zeros(self.rows.documents)
        row_nats = np.zeros(self.rows.num_rows)
        first: dict[int, np.ndarray] = {}
        alone: set[int] = set()
        seen = np.zeros(self.rows.num_rows, dtype=bool)
        batches = batches_of(order, self.batch_rows, self.head_rows)
        work = [(inputs[batch], self.rows.targets[batch]) for batch in batches]
        for batch, nats in zip(batches, self.take(model, clock, work), strict=True):
            small = len(batch) < self.batch_rows
            for offset, row in enumerate(batch.tolist()):
                if seen[row]:
                    (shape if small != (row in alone) else repeats).add(first[row], nats[offset], row)
                    continue
                if small:
                    alone.add(row)
                seen[row] = True
                scored = nats[offset][counted[row]]
                row_nats[row] = scored.sum()
                np.add.at(doc_nats, documents[row][counted[row]], scored)
                if row in keep:
                    first[row] = nats[offset]
        # math.fsum: the exact sum, so the score does not depend on the order rows were shown in.
        total = bpb(math.fsum(row_nats.tolist()), int(self.rows.target_bytes.sum()))
        return Evaluated(total, first, alone, doc_nats)

    def document_bytes(self) -> np.ndarray:
        """Each document's scored bytes."""
        documents, sizes = self.rows.target_docs.numpy().ravel(), self.rows.target_bytes.numpy().ravel()
        return np.bincount(documents, weights=sizes, minlength=self.rows.documents)

    def probe(
        self,
        model: ModelProcess,
        clock: Clock,
        plan: list[list[Probe]],
        first: dict[int, np.ndarray],
        alone: set[int],
        groups: ProbeGroups,
    ) -> None:
        """Score the probe batches and compare them with the eval's first showing: the positions
        before each cut's last one (`prefix`), and that last one, whose next token differs (`cut`);
        into `shape` where one of the two was scored in a smaller batch than the other."""
        work = [
            (np.stack([probe.tokens for probe in batch]), self.rows.targets[[probe.row for probe in batch]])
            for batch in plan
        ]  # each variant is scored against its original row's targets
        for batch, nats in zip(plan, self.take(model, clock, work), strict=True):
            compare_probes(batch, nats, first, alone, len(batch) < self.batch_rows, groups)


@dataclass(frozen=True)
class Evaluated:
    """What the eval process's first showings give (Scoring.evaluate)."""

    val_bpb: float
    first: dict[int, np.ndarray]  # the nats of the rows that are shown again or probed
    alone: set[int]  # rows first shown in the small first batch
    doc_nats: np.ndarray  # each document's nats


@dataclass(frozen=True)
class ProbeGroups:
    prefix: agreement.Group
    cut: agreement.Group
    shape: agreement.Group


def compare_probes(
    batch: list[Probe],
    nats: np.ndarray,
    first: dict[int, np.ndarray],
    alone: set[int],
    small: bool,
    groups: ProbeGroups,
) -> None:
    """Add one probe batch's differences from the first showing of its rows: positions before
    each cut's last one to `prefix`, that last one to `cut` (a row shown whole has every position
    in `prefix`: nothing after its last one differs); both to `shape` where one of the two was
    scored in a small first batch and the other not (`alone`: the rows the eval first showed in
    its small first batch; `small`: this batch is one)."""
    for offset, probe in enumerate(batch):
        expected = first[probe.row]
        last = probe.cut - 1 if probe.cut < len(expected) else len(expected)
        same = (probe.row in alone) == small
        prefix, cut = (groups.prefix, groups.cut) if same else (groups.shape, groups.shape)
        prefix.add(expected[:last], nats[offset, :last], probe.row)
        if last < len(expected):
            cut.add(expected[last : last + 1], nats[offset, last : last + 1], probe.row, last)


def all_finite(logits: torch.Tensor) -> bool:
    """No NaN or infinity anywhere: the row maxima catch NaN (max propagates it) and +inf, the row
    minima -inf. Two reductions cost a few percent of torch.isfinite(logits).all()."""
    return bool(torch.isfinite(logits.amax(dim=-1)).all() and torch.isfinite(logits.amin(dim=-1)).all())


def start_model(model: ModelProcess, clock: Clock, phases: Phases, libraries: list[str]) -> None:
    """Wait for the model process to be ready and to have imported `libraries` (entries of the
    harness's own list that train.py used in training: harness.runner.preload; not timed), then
    time its start."""
    stuck = ModelFailure(
        "timeout", "timeout", f"score phase ({model.label}): the sandbox did not start in time"
    )
    with phases(f"{model.label} ready wait"):
        model.wait_for("ready", clock.outer_deadline, stuck)
        if libraries:
            model.send(cmd="preload", modules=libraries)
            model.wait_for("preloaded", clock.outer_deadline, stuck)
    deadline, late = clock.window()
    with phases(f"{model.label} start", model.pids):
        seconds = model.start(deadline, late, clock.check)
    clock.charge(seconds)
    clock.startup = clock.used


def weights_identity(path: Path) -> tuple[int, ...]:
    """What changes if the weights file is replaced or written to."""
    info = path.stat()
    return info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


def clocks_for(
    models: list[ModelProcess],
    order: np.ndarray,
    plan: list[list[Probe]],
    scoring: Scoring,
    go: dict[str, Any],
    settings: dict[str, Any],
) -> list[Clock]:
    """The eval process's clock and, when there is a probe plan, the probe process's."""
    rows, batch_rows = scoring.rows, scoring.batch_rows
    seq_len = int(rows.inputs.shape[1])
    in_cpu = measured_in_cpu_seconds(settings["device"])
    device, time_budget, train_tokens = settings["device"], settings["time_budget"], go["train_tokens"]
    training_seconds = go["training_cpu_seconds"] if in_cpu else go["training_seconds"]
    per_token = forward_seconds_per_token(
        device, time_budget, training_seconds, train_tokens, rows.num_rows * seq_len
    )
    startup = startup_allowance(device, time_budget, training_seconds, train_tokens)
    outer_deadline = time.monotonic() + settings["timeout"]
    eval_batches = len(batches_of(order, batch_rows, scoring.head_rows))
    batches = [("eval", eval_batches)] + ([("probe", len(plan))] if plan else [])
    return [
        Clock(
            process_budget(
                label,
                count,
                batch_rows * seq_len,
                batch_rows * seq_len * settings["vocab_size"] * 4,
                startup,
                per_token,
                first_share=scoring.head_rows / batch_rows if scoring.head_rows else 1.0,
            ),
            scoring.transfer,
            outer_deadline,
            cpu=model.launched.cpu_seconds if in_cpu else None,
        )
        for (label, count), model in zip(batches, models, strict=False)
    ]


def score(
    eval_model: ModelProcess,
    probe_model: ModelProcess,
    scoring: Scoring,
    weights: Path,
    go: dict[str, Any],
    settings: dict[str, Any],
) -> dict[str, Any]:
    """Evaluate, then probe in the other process; `go` carries the run's training throughput."""
    rows, phases = scoring.rows, scoring.phases
    rng = np.random.default_rng(secrets.randbits(64))
    order = plan_eval(rows.num_rows, scoring.batch_rows, rng, scoring.head_rows)
    plan = scoring.plan_probes(rng)
    clocks = clocks_for([eval_model, probe_model], order, plan, scoring, go, settings)
    groups = [agreement.Group("repeat"), agreement.Group("probe"), agreement.Group("cut")]
    shape = agreement.Group("shape")
    tolerance = agreement.tolerance_for(str(scoring.device))
    result: dict[str, Any] = {"status": "ok"}
    notes = ""
    try:
        identity = weights_identity(weights)
        libraries = preload.chosen(preload.valid_names(go.get("libraries")))
        start_model(eval_model, clocks[0], phases, libraries)
        repeated = np.flatnonzero(np.bincount(order, minlength=rows.num_rows) > 1)
        keep = {int(row) for row in repeated} | {probe.row for batch in plan for probe in batch}
        with phases("eval batches"):
            evaluated = scoring.evaluate(eval_model, clocks[0], order, keep, groups[0], shape)
        with phases("eval close"):
            eval_model.close()
            if settings["shared_shm"] and (left := empty_run_shm()):  # the probe must find nothing
                why = f"score phase (eval): it left {left[:3]} in /dev/shm, which could not be removed"
                raise ModelFailure("invalid", "invalid_output", why)
        # A repeat that disagrees in batches of the same size ends it now; one that disagrees only
        # across sizes goes on to the probe, whose same-size comparisons may still show more.
        if agreement.judge(groups[:1], tolerance) is None and plan:
            if weights_identity(weights) != identity:
                raise ModelFailure("invalid", "invalid_output", "the weights file changed while scoring")
            start_model(probe_model, clocks[1], phases, libraries)
            with phases("probe batches"):
                scoring.probe(
                    probe_model,
                    clocks[1],
                    plan,
                    evaluated.first,
                    evaluated.alone,
                    ProbeGroups(groups[1], groups[2], shape),
                )
        doc_bytes, floor = scoring.document_bytes(), settings["doc_bpb_floor"]
        notes = documents_note(evaluated.doc_nats, doc_bytes, floor)
        found = agreement.verdict(groups, shape, tolerance) or known_text(
            documents_below(evaluated.doc_nats, doc_bytes, floor), floor
        )
        if found is not None:
            result = {"status": "invalid", "error_class": found[0], "error_message": found[1]}
        else:
            result["val_bpb"] = evaluated.val_bpb
    except ModelFailure as failure:
        for clock in clocks:
            clock.settle()
        result = {"status": failure.status, "error_class": failure.error_class, "error_message": str(failure)}
    result["score_seconds"] = sum(clock.used for clock in clocks)
    result["score_bound_seconds"] = sum(clock.budget.bound(clock.transfer.least) for clock in clocks)
    result["log"] = timing_note(clocks, go) + agreement.summary([*groups, shape], tolerance) + "\n" + notes
    return result


def known_text(below: list[tuple[int, float, int]], floor: float) -> tuple[str, str] | None:
    """The integrity class and message when documents scored below the preset's floor."""
    if not below:
        return None
    document, rate, size = below[0]
    return (
        "known_text",
        f"{len(below)} validation document(s) scored below {floor:g} bits per byte, which no model "
        f"trained within the budget reaches: the lowest, document {document}, {rate:.4f} over {size} "
        "bytes. The model knew the text it was scored on (validation text carried in train.py or its "
        "weights)",
    )


def documents_note(doc_nats: np.ndarray, doc_bytes: np.ndarray, floor: float) -> str:
    """A log line: how many documents were judged against the floor, and the lowest one's rate."""
    judged = doc_bytes >= DOC_FLOOR_MIN_BYTES
    if not judged.any():
        return f"[harness] documents: none with {DOC_FLOOR_MIN_BYTES} bytes scored, none judged\n"
    rates = doc_nats[judged] / (math.log(2) * doc_bytes[judged])
    return (
        f"[harness] documents: {int(judged.sum())} of {len(doc_bytes)} judged (>= {DOC_FLOOR_MIN_BYTES} "
        f"bytes scored), lowest {rates.min():.4f} bits per byte, floor {floor:g}\n"
    )


def timing_note(clocks: list[Clock], go: dict[str, Any]) -> str:
    tokens, seconds, cpu = go["train_tokens"], go["training_seconds"], go["training_cpu_seconds"]
    rate = f"{tokens / seconds:.0f} tokens/s" if tokens and seconds > 0 else "no tokens served"
    if clocks and clocks[0].cpu is not None:
        rate += f", {cpu:.2f} CPU s"
    parts = [
        f"{clock.budget.label} ran {clock.used:.2f} {clock.unit} (start {clock.startup:.2f}, batches "
        f"{clock.used - clock.startup:.2f}) of {clock.budget.explain(clock.transfer.least, clock.unit)}"
        + clock.first_answer_note()
        for clock in clocks
    ]
    return f"[harness] score phase (training {rate}): " + "; ".join(parts) + "\n[harness] "


def run(config: dict[str, Any]) -> dict[str, Any]:
    phases = Phases()
    with phases("setup (while training)"):
        rows, donor, models = setup(config)
    try:
        line = sys.stdin.readline()
        if not line.strip():
            return {"status": "aborted"}
        device = torch.device(config["device"])
        if device.type == "cpu":  # the core the model process leaves spare; the scorer's loss
            torch.set_num_threads(CPU_SPARE_CORES)  # runs while the model computes the next batch
        share = config["probe_share"]
        # A first batch of HEAD_ROWS on a CPU only: on CUDA kernels are picked by shape, so a row's
        # logits alone and in a batch would often differ (harness.runner.scoring.agreement, batch_variant).
        head = HEAD_ROWS if device.type == "cpu" else 0
        scoring = Scoring(rows, config["batch_rows"], device, Transfer(), phases, donor, share, head)
        weights = Path(config["weights_dir"]) / WEIGHTS_FILE
        result = score(models[0], models[1], scoring, weights, json.loads(line), config)
    finally:
        with phases("teardown"):
            for model in models:
                model.close()
    with phases("logs"):
        result["log"] = result.get("log", "") + "".join(
            f"[harness] score phase ({model.label}) output:\n{log}"
            for model in models
            if (log := model.log())
        )
    result["phases"] = phases.as_json()
    return result


def setup(config: dict[str, Any]) -> tuple[EvalRows, np.ndarray, list[ModelProcess]]:
    """The validation rows, the training tokens probe variants continue with (a memory map), and
    the eval and probe sandboxes started (they import torch and wait)."""
    if config["shared_shm"]:
        check_run_shm()  # before anything is started: it is about to be the models' /dev/shm
    rows = load_eval_rows(Path(config["val_dir"]))
    donor = open_token_dir(Path(config["donor_dir"])).tokens
    batch_rows = config["batch_rows"]
    job = ModelJob(
        candidate=Path(config["candidate"]),
        weights_dir=Path(config["weights_dir"]),
        device=config["device"],
        vocab_size=config["vocab_size"],
        seq_len=int(rows.inputs.shape[1]),
        time_budget=config["time_budget"],
        seed=config["seed"],
        bos_id=config["bos_id"],
        max_rows=batch_rows,
        sandboxed=config["sandboxed"],
        limits=Limits(**config["limits"]),
        handover=handover_for(config["device"]),
        shared_shm=config["shared_shm"],
    )
    return rows, donor, [ModelProcess(job, "eval"), ModelProcess(job, "probe")]


def main() -> None:
    result = run(json.loads(sys.argv[1]))
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    # Its model sandboxes are gone and the result is out: skip the interpreter's teardown (with
    # torch loaded, a few tenths of a second the runner would wait for).
    os._exit(0)


if __name__ == "__main__":
    main()
