"""Funding on a real chain: `shardwork up` following anvil with development funding off, and
the requester's own signed createJob opening the job."""

from __future__ import annotations

import pytest
from eth_abi import encode as abi_encode
from eth_utils import to_checksum_address

from conftest import bert_spec
from shardwork_sdk import ApiError, ChainError, Client, DEV_REQUESTER_KEY, funding, models


def test_a_job_is_funded_with_the_requesters_signed_create_job(anvil_marketplace):
    market = anvil_marketplace
    with Client(market.url, DEV_REQUESTER_KEY) as client:
        chain = client.chain()
        assert chain.chain_id == 31337 and not chain.dev_funding
        job = client.post_job(bert_spec(market.bert_cid), market.reviews, progress=False)
        assert job.funding is not None and job.funding.stake_wei == "500000000000000000"
        # Development funding is off on this server: refused with a problem, not funded.
        with pytest.raises(ApiError) as refused:
            client.dev_fund(job)
        assert refused.value.status in (403, 409, 503) and refused.value.detail
        assert client.job(job).status == models.JobStatus.awaiting_funding

        funded = client.fund_on_chain(job, market.extra["rpc_url"], timeout=60)
        assert funded.job.status == models.JobStatus.open
        assert funded.job.escrow_job_id == str(funded.escrow_job_id)
        assert funded.job.escrow_address == chain.escrow_address
        kinds = [e.kind for e in client.events(job)]
        assert "funded" in kinds, kinds

        # Funding it again is refused before anything is sent.
        with pytest.raises(ChainError, match="not awaiting funding"):
            client.fund_on_chain(job, market.extra["rpc_url"])


def test_an_unreachable_node_is_named_and_nothing_is_funded(anvil_marketplace):
    market = anvil_marketplace
    with Client(market.url, DEV_REQUESTER_KEY) as client:
        job = client.post_job(bert_spec(market.bert_cid), market.reviews, progress=False)
        with pytest.raises(ChainError, match="eth_chainId at http://127.0.0.1:1"):
            client.fund_on_chain(job, "http://127.0.0.1:1", timeout=5)
        assert client.job(job).status == models.JobStatus.awaiting_funding


def test_a_job_staked_in_an_erc20_is_approved_then_funded(anvil_marketplace):
    """`shardwork up` lists its development token (tUSD) beside the development escrow: a job
    staked in it is funded with the requester's key (approve exactly the stake, then
    createJob), and the escrow then holds the stake; an unlisted token is refused at posting."""
    market = anvil_marketplace
    rpc_url = market.extra["rpc_url"]
    with Client(market.url, DEV_REQUESTER_KEY) as client:
        tokens = client.chain().tokens
        assert [t.symbol for t in tokens] == ["tUSD"], tokens
        token = tokens[0]
        assert token.decimals == 18
        spec = bert_spec(market.bert_cid)
        spec["stake"] = {"amount": str(25 * 10**18), "token": token.address}

        with pytest.raises(ApiError) as refused:
            client.post_job({**spec, "stake": {**spec["stake"], "token": "0x" + "42" * 20}}, market.reviews, progress=False)
        assert refused.value.status == 422 and refused.value.field("spec.stake.token"), refused.value

        job = client.post_job(spec, market.reviews, progress=False)
        assert job.funding is not None and job.funding.token == token.address
        escrow = client.chain().escrow_address
        before = token_balance(rpc_url, token.address, escrow)
        funded = client.fund_on_chain(job, rpc_url, timeout=60)
        assert funded.job.status == models.JobStatus.open
        assert token_balance(rpc_url, token.address, escrow) - before == 25 * 10**18


def token_balance(rpc_url: str, token: str, owner: str) -> int:
    rpc = funding.Rpc(rpc_url)
    try:
        call = funding.selector(funding.BALANCE_OF) + abi_encode(["address"], [to_checksum_address(owner)])
        return int(rpc("eth_call", {"to": token, "data": "0x" + call.hex()}, "latest"), 16)
    finally:
        rpc.close()
