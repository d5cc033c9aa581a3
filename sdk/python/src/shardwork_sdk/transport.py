"""HTTP to the API: base URL, bearer token, problem+json errors, and retries of the calls that
are safe to repeat."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import httpx

from .errors import ApiError, TransportError

log = logging.getLogger("shardwork_sdk")

#: How long an idempotent call keeps retrying while the API is unreachable or not ready; the
#: same window as the Rust client's, long enough to ride out a server restart.
RETRY_WINDOW_S = 90.0

TokenSource = Callable[[bool], str]
"""Returns an access token; called with True when the last one was refused (sign in again)."""


class Transport:
    """One API, over one connection pool. ``token`` supplies bearer tokens for authenticated
    calls (None: only unauthenticated calls work)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 300.0,
        retry_window: float = RETRY_WINDOW_S,
        http: httpx.Client | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry_window = retry_window
        self.http = http or httpx.Client(timeout=timeout)
        self.token: TokenSource | None = None

    def close(self) -> None:
        self.http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        content: bytes | Callable[[], Iterable[bytes]] | None = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        retry: bool = True,
        stream: bool = False,
    ) -> httpx.Response:
        """Sends one call and returns its successful response, or raises :class:`ApiError` /
        :class:`TransportError`.

        ``retry``: while the API cannot be reached or answers 408/502/503, try again with
        backoff for up to ``retry_window`` seconds. Pass False for calls that must not run
        twice. ``content`` may be a function returning a fresh body iterator, so a streamed
        upload can be sent again. ``stream``: the body is left unread (the caller closes it).
        """
        started = time.monotonic()
        backoff = 0.25
        while True:
            try:
                return self._authorized(method, path, json, params, content, headers, auth, stream)
            except (ApiError, TransportError) as e:
                transient = isinstance(e, TransportError) or e.transient
                if not (retry and transient) or time.monotonic() - started > self.retry_window:
                    raise
                log.warning("API unavailable (%s); retrying in %.2fs", e, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, 4.0)

    def _authorized(self, method, path, json, params, content, headers, auth, stream):
        if not auth:
            return self._send(method, path, json, params, content, headers, None, stream)
        if self.token is None:
            raise RuntimeError("this call needs a signed-in client")
        try:
            return self._send(method, path, json, params, content, headers, self.token(False), stream)
        except ApiError as e:
            # An expired access token: sign in again once, then repeat the call.
            if e.status != 401:
                raise
            return self._send(method, path, json, params, content, headers, self.token(True), stream)

    def _send(self, method, path, json, params, content, headers, token, stream) -> httpx.Response:
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["authorization"] = f"Bearer {token}"
        body = content() if callable(content) else content
        request = self.http.build_request(
            method, self.base_url + path, json=json, params=params, content=body, headers=all_headers
        )
        try:
            response = self.http.send(request, stream=stream)
        except httpx.TransportError as e:
            raise TransportError(f"{method} {path}: {type(e).__name__}: {e}") from e
        if response.status_code >= 400:
            try:
                data = response.read()
            except httpx.TransportError:
                data = b""
            response.close()
            raise ApiError(method, path, response.status_code, data)
        return response
