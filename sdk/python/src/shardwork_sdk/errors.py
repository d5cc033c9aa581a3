"""The SDK's exceptions. Every API refusal is an :class:`ApiError` carrying the RFC 7807
problem+json fields the server sent, so callers branch on ``kind`` and show ``errors``."""

from __future__ import annotations

import json
from typing import Any

from .models import FieldError, Problem

PROBLEM_PREFIX = "urn:shardwork:problem:"


class ShardworkError(Exception):
    """Base class of everything this SDK raises on purpose."""


class ApiError(ShardworkError):
    """The API answered with an error status.

    ``type``, ``title``, ``status``, ``detail`` and ``errors`` are the problem+json fields;
    ``errors`` lists each field at fault with its path in the request (``spec.lora.r``,
    ``dataset[3]``). A body that is not problem+json (a proxy's 502, say) leaves ``problem``
    None and puts the start of the body in ``detail``.
    """

    def __init__(self, method: str, path: str, status: int, body: bytes) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.problem: Problem | None = None
        try:
            self.problem = Problem.model_validate(json.loads(body))
        except (ValueError, TypeError):
            pass
        if self.problem is not None:
            self.type = self.problem.type
            self.title = self.problem.title
            self.detail = self.problem.detail
            self.errors: list[FieldError] = list(self.problem.errors or [])
        else:
            self.type = ""
            self.title = ""
            self.detail = body[:300].decode("utf-8", "replace")
            self.errors = []
        super().__init__(str(self))

    @property
    def kind(self) -> str | None:
        """The problem's kind without its URN prefix: ``validation``, ``not-found``, ..."""
        if self.type.startswith(PROBLEM_PREFIX):
            return self.type[len(PROBLEM_PREFIX) :]
        return None

    @property
    def transient(self) -> bool:
        """The API was not ready (502/503) or never read the whole request (408): sending the
        same request again is safe and may succeed."""
        return self.status in (408, 502, 503) or self.kind == "unavailable"

    def field(self, path: str) -> str | None:
        """The message for the field at ``path`` (``spec.lora.r``), if that field is at fault."""
        for error in self.errors:
            if error.path == path:
                return error.message
        return None

    def __str__(self) -> str:
        head = f"{self.method} {self.path}: {self.status}"
        if self.kind:
            head += f" {self.kind}"
        text = f"{head}: {self.detail}" if self.detail else head
        for error in self.errors:
            text += f"\n  {error.path or '(document)'}: {error.message}"
        return text


class TransportError(ShardworkError):
    """The API could not be reached, or the connection broke (after any retries)."""


class JobNotCompleted(ShardworkError):
    """A followed job ended (cancelled, refunded) or timed out without completing."""

    def __init__(self, job_id: Any, status: str, message: str) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(message)


class ChainError(ShardworkError):
    """Funding on chain failed: the node refused the call, or the transaction reverted."""


class MissingDependency(ShardworkError, ImportError):
    """An optional dependency (torch, transformers, peft) is not installed."""
