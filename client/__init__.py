"""Python SDK for the autoresearch server's REST API."""

from client.api import Client
from client.errors import ApiError, ArgumentsError, SchemaError

__all__ = ["ApiError", "ArgumentsError", "Client", "SchemaError"]
