"""Independent check of the LoRA forward pass, using only numpy.

Reads the base weights from the model's safetensors file and the adapter from the PEFT files
the Rust trainer wrote, computes y = x W^T + b + (alpha / r) (x A^T) B^T for each module, and
compares with the outputs candle produced for the same inputs. Prints one JSON object:
{"modules": n, "max_rel_err": e}. safetensors is parsed by hand (8-byte little-endian header
length, JSON header, raw little-endian data) so nothing from the Rust side is reused.

usage: lora_forward.py MODEL.safetensors ADAPTER_DIR CASES_DIR
CASES_DIR holds, per module i, module_i.txt (module path; checkpoint key prefix on line 2),
x_i.npy (inputs) and y_i.npy (candle outputs).
"""
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        dtype = np.dtype(DTYPES[meta["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(meta["shape"]).astype(np.float64)
    return out


def main():
    model_path, adapter_dir, cases = sys.argv[1:4]
    base = read_safetensors(model_path)
    adapter = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    scale = cfg["lora_alpha"] / cfg["r"]
    worst = 0.0
    i = 0
    while os.path.exists(os.path.join(cases, f"module_{i}.txt")):
        with open(os.path.join(cases, f"module_{i}.txt")) as f:
            module, ckpt = f.read().split("\n")[:2]
        x = np.load(os.path.join(cases, f"x_{i}.npy")).astype(np.float64)
        y_candle = np.load(os.path.join(cases, f"y_{i}.npy")).astype(np.float64)
        w = base[ckpt + ".weight"]
        b = base[ckpt + ".bias"]
        a = adapter[f"base_model.model.{module}.lora_A.weight"]
        bb = adapter[f"base_model.model.{module}.lora_B.weight"]
        y = x @ w.T + b + scale * (x @ a.T) @ bb.T
        rel = np.abs(y - y_candle).max() / np.abs(y).max()
        worst = max(worst, float(rel))
        i += 1
    print(json.dumps({"modules": i, "max_rel_err": worst}))


main()
