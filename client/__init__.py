"""Python SDK for the autoresearch server's REST API."""
