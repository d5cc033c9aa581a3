"""Scores one Shardwork adapter twice, with `shardwork eval` and with Hugging Face transformers +
PEFT (what a requester who downloads the adapter runs), and prints the two side by side.

Run it through `scripts/peft-check`, which installs torch, transformers, peft, safetensors and
gguf into `.tools/peft-check` first. Not part of CI: the install is several GB.

Classification (adapter task_type SEQ_CLS, base = a BERT-family folder): held-out accuracy and
macro-F1 of `AutoModelForSequenceClassification` + `PeftModel.from_pretrained`.
Causal LM (CAUSAL_LM, base = a Llama-family folder or .gguf file): mean held-out cross-entropy
per learned token of `AutoModelForCausalLM.from_pretrained` (`gguf_file=` for GGUF) + the
adapter, on the tokens `shardwork` learns (completions, responses, assistant turns; every
token of a plain text).

Before scoring it checks that PEFT loaded the adapter whole: `get_peft_model_state_dict` of the
loaded model must give back every tensor of adapter_model.safetensors, under the same name,
with the same values. Exit status: 0 when the scores agree within --tolerance, 1 when they do
not, 2 when the check cannot be made (PEFT does not load the adapter unchanged, `shardwork
eval` fails, a record is malformed).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

# Before the imports that read them: no progress bars (the GGUF loader draws its own), and no
# tokenizer thread pool forked into the `shardwork` subprocess.
os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from peft import PeftModel, get_peft_model_state_dict  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)
from transformers.utils import logging as hf_logging  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, type=Path,
                   help="the base: a BERT-family folder, or a Llama-family folder or .gguf file")
    p.add_argument("--adapter", required=True, type=Path, help="the PEFT adapter folder")
    p.add_argument("--data", required=True, type=Path, help="held-out JSONL")
    p.add_argument("--shardwork", required=True, help="the shardwork binary")
    p.add_argument("--labels", type=int, default=2, help="classification: number of labels")
    p.add_argument("--max-seq-len", type=int, default=128,
                   help="tokens per example, as `shardwork eval --max-seq-len` (default 128)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--tolerance", type=float, default=0.01,
                   help="largest |difference| of the headline metric that counts as agreeing")
    return p.parse_args()


def shardwork_eval(args):
    cmd = [args.shardwork, "eval", "--model", str(args.model), "--data", str(args.data),
           "--adapter", str(args.adapter), "--max-seq-len", str(args.max_seq_len), "--json"]
    if args.task == "SEQ_CLS":
        cmd += ["--labels", str(args.labels)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def fail(message):
    """Stops with status 2: the check could not be made (as opposed to 1, scores differ)."""
    print(f"peft-check: {message}", file=sys.stderr)
    sys.exit(2)


def read_jsonl(path):
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                records.append(json.loads(line))
    return records


def load_adapter(base, adapter_dir):
    try:
        return PeftModel.from_pretrained(base, adapter_dir).eval()
    # PEFT raises KeyError for a tensor it looks for and does not find, RuntimeError for a
    # shape, ValueError for a config: each means the adapter does not load as it is.
    except Exception as e:
        fail(f"{adapter_dir}: PeftModel.from_pretrained failed: {type(e).__name__}: {e}")


def check_loaded(model, adapter_dir):
    """The adapter as PEFT holds it after loading must be the file, tensor for tensor."""
    on_disk = load_file(str(adapter_dir / "adapter_model.safetensors"))
    held = get_peft_model_state_dict(model)
    missing = sorted(set(on_disk) - set(held))
    unexpected = sorted(set(held) - set(on_disk))
    changed = sorted(k for k in set(on_disk) & set(held)
                     if not torch.equal(on_disk[k].float(), held[k].detach().float().cpu()))
    if missing or unexpected or changed:
        for what, names in (("not loaded by PEFT", missing),
                            ("expected by PEFT but not in the file", unexpected),
                            ("loaded with other values", changed)):
            for name in names:
                print(f"  {what}: {name}")
        fail(f"{adapter_dir}: PEFT does not load this adapter unchanged")
    return len(on_disk)


# Classification ---------------------------------------------------------------------------


def label_index(label, labels):
    # `shardwork` names the classes "0".."n-1" and reads a label by its text.
    name = str(label)
    names = [str(i) for i in range(labels)]
    if name not in names:
        fail(f"label {label!r} is not one of {names}")
    return names.index(name)


def classification_metrics(predicted, gold, labels):
    """Accuracy and macro-F1 as trainer/src/eval.rs computes them."""
    correct = sum(p == g for p, g in zip(predicted, gold))
    f1 = []
    for c in range(labels):
        tp = sum(p == c and g == c for p, g in zip(predicted, gold))
        fp = sum(p == c and g != c for p, g in zip(predicted, gold))
        fn = sum(p != c and g == c for p, g in zip(predicted, gold))
        if tp + fp + fn:
            f1.append(2 * tp / (2 * tp + fp + fn))
    return {"accuracy": correct / len(gold), "macro_f1": sum(f1) / max(len(f1), 1),
            "examples": len(gold)}


def peft_classification(args):
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    base = AutoModelForSequenceClassification.from_pretrained(
        args.model, num_labels=args.labels, dtype=torch.float32)
    model = load_adapter(base, args.adapter)
    tensors = check_loaded(model, args.adapter)
    head = type(base).__name__
    records = read_jsonl(args.data)
    texts = [r["text"] for r in records]
    gold = [label_index(r["label"], args.labels) for r in records]
    predicted = []
    with torch.no_grad():
        for i in range(0, len(texts), args.batch_size):
            batch = tokenizer(texts[i:i + args.batch_size], padding=True, truncation=True,
                              max_length=args.max_seq_len, return_tensors="pt")
            predicted += model(**batch).logits.argmax(-1).tolist()
    return head, tensors, classification_metrics(predicted, gold, args.labels)


# Causal LM --------------------------------------------------------------------------------


def alpaca_prompt(instruction, inp):
    if inp:
        return f"### Instruction:\n{instruction}\n\n### Input:\n{inp}\n\n### Response:\n"
    return f"### Instruction:\n{instruction}\n\n### Response:\n"


def render(tokenizer, record, eos_text):
    """The record's text and the character ranges the loss learns (None: every token), laid
    out as trainer/src/train/sft_data.rs lays them out."""
    template = tokenizer.chat_template

    def chat(messages):
        def text(upto, prompt):
            return tokenizer.apply_chat_template(
                messages[:upto], tokenize=False, add_generation_prompt=prompt)
        full = text(len(messages), False)
        spans = []
        for i, m in enumerate(messages):
            if m["role"] == "assistant":
                before, through = text(i, True), text(i + 1, False)
                if not (through.startswith(before) and full.startswith(through)):
                    fail(f"chat template does not render turn {i + 1} by appending")
                if len(through) > len(before):
                    spans.append((len(before), len(through)))
        return full, spans

    if "label" in record:
        fail("a {\"text\",\"label\"} record is for classification, not a causal LM")
    if "messages" in record:
        if not template:
            fail("{\"messages\"} records need a chat template; the model has none")
        return chat(record["messages"])
    if "instruction" in record:
        instruction, inp, output = record["instruction"], record.get("input", ""), record["output"]
        if template:
            user = f"{instruction}\n\n{inp}" if inp else instruction
            return chat([{"role": "user", "content": user},
                         {"role": "assistant", "content": output}])
        prompt = alpaca_prompt(instruction, inp)
        text = f"{prompt}{output}{eos_text}"
        return text, [(len(prompt), len(text))]
    if "prompt" in record:
        text = f"{record['prompt']}{record['completion']}{eos_text}"
        return text, [(len(record["prompt"]), len(text))]
    return f"{record['text']}{eos_text}", None


def peft_causal_lm(args):
    # A Hugging Face folder loads as it is; a GGUF file by its folder and name (dequantised).
    if args.model.is_dir():
        source, extra = str(args.model), {}
    else:
        source, extra = str(args.model.parent), {"gguf_file": args.model.name}
    tokenizer = AutoTokenizer.from_pretrained(source, **extra)
    base = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, **extra)
    model = load_adapter(base, args.adapter)
    tensors = check_loaded(model, args.adapter)
    eos_text = tokenizer.convert_ids_to_tokens(tokenizer.eos_token_id)
    examples = []
    for record in read_jsonl(args.data):
        text, spans = render(tokenizer, record, eos_text)
        enc = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        learn = [e > s and (spans is None or any(a <= s < b for a, b in spans))
                 for s, e in offsets]
        ids, learn = ids[:args.max_seq_len], learn[:args.max_seq_len]
        if any(learn[1:]):
            examples.append((ids, learn))
    total, tokens = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(examples), args.batch_size):
            chunk = examples[i:i + args.batch_size]
            width = max(len(ids) for ids, _ in chunk) - 1
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
            inputs = torch.tensor([ids[:-1] + [pad] * (width - len(ids) + 1) for ids, _ in chunk])
            mask = torch.tensor([[1] * (len(ids) - 1) + [0] * (width - len(ids) + 1)
                                 for ids, _ in chunk])
            logits = model(input_ids=inputs, attention_mask=mask).logits.float()
            for b, (ids, learn) in enumerate(chunk):
                at = [t for t in range(len(ids) - 1) if learn[t + 1]]
                targets = torch.tensor([ids[t + 1] for t in at])
                total += torch.nn.functional.cross_entropy(
                    logits[b, at], targets, reduction="sum").item()
                tokens += len(at)
    loss = total / tokens
    return type(base).__name__, tensors, {"loss": loss, "perplexity": math.exp(loss),
                                          "tokens": tokens}


def main():
    args = parse_args()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    config = json.loads((args.adapter / "adapter_config.json").read_text())
    task = args.task = config.get("task_type")
    if task == "SEQ_CLS":
        headline, lower_is_better = "accuracy", False
        head, tensors, peft = peft_classification(args)
    elif task == "CAUSAL_LM":
        headline, lower_is_better = "loss", True
        head, tensors, peft = peft_causal_lm(args)
    else:
        fail(f"{args.adapter}: task_type {task!r} (SEQ_CLS or CAUSAL_LM)")
    ours = shardwork_eval(args)

    print(f"base model  {args.model} -> {head}")
    print(f"adapter     {args.adapter}: {task}, r={config['r']}, "
          f"targets {','.join(config['target_modules'])}, "
          f"modules_to_save {config.get('modules_to_save')}, "
          f"base_model_name_or_path {config.get('base_model_name_or_path')!r}")
    print(f"PEFT loaded all {tensors} adapter tensors unchanged "
          "(get_peft_model_state_dict gives back the file)")
    print(f"held-out    {args.data}, max_seq_len {args.max_seq_len}")
    print(f"{'':12}{'shardwork eval':>16}{'transformers+PEFT':>20}{'difference':>12}")
    for key in peft:
        a, b = ours[key], peft[key]
        fmt = "{:>16}{:>20}{:>12}" if isinstance(a, int) else "{:>16.4f}{:>20.4f}{:>+12.4f}"
        print(f"{key:12}" + fmt.format(a, b, b - a))
    gap = abs(peft[headline] - ours[headline])
    if gap > args.tolerance:
        worse = (peft[headline] > ours[headline]) == lower_is_better
        print(f"MISMATCH: {headline} differs by {gap:.4f} (> {args.tolerance}); "
              f"transformers+PEFT scores {'worse' if worse else 'better'}")
        return 1
    print(f"agree: {headline} within {args.tolerance}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
