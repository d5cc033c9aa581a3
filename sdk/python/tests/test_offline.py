"""What the SDK does without a server: the SIWE message, problem+json errors, retries, datasets,
and the createJob encoding checked against the escrow's committed artifact."""

from __future__ import annotations

import importlib.util
import json
from datetime import datetime, timezone

import httpx
import pytest
from eth_abi import decode as abi_decode
from eth_utils import keccak

from conftest import REPO
from shardwork_sdk import ApiError, MissingDependency, TransportError, load_peft, siwe_message
from shardwork_sdk import funding, jobs
from shardwork_sdk.models import FundingTerms
from shardwork_sdk.transport import Transport


def test_siwe_message_renders_every_line_as_the_server_parses_it():
    t = datetime(2026, 11, 27, 12, 30, 5, 123456, tzinfo=timezone.utc)
    message = siwe_message(
        domain="127.0.0.1:8080",
        address="0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
        uri="http://127.0.0.1:8080",
        chain_id=31337,
        nonce="abc123",
        issued_at=t,
        expiration_time=t.replace(minute=40),
    )
    assert message == (
        "127.0.0.1:8080 wants you to sign in with your Ethereum account:\n"
        "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266\n"
        "\n"
        "Sign in to Shardwork\n"
        "\n"
        "URI: http://127.0.0.1:8080\n"
        "Version: 1\n"
        "Chain ID: 31337\n"
        "Nonce: abc123\n"
        "Issued At: 2026-11-27T12:30:05Z\n"
        "Expiration Time: 2026-11-27T12:40:05Z"
    )


PROBLEM = {
    "type": "urn:shardwork:problem:validation",
    "title": "The request breaks a rule",
    "status": 422,
    "detail": "the job spec has 2 problems",
    "errors": [
        {"path": "spec.lora.r", "message": "must be at least 1"},
        {"path": "dataset:3", "message": "line 3: field \"label\" is missing"},
    ],
}


def test_api_error_carries_the_problem_fields():
    e = ApiError("POST", "/v1/jobs", 422, json.dumps(PROBLEM).encode())
    assert (e.status, e.type, e.title, e.detail) == (422, PROBLEM["type"], PROBLEM["title"], PROBLEM["detail"])
    assert e.kind == "validation"
    assert e.field("spec.lora.r") == "must be at least 1"
    assert e.field("spec.shards") is None
    assert not e.transient
    text = str(e)
    assert "POST /v1/jobs: 422 validation" in text and "spec.lora.r: must be at least 1" in text and "dataset:3" in text


def test_api_error_without_a_problem_body_keeps_the_body():
    e = ApiError("GET", "/v1/chain", 502, b"<html>Bad Gateway</html>")
    assert e.problem is None and e.kind is None and e.errors == []
    assert e.transient
    assert "Bad Gateway" in str(e)


def mock_transport(handler, retry_window: float = 5.0) -> Transport:
    t = Transport("http://api.test", http=httpx.Client(transport=httpx.MockTransport(handler)), retry_window=retry_window)
    return t


def test_idempotent_calls_are_retried_through_503_and_connection_errors():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) == 1:
            raise httpx.ConnectError("refused")
        if len(calls) == 2:
            return httpx.Response(503, json={**PROBLEM, "type": "urn:shardwork:problem:unavailable", "status": 503})
        return httpx.Response(200, json={"ok": True})

    t = mock_transport(handler)
    assert t.request("GET", "/v1/chain", auth=False).json() == {"ok": True}
    assert len(calls) == 3


def test_calls_that_must_not_repeat_are_not_retried_and_others_give_up_after_the_window():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        raise httpx.ConnectError("refused")

    t = mock_transport(handler, retry_window=0.3)
    with pytest.raises(TransportError, match="POST /v1/jobs"):
        t.request("POST", "/v1/jobs", auth=False, retry=False)
    assert len(calls) == 1
    with pytest.raises(TransportError):
        t.request("GET", "/v1/chain", auth=False)
    assert len(calls) > 2


def test_a_refused_token_signs_in_again_once_and_422_is_not_retried():
    tokens = []
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        if request.headers.get("authorization") == "Bearer old":
            return httpx.Response(401, json={**PROBLEM, "type": "urn:shardwork:problem:unauthenticated", "status": 401})
        if request.url.path == "/v1/jobs/quote":
            return httpx.Response(422, json=PROBLEM, headers={"content-type": "application/problem+json"})
        return httpx.Response(200, json={})

    t = mock_transport(handler)
    t.token = lambda refresh: tokens.append(refresh) or ("new" if refresh else "old")
    t.request("GET", "/v1/jobs")
    assert tokens == [False, True] and seen == ["Bearer old", "Bearer new"]
    t.token = lambda refresh: "new"
    with pytest.raises(ApiError) as caught:
        t.request("POST", "/v1/jobs/quote", json={})
    assert caught.value.field("spec.lora.r") and seen.count("Bearer new") == 2


