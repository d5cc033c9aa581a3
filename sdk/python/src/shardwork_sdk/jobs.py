"""Quoting, posting and reading jobs."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Union
from uuid import UUID

import pydantic_core
from tqdm import tqdm

from .models import JobPage, JobSpec, JobView, QuoteResponse
from .transport import Transport

Spec = Union[JobSpec, Mapping[str, Any]]
"""A job spec: the generated model, or the same as a dict (sent as given, so the server's
validation names any field at fault)."""

Dataset = Union[str, os.PathLike, bytes, Iterable[Mapping[str, Any]]]
"""A JSONL dataset: a file path, its bytes, or the records themselves (one dict each)."""

JobRef = Union[JobView, UUID, str]
"""A job: its view as the API returned it, or its id."""

Progress = Union[bool, Callable[[int, int], None]]
"""True for a progress bar on stderr, False for none, or a function of (done, total)."""

CHUNK = 64 * 1024


def job_id(job: JobRef) -> UUID:
    """The id of a job given as a view, a UUID or its string."""
    if isinstance(job, JobView):
        return job.id
    if isinstance(job, UUID):
        return job
    try:
        return UUID(str(job))
    except ValueError:
        raise ValueError(f"{job!r} is not a job id (a UUID)") from None


def spec_json(spec: Spec) -> dict[str, Any]:
    """The spec as the JSON object the API reads."""
    if isinstance(spec, JobSpec):
        return spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    if not isinstance(spec, Mapping):
        raise TypeError(f"a job spec is a JobSpec or a dict, not {type(spec).__name__}")
    # datetime deadlines, UUIDs and nested models become their JSON forms.
    return pydantic_core.to_jsonable_python(dict(spec))


class _Body:
    """A dataset as re-readable bytes: a file is streamed from disk each time it is sent, so a
    large dataset is never held in memory twice."""

    def __init__(self, dataset: Dataset) -> None:
        self.path: Path | None = None
        self.data: bytes | None = None
        if isinstance(dataset, (str, os.PathLike)):
            self.path = Path(dataset)
            if not self.path.is_file():
                raise FileNotFoundError(f"dataset file {self.path} does not exist")
            self.size = self.path.stat().st_size
        elif isinstance(dataset, (bytes, bytearray, memoryview)):
            self.data = bytes(dataset)
            self.size = len(self.data)
        elif isinstance(dataset, Iterable):
            lines = []
            for i, record in enumerate(dataset):
                if not isinstance(record, Mapping):
                    raise TypeError(f"records[{i}] is a {type(record).__name__}, not a dict (one JSON object per record)")
                lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
            self.data = ("\n".join(lines) + "\n").encode()
            self.size = len(self.data)
        else:
            raise TypeError(f"a dataset is a file path, bytes or an iterable of records, not {type(dataset).__name__}")

    def chunks(self) -> Iterator[bytes]:
        if self.data is not None:
            for start in range(0, len(self.data), CHUNK):
                yield self.data[start : start + CHUNK]
            return
        assert self.path is not None
        with self.path.open("rb") as f:
            while chunk := f.read(CHUNK):
                yield chunk

    def records(self) -> int:
        """Records as the server counts them: lines that are not blank."""
        count = 0
        tail = b""
        for chunk in self.chunks():
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            count += sum(1 for line in lines if line.strip())
        return count + (1 if tail.strip() else 0)


def _reporter(progress: Progress, total: int, desc: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    """(advance by n bytes, finish) for a progress option."""
    if progress is True:
        bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc, leave=False)
        return bar.update, bar.close
    if callable(progress):
        done = 0

        def advance(n: int) -> None:
            nonlocal done
            done += n
            progress(done, total)

        return advance, lambda: None
    return lambda n: None, lambda: None


def quote(transport: Transport, spec: Spec, dataset: Dataset | int) -> QuoteResponse:
    """What the job would cost, for a dataset (or a number of records)."""
    records = dataset if isinstance(dataset, int) else _Body(dataset).records()
    body = {"spec": spec_json(spec), "dataset_records": records}
    return QuoteResponse.model_validate(transport.request("POST", "/v1/jobs/quote", json=body).json())


def post_job(transport: Transport, spec: Spec, dataset: Dataset, progress: Progress = True) -> JobView:
    """Posts a job, the spec and the dataset uploaded together as ``multipart/form-data``."""
    data = _Body(dataset)
    boundary = f"shardwork-{uuid.uuid4().hex}"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="spec"\r\n'
        f"Content-Type: application/json\r\n\r\n"
    ).encode() + json.dumps(spec_json(spec)).encode() + (
        f'\r\n--{boundary}\r\nContent-Disposition: form-data; name="dataset"; filename="dataset.jsonl"\r\n'
        f"Content-Type: application/x-ndjson\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    total = len(head) + data.size + len(tail)
    advance, finish = _reporter(progress, total, "upload")

    def body() -> Iterator[bytes]:
        for chunk in (head, *data.chunks(), tail):
            yield chunk
            advance(len(chunk))

    headers = {
        "content-type": f"multipart/form-data; boundary={boundary}",
        # A length rather than chunked encoding: the server checks it against its limit first.
        "content-length": str(total),
    }
    try:
        # Not retried: a post that reached the server may have recorded the job.
        response = transport.request("POST", "/v1/jobs", content=body, headers=headers, retry=False)
    finally:
        finish()
    return JobView.model_validate(response.json())


def _text(value: Any) -> str:
    """A generated string wrapper (``RootModel[str]``) or a plain string, as text."""
    return str(getattr(value, "root", value))


def continuing_spec(earlier: JobView, spec: Spec | None = None) -> dict[str, Any]:
    """The spec of a job continuing from ``earlier``'s result: ``spec`` or the earlier job's
    own (its deadline moved as far ahead of now as it was ahead of that job's posting), with
    ``base_model.adapter`` naming the result. A job continues from a completed one."""
    if earlier.result_adapter_cid is None:
        raise ValueError(f"job {earlier.id} is {earlier.status.value} and has no result to continue from")
    if spec is None:
        out = spec_json(earlier.spec)
        out["deadline"] = (datetime.now(timezone.utc) + (earlier.deadline - earlier.created_at)).isoformat()
    else:
        out = spec_json(spec)
    base = dict(out.get("base_model") or {})
    base["adapter"] = _text(earlier.result_adapter_cid)
    out["base_model"] = base
    return out


def continue_job(
    transport: Transport, job: JobRef, dataset: Dataset, spec: Spec | None = None, progress: Progress = True
) -> JobView:
    """Posts a job that continues from completed job ``job``'s result on ``dataset``: round 1
    trains from that adapter and is judged against it."""
    earlier = get_job(transport, job)
    return post_job(transport, continuing_spec(earlier, spec), dataset, progress)


def get_job(transport: Transport, job: JobRef) -> JobView:
    return JobView.model_validate(transport.request("GET", f"/v1/jobs/{job_id(job)}").json())


def list_jobs(transport: Transport, *, requester: str | None = None, status: str | None = None, limit: int = 100) -> list[JobView]:
    """Jobs, newest first, following pages: ``requester`` (an address) and ``status`` filter."""
    params: dict[str, Any] = {"limit": limit}
    if requester:
        params["requester"] = requester.lower()
    if status:
        params["status"] = status
    jobs: list[JobView] = []
    while True:
        page = JobPage.model_validate(transport.request("GET", "/v1/jobs", params=params).json())
        jobs.extend(page.jobs)
        if page.next_cursor is None:
            return jobs
        params["cursor"] = str(page.next_cursor)


def cancel_job(transport: Transport, job: JobRef) -> JobView:
    """Cancels a job that has not started (own jobs only)."""
    return JobView.model_validate(transport.request("POST", f"/v1/jobs/{job_id(job)}/cancel").json())
