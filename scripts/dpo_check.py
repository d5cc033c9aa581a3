"""Scores one batch of preference pairs twice — with `shardwork eval --dpo-beta` and with Hugging
Face transformers + PEFT as TRL's DPOTrainer computes it — and prints both side by side.

TRL's formula (DPOTrainer.dpo_loss, loss_type "sigmoid"): each answer's log-probability is the
sum of log p(token) over the answer's tokens after the prompt; with the policy's (pc, pr) and
the reference's (rc, rr),

    logits          = (pc - pr) - (rc - rr)
    loss            = -logsigmoid(beta * logits)
    chosen_reward   = beta * (pc - rc)
    rejected_reward = beta * (pr - rr)

The policy is the base model with the adapter loaded by PEFT; the reference is the same model
with the reference adapter loaded beside it (`load_adapter(..., adapter_name="reference")`,
TRL's `ref_adapter_name`), or with the adapter switched off (`disable_adapter()`, TRL's
default for a PEFT model) when there is none. The answer's tokens are the ones Shardwork learns:
a string prompt is followed by the answer and the end-of-sequence token as written; turn lists
are laid out by the model's chat template, the answer being the last assistant turn.

Exit 0: every pair's loss and rewards agree within --tolerance (default 1e-4); 1: they do not;
2: the check could not be made.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import warnings
from pathlib import Path

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging


def fail(message):
    print(f"dpo-check: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="a Llama-family folder or .gguf file")
    p.add_argument("--adapter", type=Path, required=True, help="the policy's PEFT adapter folder")
    p.add_argument("--reference", type=Path, help="the reference policy's adapter (the base without)")
    p.add_argument("--data", type=Path, required=True, help="preference pairs, JSONL")
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--max-seq-len", type=int, default=128)
    p.add_argument("--tolerance", type=float, default=1e-4)
    p.add_argument("--shardwork", required=True, help="the shardwork binary")
    return p.parse_args()


def shardwork_scores(args):
    cmd = [args.shardwork, "eval", "--model", str(args.model), "--data", str(args.data),
           "--adapter", str(args.adapter), "--dpo-beta", str(args.beta),
           "--max-seq-len", str(args.max_seq_len), "--json"]
    if args.reference:
        cmd += ["--reference", str(args.reference)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"`shardwork eval` failed:\n{out.stderr}")
    return json.loads(out.stdout)


def answer_text(tokenizer, prompt, answer, eos_text):
    """The text of one answer after its prompt and the character range of the answer."""
    if isinstance(prompt, str):
        text = f"{prompt}{answer}{eos_text}"
        return text, (len(prompt), len(text))
    messages = prompt + [{"role": "assistant", "content": answer}]
    before = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    if not full.startswith(before):
        fail("the chat template does not render the answer by appending")
    return full, (len(before), len(full))


def pairs_of(path):
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if isinstance(r.get("chosen"), str):
            yield r["prompt"], r["chosen"], r["rejected"]
        elif "prompt" in r:
            yield r["prompt"], r["chosen"][0]["content"], r["rejected"][0]["content"]
        else:
            yield r["chosen"][:-1], r["chosen"][-1]["content"], r["rejected"][-1]["content"]


def encode(tokenizer, prompt, answer, eos_text, max_len):
    text, (a, b) = answer_text(tokenizer, prompt, answer, eos_text)
    enc = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
    ids, offsets = enc["input_ids"], enc["offset_mapping"]
    learn = [e > s and a <= s < b for s, e in offsets]
    return ids[:max_len], learn[:max_len]


def logp(model, ids, learn):
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids[:-1]])).logits[0].float()
    logps = torch.log_softmax(logits, dim=-1)
    return sum(logps[t, ids[t + 1]].item() for t in range(len(ids) - 1) if learn[t + 1])


def main():
    args = parse_args()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore")
    if args.model.is_dir():
        source, extra = str(args.model), {}
    else:
        source, extra = str(args.model.parent), {"gguf_file": args.model.name}
    tokenizer = AutoTokenizer.from_pretrained(source, **extra)
    base = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32, **extra)
    model = PeftModel.from_pretrained(base, str(args.adapter), adapter_name="policy")
    if args.reference:
        model.load_adapter(str(args.reference), adapter_name="reference")
    model.eval()
    eos_text = tokenizer.convert_ids_to_tokens(tokenizer.eos_token_id)
    reference_rows = []
    for prompt, chosen, rejected in pairs_of(args.data):
        c = encode(tokenizer, prompt, chosen, eos_text, args.max_seq_len)
        r = encode(tokenizer, prompt, rejected, eos_text, args.max_seq_len)
        if not (any(c[1][1:]) and any(r[1][1:])):
            continue
        model.set_adapter("policy")
        pc, pr = logp(model, *c), logp(model, *r)
        if args.reference:
            model.set_adapter("reference")
            rc, rr = logp(model, *c), logp(model, *r)
        else:
            with model.disable_adapter():
                rc, rr = logp(model, *c), logp(model, *r)
        logits = (pc - pr) - (rc - rr)
        loss = -torch.nn.functional.logsigmoid(torch.tensor(args.beta * logits, dtype=torch.float64)).item()
        reference_rows.append({"loss": loss, "chosen_reward": args.beta * (pc - rc),
                               "rejected_reward": args.beta * (pr - rr)})
    ours = shardwork_scores(args)["scores"]
    if len(ours) != len(reference_rows):
        fail(f"shardwork scored {len(ours)} pairs, transformers {len(reference_rows)}")
    print(f"{'pair':>5} {'field':>16} {'shardwork':>12} {'TRL formula':>12} {'difference':>11}")
    worst = 0.0
    for i, (a, b) in enumerate(zip(ours, reference_rows)):
        for field in ("loss", "chosen_reward", "rejected_reward"):
            d = abs(a[field] - b[field])
            worst = max(worst, d)
            print(f"{i:>5} {field:>16} {a[field]:>12.6f} {b[field]:>12.6f} {d:>11.2e}")
    mean = lambda rows, f: sum(r[f] for r in rows) / len(rows)
    print(f"mean loss: shardwork {mean(ours, 'loss'):.6f}, TRL formula {mean(reference_rows, 'loss'):.6f}; "
          f"largest difference {worst:.2e} (tolerance {args.tolerance:g})")
    sys.exit(0 if worst <= args.tolerance else 1)


if __name__ == "__main__":
    main()
