"""The PyTorch + PEFT side of `shardwork bench train`: one training configuration, one process.

Runs the same work the candle side runs (same shapes, LoRA settings, optimiser and loss), the
way a PEFT user would write it, and prints one JSON line: tokens/s, seconds per step, the first
and last loss and the process's peak resident memory (VmHWM, the counter the candle side reads).

Started by `shardwork bench train` from the interpreter that scripts/bench-train-reference
installs (.tools/torch); not run by CI.
"""

import argparse
import json
import os
import sys
import time


def peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmHWM in /proc/self/status")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workload", required=True, choices=["smollm2", "minilm", "llama1b", "smollm2-score"])
    parser.add_argument("--gguf", help="SmolLM2 GGUF file (smollm2)")
    parser.add_argument("--minilm", help="all-MiniLM-L6-v2 folder (minilm)")
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()

    import torch
    import torch.nn.functional as F
    import peft
    import transformers
    from peft import LoraConfig, get_peft_model

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        # Full f32 products, as candle's (PyTorch's default, stated so that no environment
        # setting turns TF32 on for one side only).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    b, t = args.batch_size, args.seq_len

    if args.workload == "minilm":
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained(
            args.minilm, num_labels=2, dtype=torch.float32
        )
        lora = LoraConfig(
            r=8,
            lora_alpha=16,
            lora_dropout=0.0,
            target_modules=["query", "value"],
            modules_to_save=["classifier"],
            task_type="SEQ_CLS",
        )
        vocab = model.config.vocab_size
    else:
        if args.workload in ("smollm2", "smollm2-score"):
            from transformers import AutoModelForCausalLM

            folder, name = os.path.split(os.path.abspath(args.gguf))
            model = AutoModelForCausalLM.from_pretrained(
                folder, gguf_file=name, dtype=torch.float32
            )
        else:
            from transformers import LlamaConfig, LlamaForCausalLM

            # Llama 3.2 1B's shape; random weights (speed and memory do not depend on them).
            config = LlamaConfig(
                hidden_size=2048,
                intermediate_size=8192,
                num_hidden_layers=16,
                num_attention_heads=32,
                num_key_value_heads=8,
                vocab_size=128256,
                max_position_embeddings=2048,
                rope_theta=500000.0,
                tie_word_embeddings=True,
                torch_dtype="float32",
            )
            model = LlamaForCausalLM(config).to(torch.float32)
        lora = LoraConfig(
            r=8,
            lora_alpha=16,
            lora_dropout=0.0,
            target_modules=["q_proj", "v_proj"],
            task_type="CAUSAL_LM",
        )
        vocab = model.config.vocab_size

    model = get_peft_model(model.to(device), lora)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8)

    if args.workload == "minilm":
        ids = torch.randint(0, vocab, (b, t), generator=generator).to(device)
        mask = torch.ones(b, t, dtype=torch.long, device=device)
        labels = torch.randint(0, 2, (b,), generator=generator).to(device)

        def loss_fn():
            logits = model(input_ids=ids, attention_mask=mask).logits
            return F.cross_entropy(logits, labels)
    else:
        # seq_len + 1 tokens: the model reads the first seq_len, every next token is learned.
        ids = torch.randint(0, vocab, (b, t + 1), generator=generator).to(device)
        inputs, targets = ids[:, :-1], ids[:, 1:]

        def loss_fn():
            logits = model(input_ids=inputs).logits
            return F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    def score() -> float:
        # Held-out scoring, as a transformers + PEFT user evaluates: no autograd, no dropout.
        with torch.inference_mode():
            loss = loss_fn()
        return float(loss)

    def step() -> float:
        loss = loss_fn()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        # float() waits for the GPU, so each step's time is its whole work, as on the candle side.
        return float(loss.detach())

    if args.workload == "smollm2-score":
        model.eval()
        step = score
    losses = [step() for _ in range(args.warmup)]
    start = time.perf_counter()
    for _ in range(args.steps):
        losses.append(step())
    seconds = time.perf_counter() - start
    tokens = b * t * args.steps
    # The f32 matrix-product rate at the configuration's feed-forward shape (tokens x hidden x
    # intermediate), best of five runs of ten, as the candle child measures it.
    cfg = model.get_base_model().config
    x = torch.randn(b * t, cfg.hidden_size, device=device)
    w = torch.randn(cfg.hidden_size, cfg.intermediate_size, device=device)
    torch.mm(x, w)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    best = 0.0
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(10):
            torch.mm(x, w)
        sync()
        best = max(best, 2.0 * x.shape[0] * x.shape[1] * w.shape[1] * 10 / (time.perf_counter() - started))
    print(
        json.dumps(
            {
                "stack": f"PyTorch {torch.__version__} + PEFT {peft.__version__} "
                f"(transformers {transformers.__version__})",
                "config": args.workload,
                "steps": args.steps,
                "seconds_per_step": seconds / args.steps,
                "tokens_per_sec": tokens / seconds,
                "first_loss": losses[0],
                "last_loss": losses[-1],
                "peak_rss_mb": peak_rss_mb(),
                "peak_gpu_mb": torch.cuda.max_memory_allocated(device) / 2**20
                if device.type == "cuda"
                else None,
                "matmul_shape": [x.shape[0], x.shape[1], w.shape[1]],
                "matmul_gflops": best / 1e9,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
