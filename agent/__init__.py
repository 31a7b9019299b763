"""Built-in agents that research through the API without an LLM (controls for LLM agents)."""