def test_datasets_count_records_as_the_server_does(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"text": "a"}\n\n  \r\n{"text": "b"}\r\n{"text": "c"}')
    assert jobs._Body(path).records() == 3
    assert jobs._Body(str(path)).records() == 3
    assert jobs._Body([{"text": "a"}, {"text": "b"}]).records() == 2
    body = jobs._Body([{"text": "é"}])
    assert b"".join(body.chunks()) == '{"text":"é"}\n'.encode()
    with pytest.raises(TypeError, match=r"records\[1\]"):
        jobs._Body([{"text": "a"}, "b"])
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        jobs._Body(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="not a job id"):
        jobs.job_id("job-1")


def artifact_abi():
    artifact = json.loads((REPO / "contracts" / "artifacts" / "JobEscrow.json").read_text())
    return artifact["abi"] if isinstance(artifact, dict) and "abi" in artifact else artifact


def test_create_job_matches_the_escrow_artifact_and_encodes_the_terms():
    abi = artifact_abi()
    create = next(e for e in abi if e.get("type") == "function" and e["name"] == "createJob")
    assert [i["type"] for i in create["inputs"]] == funding.CREATE_JOB_TYPES
    assert create["stateMutability"] == "payable"
    created = next(e for e in abi if e.get("type") == "event" and e["name"] == "JobCreated")
    assert f"JobCreated({','.join(i['type'] for i in created['inputs'])})" == funding.JOB_CREATED
    assert created["inputs"][0]["name"] == "jobId" and created["inputs"][0]["indexed"]

    terms = FundingTerms(
        token=funding.ETH, stake_wei="500000000000000000", spec_cid="bafyspec", deadline_unix=1_900_000_000, kind=1, max_fee_bps=1000
    )
    data = funding.create_job_calldata(terms)
    assert data[:4] == keccak(text="createJob(address,uint256,string,uint64,uint8,uint16)")[:4]
    assert abi_decode(funding.CREATE_JOB_TYPES, data[4:]) == (funding.ETH, 500000000000000000, "bafyspec", 1_900_000_000, 1, 1000)


@pytest.mark.skipif(all(importlib.util.find_spec(m) for m in ("torch", "transformers", "peft")), reason="torch, transformers and peft are installed")
def test_load_peft_says_what_is_missing(tmp_path):
    with pytest.raises(MissingDependency, match=r"pip install 'shardwork-sdk\[peft\]'"):
        load_peft(tmp_path, tmp_path)


def test_post_job_sends_the_spec_and_dataset_as_multipart_with_a_length_and_progress(tmp_path):
    import email.parser
    import uuid as uuidlib
    from datetime import timedelta

    sent = {}

    def handler(request: httpx.Request) -> httpx.Response:
        sent["body"] = request.read()
        sent["headers"] = request.headers
        return httpx.Response(422, json=PROBLEM)

    t = mock_transport(handler)
    t.token = lambda refresh: "token"
    dataset = tmp_path / "d.jsonl"
    dataset.write_bytes(b'{"text": "a", "label": 0}\n' * 5000)
    seen = []
    deadline = datetime.now(timezone.utc) + timedelta(hours=1)
    spec = {"version": 1, "deadline": deadline, "note": uuidlib.UUID(int=7)}
    with pytest.raises(ApiError):
        jobs.post_job(t, spec, dataset, progress=lambda done, total: seen.append((done, total)))
    body, headers = sent["body"], sent["headers"]
    assert int(headers["content-length"]) == len(body) and "transfer-encoding" not in headers
    assert seen[-1] == (len(body), len(body)) and len(seen) > 2
    message = email.parser.BytesParser().parsebytes(
        b"Content-Type: " + headers["content-type"].encode() + b"\r\n\r\n" + body
    )
    parts = {p.get_param("name", header="content-disposition"): p for p in message.get_payload()}
    assert json.loads(parts["spec"].get_payload(decode=True)) == {
        "version": 1, "deadline": deadline.isoformat().replace("+00:00", "Z"), "note": str(uuidlib.UUID(int=7))
    }
    assert parts["spec"].get_content_type() == "application/json"
    assert parts["dataset"].get_payload(decode=True) == dataset.read_bytes()
