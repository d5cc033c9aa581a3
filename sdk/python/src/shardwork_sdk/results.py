"""A completed job's final adapter: download into a PEFT folder, and load it on its base model
with Hugging Face transformers + PEFT (optional dependencies, imported only when asked)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .errors import MissingDependency
from .jobs import JobRef, job_id
from .models import JobResult
from .transport import Transport


def result(transport: Transport, job: JobRef) -> JobResult:
    """The final adapter's CID and files (409 :class:`ApiError` until the job completed)."""
    return JobResult.model_validate(transport.request("GET", f"/v1/jobs/{job_id(job)}/result").json())


def download(transport: Transport, job: JobRef, folder: str | os.PathLike) -> Path:
    """Writes every file of the final adapter into ``folder`` (created if needed); returns it.
    Each file is written under a temporary name and renamed, so a broken download leaves no
    truncated file behind."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    found = result(transport, job)
    for file in found.files:
        # The names come from the server; a name that would leave the folder is refused.
        if not file.name or file.name != Path(file.name).name or file.name in (".", ".."):
            raise ValueError(f"the result names a file {file.name!r} outside the adapter folder")
        target = out / file.name
        partial = out / f".{file.name}.partial"
        response = transport.request("GET", f"/v1/jobs/{found.job_id}/result/files/{file.name}", stream=True)
        try:
            with partial.open("wb") as f:
                for chunk in response.iter_bytes():
                    f.write(chunk)
        finally:
            response.close()
        partial.replace(target)
    return out


def load_peft(adapter: str | os.PathLike, base_model: str | os.PathLike, **kwargs: Any) -> Any:
    """The adapter on its base model, as a ``peft.PeftModel`` in eval mode.

    ``base_model``: a Hugging Face folder or hub name, or a ``.gguf`` file (read through
    transformers' ``gguf_file``). The model class follows the adapter's ``task_type``
    (``SEQ_CLS``: sequence classification, with the adapter's label count; else causal LM).
    ``kwargs`` go to ``from_pretrained`` of the base. Needs ``pip install
    'shardwork-sdk[peft]'`` (torch, transformers, peft).
    """
    try:
        import torch  # noqa: F401
        import transformers
        from peft import PeftModel
    except ImportError as e:
        raise MissingDependency(
            f"load_peft needs torch, transformers and peft ({e.name or e} is missing): "
            "pip install 'shardwork-sdk[peft]'"
        ) from e
    adapter_dir = Path(adapter)
    config_path = adapter_dir / "adapter_config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{adapter_dir} has no adapter_config.json (download the adapter first)")
    config = json.loads(config_path.read_text())
    base = Path(base_model)
    source: str = str(base_model)
    if base.suffix == ".gguf":
        source, kwargs = str(base.parent), {"gguf_file": base.name, **kwargs}
    if config.get("task_type") == "SEQ_CLS":
        labels = _num_labels(adapter_dir)
        if labels is not None:
            kwargs.setdefault("num_labels", labels)
        model = transformers.AutoModelForSequenceClassification.from_pretrained(source, **kwargs)
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(source, **kwargs)
    return PeftModel.from_pretrained(model, str(adapter_dir)).eval()


def _num_labels(adapter_dir: Path) -> int | None:
    """The classifier head's label count, read off the adapter's saved head weights."""
    weights = adapter_dir / "adapter_model.safetensors"
    if not weights.is_file():
        return None
    # The safetensors header is JSON after an 8-byte length: no extra dependency to read it.
    with weights.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    for name, info in header.items():
        if name.endswith("classifier.weight") or name.endswith("score.weight"):
            return int(info["shape"][0])
    return None
