"""The README's example, run as written against the live marketplace."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import bert_spec
from shardwork_sdk import DEV_REQUESTER_KEY

README = Path(__file__).resolve().parents[1] / "README.md"


def example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has no python example"
    return blocks[0]


def test_the_readme_example_is_ten_lines():
    assert len(example().strip().splitlines()) <= 10


def test_the_readme_example_runs_as_written(marketplace, tmp_path):
    (tmp_path / "example.py").write_text(example())
    (tmp_path / "spec.json").write_text(json.dumps(bert_spec(marketplace.bert_cid)))
    shutil.copy(marketplace.reviews, tmp_path / "reviews.jsonl")
    env = {**os.environ, "SHARDWORK_API_URL": marketplace.url, "SHARDWORK_REQUESTER_KEY": DEV_REQUESTER_KEY}
    out = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, f"stdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    assert re.search(r"price \(wei\): [1-9][0-9]*", out.stdout), out.stdout
    assert "adapter in adapter" in out.stdout
    assert "round_opened" in out.stderr and "completed" in out.stderr
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["task_type"] == "SEQ_CLS"
