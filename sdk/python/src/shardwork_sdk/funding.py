"""Funding a posted job: by the server's development account, or on a real chain with the
requester's key calling the escrow's ``createJob`` with the terms the API gives."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

import httpx
from eth_abi import encode as abi_encode
from eth_account.signers.local import LocalAccount
from eth_utils import keccak, to_checksum_address

from .errors import ChainError
from .follow import events
from .jobs import JobRef, get_job, job_id
from .models import ChainInfo, DevFundResponse, FundingTerms, JobStatus, JobView
from .transport import Transport

ETH = "0x0000000000000000000000000000000000000000"

#: JobEscrow.createJob (contracts/src/JobEscrow.sol; checked against the committed artifact by
#: the tests) and the ERC-20 approval an ERC-20 stake needs first.
CREATE_JOB = "createJob(address,uint256,string,uint64,uint8,uint16)"
CREATE_JOB_TYPES = ["address", "uint256", "string", "uint64", "uint8", "uint16"]
JOB_CREATED = "JobCreated(uint256,address,address,uint256,uint64,uint8,uint16,bytes32,string)"
APPROVE = "approve(address,uint256)"
ALLOWANCE = "allowance(address,address)"
BALANCE_OF = "balanceOf(address)"

#: EIP-7825's cap on one transaction's gas, which the escrow's chains enforce.
MAX_TX_GAS = 2**24


def selector(signature: str) -> bytes:
    return keccak(text=signature)[:4]


def create_job_calldata(terms: FundingTerms) -> bytes:
    """The ``createJob`` call the terms ask for, ABI-encoded."""
    args = [
        to_checksum_address(terms.token),
        int(terms.stake_wei),
        terms.spec_cid,
        terms.deadline_unix,
        terms.kind,
        terms.max_fee_bps,
    ]
    return selector(CREATE_JOB) + abi_encode(CREATE_JOB_TYPES, args)


def dev_fund(transport: Transport, job: JobRef) -> DevFundResponse:
    """Development mode: the server funds the escrow from its development account."""
    response = transport.request("POST", f"/v1/jobs/{job_id(job)}/dev-fund")
    return DevFundResponse.model_validate(response.json())


class Rpc:
    """A minimal Ethereum JSON-RPC client over HTTP."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url
        self.http = httpx.Client(timeout=timeout)
        self.ids = itertools.count(1)

    def __call__(self, method: str, *params: Any) -> Any:
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": list(params)}
        try:
            reply = self.http.post(self.url, json=body)
            reply.raise_for_status()
            data = reply.json()
        except (httpx.HTTPError, ValueError) as e:
            raise ChainError(f"{method} at {self.url}: {type(e).__name__}: {e}") from e
        if "error" in data:
            error = data["error"]
            extra = f" (data {error['data']})" if error.get("data") else ""
            raise ChainError(f"{method}: {error.get('message', error)}{extra}")
        return data["result"]

    def close(self) -> None:
        self.http.close()


