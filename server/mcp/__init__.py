"""The MCP server: its tools, their arguments, waits and answers, and its HTTP mount."""
