"""The requester's client: one API, one key."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eth_account.signers.local import LocalAccount

from . import follow as _follow
from . import funding as _funding
from . import jobs as _jobs
from . import results as _results
from .auth import SignIn, load_account
from .follow import Event
from .funding import ChainFunding
from .jobs import Dataset, JobRef, Progress, Spec
from .models import ChainInfo, DevFundResponse, JobProgress, JobResult, JobView, QuoteResponse
from .transport import Transport


class Client:
    """Signs in to the Shardwork API at ``url`` with ``key`` (a hex private key or an
    eth-account account) and acts as that requester. Signing in happens on the first call that
    needs it, and again whenever the access token expires.

    Every refusal raises :class:`~shardwork_sdk.ApiError` with the API's problem+json fields;
    calls that are safe to repeat are retried while the API is unreachable or not ready.
    """

    def __init__(self, url: str, key: str | bytes | LocalAccount, *, roles: Sequence[str] = (), timeout: float = 300.0) -> None:
        self.account = load_account(key)
        self.transport = Transport(url, timeout=timeout)
        self.session = SignIn(self.transport, self.account, roles)
        self.transport.token = self.session

    @property
    def address(self) -> str:
        """The requester's address (EIP-55)."""
        return self.account.address

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def sign_in(self) -> None:
        """Signs in now (otherwise the first call does)."""
        self.session(True)

    def chain(self) -> ChainInfo:
        """The chain and escrow contract the API follows, and whether development funding works."""
        return ChainInfo.model_validate(self.transport.request("GET", "/v1/chain", auth=False).json())

    # Jobs ------------------------------------------------------------------------------------

    def quote(self, spec: Spec, dataset: Dataset | int) -> QuoteResponse:
        """The price and adapter size of ``spec`` on ``dataset`` (or a record count)."""
        return _jobs.quote(self.transport, spec, dataset)

    def post_job(self, spec: Spec, dataset: Dataset, *, progress: Progress = True) -> JobView:
        """Posts a job with its dataset (a JSONL file path, bytes, or a list of record dicts);
        ``progress`` shows the upload. A spec or dataset with faults raises
        :class:`ApiError` (422) whose ``errors`` name every field or line at fault."""
        return _jobs.post_job(self.transport, spec, dataset, progress)

    def continue_job(self, job: JobRef, dataset: Dataset, spec: Spec | None = None, *, progress: Progress = True) -> JobView:
        """Posts a job that continues from completed job ``job``'s result on new data: round 1
        trains from its adapter and is judged against it. The spec is ``spec`` or the earlier
        job's own with its deadline moved ahead; ``base_model.adapter`` names the result."""
        return _jobs.continue_job(self.transport, job, dataset, spec, progress)

    def job(self, job: JobRef) -> JobView:
        return _jobs.get_job(self.transport, job)

    def jobs(self, *, status: str | None = None) -> list[JobView]:
        """This requester's jobs, newest first."""
        return _jobs.list_jobs(self.transport, requester=self.address, status=status)

    def cancel(self, job: JobRef) -> JobView:
        return _jobs.cancel_job(self.transport, job)

    # Funding ---------------------------------------------------------------------------------

    def dev_fund(self, job: JobRef) -> DevFundResponse:
        """Development mode (``chain().dev_funding``): the server's development account funds
        the escrow."""
        return _funding.dev_fund(self.transport, job)

    def fund_on_chain(self, job: JobRef, rpc_url: str, *, wait: bool = True, timeout: float = 120.0) -> ChainFunding:
        """Funds the escrow with this requester's key: a signed ``createJob`` with the job's
        funding terms, sent to the chain at ``rpc_url``; ``wait`` until the job is open."""
        return _funding.fund_on_chain(self.transport, self.account, job, rpc_url, wait=wait, timeout=timeout)

    # Following -------------------------------------------------------------------------------

    def events(self, job: JobRef, after: int = 0) -> list[Event]:
        """The job's events after event id ``after``, oldest first, as typed objects."""
        return _follow.events(self.transport, job, after)

    def progress(self, job: JobRef) -> JobProgress:
        return _follow.progress(self.transport, job)

    def follow(
        self,
        job: JobRef,
        *,
        show: bool = True,
        on_event: Callable[[Event], None] | None = None,
        timeout: float = 3600.0,
        poll: float = 0.5,
    ) -> JobView:
        """Follows the job until it ends (a progress bar and its events on stderr when
        ``show``); returns it completed, or raises :class:`JobNotCompleted`."""
        return _follow.follow(self.transport, job, show=show, on_event=on_event, timeout=timeout, poll=poll)

    # Results ---------------------------------------------------------------------------------

    def result(self, job: JobRef) -> JobResult:
        return _results.result(self.transport, job)

    def download(self, job: JobRef, folder: str | os.PathLike) -> Path:
        """Downloads the final adapter (PEFT layout) into ``folder``."""
        return _results.download(self.transport, job, folder)