def send_transaction(rpc: Rpc, account: LocalAccount, chain_id: int, to: str, data: bytes, value: int = 0, timeout: float = 120.0) -> dict[str, Any]:
    """Signs and sends one call with the requester's key, and waits for its receipt; raises
    :class:`ChainError` if the node refuses it (a revert shows at gas estimation) or it
    reverts."""
    call = {"from": account.address, "to": to, "data": "0x" + data.hex(), "value": hex(value)}
    gas = int(rpc("eth_estimateGas", call), 16)
    tx: dict[str, Any] = {
        "chainId": chain_id,
        "nonce": int(rpc("eth_getTransactionCount", account.address, "pending"), 16),
        "to": to_checksum_address(to),
        "data": data,
        "value": value,
        # Headroom over the estimate, under the per-transaction cap.
        "gas": min(gas + gas // 5 + 10_000, MAX_TX_GAS),
    }
    base_fee = rpc("eth_getBlockByNumber", "latest", False).get("baseFeePerGas")
    if base_fee is not None:
        tip = int(rpc("eth_maxPriorityFeePerGas"), 16)
        # Twice the base fee: the transaction stays valid through several full blocks.
        tx.update(type=2, maxPriorityFeePerGas=tip, maxFeePerGas=2 * int(base_fee, 16) + tip)
    else:
        tx["gasPrice"] = int(rpc("eth_gasPrice"), 16)
    signed = account.sign_transaction(tx)
    tx_hash = rpc("eth_sendRawTransaction", "0x" + bytes(signed.raw_transaction).hex())
    deadline = time.monotonic() + timeout
    while (receipt := rpc("eth_getTransactionReceipt", tx_hash)) is None:
        if time.monotonic() > deadline:
            raise ChainError(f"transaction {tx_hash} not mined within {timeout:.0f} s")
        time.sleep(0.5)
    if int(receipt["status"], 16) != 1:
        raise ChainError(f"transaction {tx_hash} reverted")
    return receipt


def _view_uint(rpc: Rpc, to: str, data: bytes) -> int:
    """A view call returning one uint256."""
    return int(rpc("eth_call", {"to": to, "data": "0x" + data.hex()}, "latest"), 16)


@dataclass(frozen=True)
class ChainFunding:
    """The ``createJob`` transaction, the job's id in the escrow, and the job as the API shows
    it afterwards (``open`` once the API has seen the funding, when waited for)."""

    tx_hash: str
    escrow_job_id: int
    job: JobView


def fund_on_chain(
    transport: Transport,
    account: LocalAccount,
    job: JobRef,
    rpc_url: str,
    *,
    wait: bool = True,
    timeout: float = 120.0,
) -> ChainFunding:
    """Funds the escrow from ``account`` on the chain at ``rpc_url``: ``createJob`` with the
    job's funding terms (an ERC-20 stake is approved first), on the escrow ``GET /v1/chain``
    names. ``wait``: until the API has seen the funding and opened the job."""
    chain = ChainInfo.model_validate(transport.request("GET", "/v1/chain", auth=False).json())
    view = get_job(transport, job)
    if view.status != JobStatus.awaiting_funding or view.funding is None:
        raise ChainError(f"job {view.id} is {view.status.value}, not awaiting funding")
    terms = view.funding
    rpc = Rpc(rpc_url)
    try:
        node_chain = int(rpc("eth_chainId"), 16)
        if node_chain != chain.chain_id:
            raise ChainError(f"{rpc_url} is chain {node_chain}, but the API follows chain {chain.chain_id}")
        stake = int(terms.stake_wei)
        value = stake
        if int(terms.token, 16) != 0:
            # An ERC-20 stake: the escrow pulls it, so it must be allowed to take exactly the
            # stake first. A short balance is named before any approval is spent on it.
            escrow = to_checksum_address(chain.escrow_address)
            balance = _view_uint(rpc, terms.token, selector(BALANCE_OF) + abi_encode(["address"], [account.address]))
            if balance < stake:
                raise ChainError(f"{account.address} holds {balance} units of token {terms.token}, below the stake of {stake}")
            allowance = _view_uint(rpc, terms.token, selector(ALLOWANCE) + abi_encode(["address", "address"], [account.address, escrow]))
            if allowance < stake:
                approve = selector(APPROVE) + abi_encode(["address", "uint256"], [escrow, stake])
                send_transaction(rpc, account, chain.chain_id, terms.token, approve, 0, timeout)
            value = 0
        receipt = send_transaction(rpc, account, chain.chain_id, chain.escrow_address, create_job_calldata(terms), value, timeout)
    finally:
        rpc.close()
    topic = "0x" + keccak(text=JOB_CREATED).hex()
    escrow_job_ids = [
        int(log["topics"][1], 16)
        for log in receipt["logs"]
        if log["address"].lower() == chain.escrow_address.lower() and log["topics"] and log["topics"][0] == topic
    ]
    if not escrow_job_ids:
        raise ChainError(f"transaction {receipt['transactionHash']} has no JobCreated event of the escrow")
    tx_hash = receipt["transactionHash"]
    if wait:
        view = _wait_open(transport, view.id, tx_hash, timeout)
    return ChainFunding(tx_hash, escrow_job_ids[0], view)


def _wait_open(transport: Transport, job: Any, tx_hash: str, timeout: float) -> JobView:
    """Polls until the API has seen the funding; a ``funding_ignored`` event (wrong terms, or
    funded twice) ends the wait with its reason."""
    deadline = time.monotonic() + timeout
    while True:
        view = get_job(transport, job)
        if view.status != JobStatus.awaiting_funding:
            return view
        for event in events(transport, job):
            if event.kind == "funding_ignored":
                raise ChainError(f"the API ignored the funding of job {view.id}: {event.describe()}")
        if time.monotonic() > deadline:
            raise ChainError(f"the API has not seen transaction {tx_hash} fund job {view.id} within {timeout:.0f} s")
        time.sleep(0.5)
