"""A job's events as typed objects, and following a job to its end with a progress bar."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from tqdm import tqdm

from .errors import JobNotCompleted
from .jobs import JobRef, get_job, job_id
from .models import EventPage, JobProgress, JobStatus, JobView
from .transport import Transport

TERMINAL = {JobStatus.completed, JobStatus.cancelled, JobStatus.refunded}


@dataclass(frozen=True)
class Event:
    """One event of a job's feed. ``payload`` is the generated model of its ``kind``
    (``round_opened`` → :class:`models.RoundOpened`, ``verdict`` → its verdict model, ...)."""

    id: int
    created_at: datetime
    kind: str
    payload: BaseModel

    def describe(self) -> str:
        """One line for a person: the kind and the payload's short fields."""
        fields = []
        for name, value in self.payload:
            if isinstance(value, (str, int, float, bool)) and not (isinstance(value, str) and len(value) > 72):
                fields.append(f"{name}={value}")
        return f"{self.kind}: {', '.join(fields)}" if fields else self.kind


def events(transport: Transport, job: JobRef, after: int = 0, limit: int = 500) -> list[Event]:
    """The job's events after event id ``after``, oldest first (every page)."""
    found: list[Event] = []
    cursor: int | None = after
    while cursor is not None:
        response = transport.request(
            "GET", f"/v1/jobs/{job_id(job)}/events", params={"after": cursor, "limit": limit}
        )
        # The generated page validates every event against its kind's payload schema.
        page = EventPage.model_validate(response.json())
        found.extend(Event(e.id, e.created_at, e.kind, e.payload) for e in page.events)
        cursor = page.next_after
    return found


def progress(transport: Transport, job: JobRef) -> JobProgress:
    """Each task's loss curve and the held-out metric of every merged round."""
    return JobProgress.model_validate(transport.request("GET", f"/v1/jobs/{job_id(job)}/progress").json())


class _Standing:
    """Accepted shard-rounds so far, read off the events (as `shardwork job watch` counts)."""

    def __init__(self, shards: int, rounds: int) -> None:
        self.shards, self.rounds = shards, rounds
        self.round = 0
        self.accepted_in_round = 0

    def apply(self, event: Event) -> None:
        payload: Any = event.payload
        if event.kind == "round_opened":
            self.round = payload.round
            self.accepted_in_round = 0
        elif event.kind == "verdict" and payload.accepted and payload.round == self.round:
            self.accepted_in_round += 1

    def done(self) -> int:
        return max(0, (self.round - 1) * self.shards + self.accepted_in_round)


def iter_events(
    transport: Transport, job: JobRef, *, timeout: float = 3600.0, poll: float = 0.5
) -> Iterator[Event | JobView]:
    """Yields every event of the job once, in order, and after each poll the job itself;
    ends after yielding a job in a terminal status. Raises :class:`JobNotCompleted` after
    ``timeout`` seconds."""
    started = time.monotonic()
    after = 0
    while True:
        # The job is read before its events, so a job seen ended has all its events in.
        view = get_job(transport, job)
        for event in events(transport, job, after):
            after = event.id
            yield event
        yield view
        if view.status in TERMINAL:
            return
        if time.monotonic() - started > timeout:
            raise JobNotCompleted(view.id, view.status.value, f"job {view.id} is still {view.status.value} after {timeout:.0f} s")
        time.sleep(poll)


def follow(
    transport: Transport,
    job: JobRef,
    *,
    show: bool = True,
    on_event: Callable[[Event], None] | None = None,
    timeout: float = 3600.0,
    poll: float = 0.5,
) -> JobView:
    """Follows a job until it ends; returns it when it completed, else raises
    :class:`JobNotCompleted` naming how it ended. ``show``: a progress bar of accepted
    shard-rounds on stderr, each event printed above it."""
    first = get_job(transport, job)
    standing = _Standing(first.shards, first.rounds)
    bar = tqdm(total=first.shards * first.rounds, unit="shard-round", desc=f"job {first.id}", disable=not show)
    last: JobView = first
    reason = ""
    try:
        for item in iter_events(transport, job, timeout=timeout, poll=poll):
            if isinstance(item, JobView):
                last = item
                bar.set_postfix_str(f"round {max(standing.round, 1)}/{standing.rounds} · {item.status.value}")
                continue
            standing.apply(item)
            if item.kind in ("refunded", "cancelled", "abort_due", "refund_due", "task_failed"):
                reason = item.describe()
            if show:
                bar.write(f"{item.created_at.isoformat(timespec='seconds')}  {item.describe()}", file=sys.stderr)
            bar.update(standing.done() - bar.n)
            if on_event is not None:
                on_event(item)
    finally:
        bar.close()
    if last.status != JobStatus.completed:
        raise JobNotCompleted(last.id, last.status.value, f"job {last.id} ended {last.status.value}" + (f" ({reason})" if reason else ""))
    return last
