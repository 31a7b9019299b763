"""The SDK's errors: an HTTP error answer with its problem+json body, an answer that is not the
documented model, and arguments that do not go together (refused before anything is sent)."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """The server answered with an error status. `problem` is its problem+json body."""

    def __init__(self, status: int, problem: dict[str, Any], method: str = "", url: str = "") -> None:
        self.status = status
        self.problem = problem
        self.method = method
        self.url = url
        super().__init__(str(self))

    @property
    def type(self) -> str:
        return str(self.problem.get("type", ""))

    @property
    def title(self) -> str:
        return str(self.problem.get("title", ""))

    @property
    def detail(self) -> str:
        return str(self.problem.get("detail", ""))

    def __str__(self) -> str:
        head = f"{self.status} {self.title}".strip()
        return f"{head}: {self.detail}" if self.detail else head


class SchemaError(Exception):
    """The server answered with success, but not with the model docs/api.md documents for it (a
    server of another version, or a proxy's page). `endpoint` is the method and URL asked."""

    def __init__(self, endpoint: str, model: str, detail: str) -> None:
        self.endpoint = endpoint
        self.model = model
        self.detail = detail
        super().__init__(f"{endpoint}: the answer is not a valid {model}: {detail}")


class ArgumentsError(ValueError):
    """Arguments of an SDK call that do not go together; nothing was sent."""
