"""What an agent that knows the server only through MCP reads: the rules (program.md), the best
train.py, any experiment's train.py and diff, results.tsv as resources, and a prompt that starts a
research loop, pointing to the rules and stating the project's best; over both transports (stdio
and HTTP), each answering what the REST API answers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from client import Client
from server.main import create_app
from server.mcp.answers import rounded
from tests.mcp_session import TRANSPORTS, connect_mcp
from tests.server.conftest import Live, init_with_small_baseline, make_settings, serve, sim_worker
from tests.server.history_play import SOURCE


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A live server with a baseline measured twice and one submitted change (nothing runs it)."""
    folder = tmp_path_factory.mktemp("mcp-resources")
    settings = make_settings(folder, decision_rule="noise_aware", noise_runs=2)
    init_with_small_baseline(settings, folder, SOURCE)
    app = create_app(settings)
    with serve(app) as url:
        live = Live(url, app, settings)
        worker = sim_worker(live)
        worker.run_next(2.4468893301485077)  # as agents read it in the prompt before (issue 51)
        worker.run_next(2.4471234567890123)
        token = live.token("agent", "reader")
        with Client(url, token) as agent:
            changed = agent.submit("lr up", train_py=SOURCE.replace("0.01", "0.02", 1))
        yield live, token, changed.id, (folder / "baseline" / "program.md").read_text()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_resources_and_the_prompt_answer_what_the_api_answers(project: Any, transport: str) -> None:
    live, token, changed, program_md = project  # the project's own program.md, as init stored it

    async def scenario() -> dict[str, Any]:
        async with connect_mcp(live.url, token, transport) as client:
            out: dict[str, Any] = {
                "listed": {r.uri: r.mime_type for r in (await client.list_resources()).resources},
                "templates": {
                    t.uri_template for t in (await client.list_resource_templates()).resource_templates
                },
                "prompts": [p.name for p in (await client.list_prompts()).prompts],
            }
            for uri in (
                "autoresearch://rules",
                "autoresearch://best/train.py",
                "autoresearch://results.tsv",
                f"autoresearch://experiments/{changed}/train.py",
                f"autoresearch://experiments/{changed}/diff",
            ):
                (content,) = (await client.read_resource(uri)).contents
                out[uri] = (content.text, content.mime_type)
            for uri in ("autoresearch://experiments/999999/train.py", "autoresearch://experiments/x/diff"):
                try:
                    await client.read_resource(uri)
                    out[uri] = None
                except MCPError as error:
                    out[uri] = str(error)
            prompt = await client.get_prompt("research_loop", {})
            out["prompt"] = " ".join(prompt.messages[0].content.text.split())
            return out

    out = asyncio.run(scenario())
    assert out["listed"] == {
        "autoresearch://rules": "text/markdown",
        "autoresearch://best/train.py": "text/x-python",
        "autoresearch://results.tsv": "text/tab-separated-values",
    }
    assert out["templates"] == {
        "autoresearch://experiments/{experiment_id}/train.py",
        "autoresearch://experiments/{experiment_id}/diff",
        "autoresearch://tracks/{track}/rules",
        "autoresearch://tracks/{track}/best/train.py",
    }
    with Client(live.url, token) as reader:
        best = reader.best()
        assert out["autoresearch://rules"] == (program_md, "text/markdown")
        assert out["autoresearch://best/train.py"] == (best.train_py, "text/x-python")
        assert out["autoresearch://results.tsv"][0] == reader.results_tsv()
        assert out[f"autoresearch://experiments/{changed}/train.py"][0] == SOURCE.replace("0.01", "0.02", 1)
        assert out[f"autoresearch://experiments/{changed}/diff"][0] == reader.diff(changed)
    assert "unknown-experiment (404)" in out["autoresearch://experiments/999999/train.py"]
    assert "bad-experiment-id" in out["autoresearch://experiments/x/diff"]
    assert out["prompts"] == ["research_loop"]
    # The prompt points to the rules; the best in words, rounded as every answer's numbers are.
    assert "the resource autoresearch://rules" in out["prompt"] and program_md not in out["prompt"]
    assert best.val_bpb is not None and best.se is not None
    said = f"val_bpb {rounded(best.val_bpb)} ± {rounded(best.se)} ({best.runs} runs, experiment 1)"
    assert said in out["prompt"] and len(str(rounded(best.val_bpb))) <= len("2.4469"), out["prompt"]
