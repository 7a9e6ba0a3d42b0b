#!/usr/bin/env python3
"""Embedding throughput of all-MiniLM-L6-v2 under onnxruntime on the CPU, as
a yardstick for the Rust embedder.

    /tmp/minilm-ref/bin/python scripts/reference/throughput.py TEXTS.json --threads N \
        [--onnx FILE] [--batch 8] [--model-dir DIR] [--vectors OUT.json]

TEXTS.json is a JSON list of strings. They are tokenised with the model's
tokenizer.json as minilm_reference.load_tokenizer does (truncation at 256
word pieces including [CLS]/[SEP], no padding), sorted by length, and run in
batches of --batch texts padded to the batch's longest; last_hidden_state is
mean-pooled over the attention mask and L2-normalised (float32).
Session: intra_op_num_threads=N, inter_op_num_threads=1, all graph
optimisations, CPUExecutionProvider. One warm-up batch, then the whole set is
timed: wall seconds and this process's CPU seconds. Prints one JSON line:
{"texts", "wall_s", "cpu_s", "chunks_per_s", "cpu_ms_per_chunk", "threads", "batch"}.
--vectors writes the vectors, in the order of TEXTS.json, as a list of lists.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minilm_reference import default_model_dir, load_tokenizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("texts", type=Path, help="JSON list of strings")
    ap.add_argument("--threads", type=int, required=True, help="onnxruntime intra-op threads")
    ap.add_argument("--onnx", type=Path, default=Path("/tmp/minilm-ref/all-minilm-l6-v2.onnx"),
                    help="built by minilm_onnx.py (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--model-dir", type=Path, default=default_model_dir())
    ap.add_argument("--vectors", type=Path, help="write the vectors here (JSON list of lists)")
    args = ap.parse_args()
    if args.threads < 1 or args.batch < 1:
        ap.error("--threads and --batch must be at least 1")

    texts = json.loads(args.texts.read_text(encoding="utf-8"))
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        ap.error(f"{args.texts}: expected a non-empty JSON list of strings")

    tok = load_tokenizer(args.model_dir)
    encs = tok.encode_batch(texts)
    order = sorted(range(len(texts)), key=lambda i: len(encs[i].ids))
    batches = []
    for start in range(0, len(order), args.batch):
        idx = order[start : start + args.batch]
        longest = max(len(encs[i].ids) for i in idx)
        feed = {name: np.zeros((len(idx), longest), dtype=np.int64)
                for name in ("input_ids", "attention_mask", "token_type_ids")}
        for row, i in enumerate(idx):
            e, n = encs[i], len(encs[i].ids)
            feed["input_ids"][row, :n] = e.ids
            feed["attention_mask"][row, :n] = e.attention_mask
            feed["token_type_ids"][row, :n] = e.type_ids
        batches.append((idx, feed))

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(args.onnx), opts, providers=["CPUExecutionProvider"])

    def embed(feed):
        hidden = sess.run(["last_hidden_state"], feed)[0]                 # [b, s, h] float32
        mask = feed["attention_mask"].astype(np.float32)[:, :, None]
        v = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    embed(batches[-1][1])  # warm-up, on a batch of the longest texts

    vectors = [None] * len(texts)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for idx, feed in batches:
        for i, v in zip(idx, embed(feed)):
            vectors[i] = v
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0

    if args.vectors:
        args.vectors.parent.mkdir(parents=True, exist_ok=True)
        args.vectors.write_text(json.dumps([[float(x) for x in v] for v in vectors]), encoding="utf-8")
    n = len(texts)
    print(json.dumps({
        "texts": n,
        "wall_s": round(wall, 4),
        "cpu_s": round(cpu, 4),
        "chunks_per_s": round(n / wall, 2),
        "cpu_ms_per_chunk": round(1000 * cpu / n, 3),
        "threads": args.threads,
        "batch": args.batch,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
