"""Python SDK for the autoresearch server's REST API."""

from client.api import Client
from client.errors import ApiError, SchemaError

__all__ = ["ApiError", "Client", "SchemaError"]
