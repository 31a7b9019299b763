"""How much an agent reads: every MCP tool's typical answer, as the text the SDK's client gets,
on a project of 50 experiments of the real baseline train.py (three agents changing its knobs,
judged by the noise-aware rule from a simulated worker's results, with realistic logs and
progress), at most ANSWER_LIMIT characters; `best` (without its train.py unless asked) at most
BEST_LIMIT. What every agent reads at the start, the list of tools and the research_loop prompt,
at most TOOLS_LIMIT and PROMPT_LIMIT (issue 51). The sizes are printed (pytest -s) for
docs/agents.md. Lists come in pages with a cursor, with the fields asked for; loss curves thinned
to a few points unless more are asked for."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import harness
from server.main import create_app
from server.mcp.answers import BRIEF_FIELDS, CURVE_POINTS, MCP_PAGE
from tests.mcp_session import call, connect_mcp
from tests.server.conftest import Live, init_with_small_baseline, make_settings, serve, sim_worker

ANSWER_LIMIT = 8_000
BEST_LIMIT = 2_000
TOOLS_LIMIT = 16_000  # tools/list: every tool's name, description, input schema and annotations
PROMPT_LIMIT = 4_000
EXPERIMENTS = 50
BASELINE = (Path(harness.__file__).parent / "baseline" / "train.py").read_text()
# Knob lines of the baseline an agent changes, and values to try (each a separate experiment).
KNOBS = {
    "MATRIX_LR = 0.04": [f"MATRIX_LR = {v}" for v in (0.03, 0.035, 0.045, 0.05, 0.06, 0.02)],
    "EMBEDDING_LR = 0.6": [f"EMBEDDING_LR = {v}" for v in (0.4, 0.5, 0.7, 0.8, 0.9)],
    "UNEMBEDDING_LR = 0.004": [f"UNEMBEDDING_LR = {v}" for v in (0.002, 0.003, 0.005, 0.006, 0.008)],
    "WARMDOWN_FRACTION = 0.5": [f"WARMDOWN_FRACTION = {v}" for v in (0.3, 0.4, 0.6, 0.7, 0.8)],
    "WEIGHT_DECAY = 0.0": [f"WEIGHT_DECAY = {v}" for v in (0.01, 0.02, 0.05, 0.1, 0.2)],
    "MUON_MOMENTUM = 0.95": [f"MUON_MOMENTUM = {v}" for v in (0.9, 0.92, 0.97, 0.98)],
    "LOGIT_SOFTCAP = 15.0": [f"LOGIT_SOFTCAP = {v}" for v in (10.0, 12.0, 20.0, 30.0)],
    "SCALAR_LR = 0.5": [f"SCALAR_LR = {v}" for v in (0.3, 0.4, 0.6, 0.7)],
    "WARMUP_FRACTION = 0.0": [f"WARMUP_FRACTION = {v}" for v in (0.01, 0.02, 0.05)],
    "MLP_RATIO = 4": [f"MLP_RATIO = {v}" for v in (2, 3, 5)],
    "ROPE_BASE = 10000.0": [f"ROPE_BASE = {v}" for v in (5000.0, 20000.0, 50000.0)],
    "FINAL_LR_FRACTION = 0.0": [f"FINAL_LR_FRACTION = {v}" for v in (0.05, 0.1, 0.2)],
}
# A run's log as a worker reports it: harness lines, then a training line a second for 300 s.
LOG = "\n".join(
    [f"[harness] sandbox: bubblewrap, device cuda, line {i} of the run's preamble" for i in range(12)]
    + [
        f"step {s:05d} | loss {3.5 - s / 1000:.6f} | lrm 1.00 | dt 812.3ms | tok/sec 645,123 | mfu 41.2"
        for s in range(300)
    ]
    + ["[harness] score phase: eval 161 batches, probe 47 batches; val_bpb 0.997871"]
)
PROGRESS = [
    {
        "step": s,
        "loss": 3.5 - s / 1000,
        "tokens_per_s": 645123.4,
        "fraction": s / 300,
        "phase": "train",
        "elapsed_s": s * 1.01,
    }
    for s in range(300)
]


def changes() -> list[tuple[str, str]]:
    """EXPERIMENTS (new line, train.py) pairs, each one knob of the baseline changed."""
    out = [(value, BASELINE.replace(line, value)) for line, values in KNOBS.items() for value in values]
    assert all(text != BASELINE for _, text in out) and len(out) >= EXPERIMENTS
    return out[:EXPERIMENTS]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("mcp-sizes")
    settings = make_settings(folder, decision_rule="noise_aware", noise_runs=3, best_rerun_every=0)
    init_with_small_baseline(settings, folder, BASELINE)
    app = create_app(settings)
    rng = np.random.default_rng(50)
    with serve(app) as url:
        live = Live(url, app, settings)
        worker = sim_worker(live)
        agents = [live.client("agent", name) for name in ("alice", "bob", "carol")]

        def drain() -> None:
            while (claim := worker.claim()) is not None:
                worker.client.send_progress(claim.lease_id, PROGRESS)
                worker.report(claim, float(1.0 + rng.normal(0, 0.003)), log_tail=LOG)

        drain()
        ids = []
        for index, (changed, text) in enumerate(changes()):
            agent = agents[index % len(agents)]
            ids.append(agent.submit(f"try {changed}", train_py=text).id)
            drain()
        for index, agent in enumerate(agents):
            agent.post_note(
                f"finding {index}: learning rates above the baseline's did not help", experiment_id=ids[index]
            )
        yield live, live.token("agent", "dave"), ids


async def text_of(client: Any, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return "".join(getattr(block, "text", "") for block in result.content)


def test_every_tools_typical_answer_is_short(project: Any) -> None:
    live, token, ids = project

    async def scenario() -> dict[str, int]:
        async with connect_mcp(live.url, token, "http") as client:
            calls: dict[str, tuple[str, dict[str, Any]]] = {
                "best": ("best", {}),
                "search": ("search", {}),
                "search (constant)": ("search", {"constant": "MATRIX_LR"}),
                "experiment": ("experiment", {"experiment_id": ids[-1]}),
                "wait": ("wait", {"experiment_ids": ids[-3:], "wait_s": 0}),
                "progress": ("progress", {"experiment_id": ids[-1]}),
                "leaderboard": ("leaderboard", {}),
                "noise": ("noise", {}),
                "notes": ("notes", {}),
                "near_misses": ("near_misses", {}),
                "keep_rates": ("keep_rates", {}),
                "similar": ("similar", {"experiment_id": ids[0]}),
                "submit": (
                    "submit",
                    {
                        "description": "lr between",
                        "edits": [{"old": "MATRIX_LR = 0.04", "new": "MATRIX_LR = 0.041"}],
                    },
                ),
                "cancel": ("cancel", {"experiment_id": ids[-1] + 1}),
                "post_note": ("post_note", {"text": "matrix lr 0.041 queued", "experiment_id": ids[-1]}),
            }
            sizes = {name: len(await text_of(client, tool, args)) for name, (tool, args) in calls.items()}
            listed = await client.list_tools()
            sizes["tools/list"] = len(listed.model_dump_json(by_alias=True, exclude_none=True))
            prompt = await client.get_prompt("research_loop", {})
            sizes["research_loop"] = len(prompt.messages[0].content.text)  # type: ignore[union-attr]
            sizes["best (train_py)"] = len(await text_of(client, "best", {"train_py": True}))
            return sizes

    sizes = asyncio.run(scenario())
    print("\n" + json.dumps(sizes, indent=1))
    limits = {"best": BEST_LIMIT, "tools/list": TOOLS_LIMIT, "research_loop": PROMPT_LIMIT}
    over = {
        name: size
        for name, size in sizes.items()
        if name != "best (train_py)" and size > limits.get(name, ANSWER_LIMIT)
    }
    assert not over, over
    assert sizes["best (train_py)"] > len(BASELINE)  # asked for, the whole train.py comes


def test_lists_page_with_a_cursor_and_answer_the_fields_asked_for(project: Any) -> None:
    live, token, ids = project

    async def scenario() -> dict[str, Any]:
        async with connect_mcp(live.url, token, "stdio") as client:
            pages, cursor = [], None
            while True:
                page = await call(client, "search", {"cursor": cursor} if cursor else {})
                pages.append(page["items"])
                if (cursor := page.get("next_cursor")) is None:
                    break
            picked = await call(client, "search", {"fields": ["id", "commit"], "limit": 3})
            curve = await call(client, "progress", {"experiment_id": ids[-1]})
            wide = await call(client, "progress", {"experiment_id": ids[-1], "points": 1000})
            unknown = await client.call_tool("search", {"fields": ["id", "nope"]})
            return {"pages": pages, "picked": picked, "curve": curve, "wide": wide, "unknown": unknown}

    out = asyncio.run(scenario())
    pages = out["pages"]
    assert [len(page) for page in pages[:-1]] == [MCP_PAGE] * (len(pages) - 1)
    seen = [item["id"] for page in pages for item in page]
    assert seen == sorted(set(seen), reverse=True) and set(ids) <= set(seen)  # newest first, each once
    assert set(pages[0][0]) == set(BRIEF_FIELDS)
    assert [set(item) for item in out["picked"]["items"]] == [{"id", "commit"}] * 3
    events = out["curve"]["experiment"]["events"]
    assert len(events) == CURVE_POINTS and len(out["wide"]["experiment"]["events"]) == len(PROGRESS)
    assert (events[0]["step"], events[-1]["step"]) == (PROGRESS[0]["step"], PROGRESS[-1]["step"])
    unknown = out["unknown"]
    text = "".join(getattr(block, "text", "") for block in unknown.content)
    assert unknown.is_error and text.startswith("bad-arguments: search: fields.1:") and "'nope'" in text
    assert out["curve"]["best"] is not None and len(out["curve"]["best"]["events"]) == CURVE_POINTS
