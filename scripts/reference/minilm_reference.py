#!/usr/bin/env python3
"""Reference embeddings of all-MiniLM-L6-v2, computed independently of any
ML framework: a float64 numpy forward pass written directly from the
model's safetensors weights (the file format parsed here), tokenised with the
`tokenizers` package from the model's own tokenizer.json.

    scripts/fetch-model.sh
    /tmp/minilm-ref/bin/python scripts/reference/minilm_reference.py \
        [--model-dir DIR] [--out FILE] [--onnx MODEL.onnx]

writes server/tests/fixtures/minilm_reference.json and prints sanity checks:
cosine similarities of paraphrase pairs against unrelated pairs and, with
--onnx, agreement with an ONNX export of the same model run by onnxruntime.

What it computes is what sentence-transformers computes for this model:
BERT (embeddings + LayerNorm, 6 post-LayerNorm encoder layers, 12 heads,
exact erf GELU), mean pooling over the attention mask, L2 normalisation,
inputs truncated to 256 word pieces including [CLS] and [SEP].
"""

import argparse
import json
import math
import os
import struct
import sys
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
MAX_TOKENS = 256

# --- safetensors -------------------------------------------------------------
# Layout: u64 little-endian header size N, N bytes of JSON
# {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
# then the raw little-endian tensor data, offsets relative to its start.
_DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2",
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?",
}


def load_safetensors(path):
    data = Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _DTYPES:
            raise ValueError(f"{name}: unsupported dtype {info['dtype']}")
        dtype = np.dtype(_DTYPES[info["dtype"]])
        begin, end = info["data_offsets"]
        count = int(np.prod(info["shape"], dtype=np.int64))
        if end - begin != count * dtype.itemsize or base + end > len(data):
            raise ValueError(f"{name}: data_offsets {begin}..{end} do not fit shape {info['shape']}")
        tensors[name] = np.frombuffer(data, dtype=dtype, count=count, offset=base + begin).reshape(info["shape"])
    return tensors


# --- the model ---------------------------------------------------------------
_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    """BERT's GELU, the exact form: x * Phi(x)."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


class MiniLM:
    def __init__(self, model_dir):
        model_dir = Path(model_dir)
        cfg = json.loads((model_dir / "config.json").read_text())
        if cfg.get("hidden_act") != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("expected a BERT with exact GELU and absolute positions")
        self.eps = float(cfg["layer_norm_eps"])
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.hidden = int(cfg["hidden_size"])
        raw = load_safetensors(model_dir / "model.safetensors")
        self.w = {}
        for name, t in raw.items():
            if t.dtype.kind == "f":
                name = name[len("bert."):] if name.startswith("bert.") else name
                name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
                self.w[name] = t.astype(np.float64)

    def _ln(self, x, prefix):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + self.eps) * self.w[prefix + ".weight"] + self.w[prefix + ".bias"]

    def _dense(self, x, prefix):
        return x @ self.w[prefix + ".weight"].T + self.w[prefix + ".bias"]

    def hidden_states(self, ids, type_ids, mask):
        """Last hidden state (tokens x hidden) of one sequence."""
        ids, type_ids = np.asarray(ids), np.asarray(type_ids)
        mask = np.asarray(mask, dtype=np.float64)
        n = len(ids)
        x = (
            self.w["embeddings.word_embeddings.weight"][ids]
            + self.w["embeddings.position_embeddings.weight"][np.arange(n)]
            + self.w["embeddings.token_type_embeddings.weight"][type_ids]
        )
        x = self._ln(x, "embeddings.LayerNorm")
        h, d = self.heads, self.hidden // self.heads
        key_bias = (1.0 - mask)[None, None, :] * -1e9  # masked keys get no weight
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q = self._dense(x, p + "attention.self.query").reshape(n, h, d).transpose(1, 0, 2)
            k = self._dense(x, p + "attention.self.key").reshape(n, h, d).transpose(1, 0, 2)
            v = self._dense(x, p + "attention.self.value").reshape(n, h, d).transpose(1, 0, 2)
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(d) + key_bias
            scores -= scores.max(-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(-1, keepdims=True)
            ctx = (probs @ v).transpose(1, 0, 2).reshape(n, self.hidden)
            x = self._ln(x + self._dense(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            inter = gelu(self._dense(x, p + "intermediate.dense"))
            x = self._ln(x + self._dense(inter, p + "output.dense"), p + "output.LayerNorm")
        return x


def pool(hidden, mask):
    """Mean over the tokens the attention mask keeps, then L2 normalisation."""
    m = np.asarray(mask, dtype=np.float64)[:, None]
    v = (hidden * m).sum(0) / max(m.sum(), 1e-9)
    return v / max(np.linalg.norm(v), 1e-12)


def default_model_dir():
    """Where scripts/fetch-model.sh puts the model: $DOCFLOW_MODEL_DIR (relative
    to the repository) or models/, then all-minilm-l6-v2."""
    models = Path(os.environ.get("DOCFLOW_MODEL_DIR", ROOT / "models"))
    if not models.is_absolute():
        models = ROOT / models
    return models / "all-minilm-l6-v2"


def load_tokenizer(model_dir):
    tok = Tokenizer.from_file(str(Path(model_dir) / "tokenizer.json"))
    tok.enable_truncation(max_length=MAX_TOKENS)  # the file says 128
    tok.no_padding()  # the file pads to a fixed 128
    return tok


# --- the texts ---------------------------------------------------------------
LONG_1 = (
    "Document ingestion pipelines take files of many kinds, such as PDF reports, scanned letters, "
    "spreadsheets, slide decks and plain text notes, and turn them into pieces that a search system can use. "
    "The first step is parsing: the raw bytes are opened by a format-specific reader that extracts the text, "
    "the headings, the tables and sometimes the images, while keeping track of page numbers so that later "
    "answers can point back to where a sentence came from. Parsing is the step most likely to fail, because "
    "real files are often damaged, encrypted, or produced by unusual software, so a careful system runs each "
    "parser in an isolated child process with limits on memory and time. The second step is chunking: the "
    "extracted text is split into overlapping windows of a few hundred words, trying to respect paragraph and "
    "sentence boundaries, because a chunk that ends in the middle of a thought embeds poorly. The third step "
    "is embedding: each chunk is sent to a model that maps it to a vector of a few hundred numbers, chosen so "
    "that texts with similar meaning end up close together. Models have a maximum input length, measured in "
    "word pieces rather than words, and anything beyond it is silently cut off, which is why the chunk size "
    "must be chosen with the tokenizer in mind. The fourth step is storage: the vectors are written to a "
    "database with an index for nearest-neighbour search, next to the original text and its metadata, so "
    "that a query can be embedded with the same model and compared against every stored chunk in "
    "milliseconds. Each of these steps can be retried independently, and a job that keeps failing is moved "
    "to a dead-letter queue where an operator can inspect it, fix the cause, and send it through again."
)
LONG_2 = (
    "Quarterly figures, region by region: North 2019 Q1 1,204.50; Q2 1,318.75; Q3 1,402.10; Q4 1,587.95. "
    "South 2019 Q1 987.20; Q2 1,045.60; Q3 1,110.35; Q4 1,236.80. East 2019 Q1 2,301.15; Q2 2,415.90; "
    "Q3 2,498.40; Q4 2,612.05. West 2019 Q1 1,876.30; Q2 1,934.85; Q3 2,017.60; Q4 2,145.25. "
    "North 2020 Q1 1,150.10; Q2 903.45; Q3 1,212.70; Q4 1,498.35. South 2020 Q1 955.80; Q2 741.25; "
    "Q3 1,020.90; Q4 1,187.40. East 2020 Q1 2,256.65; Q2 1,874.30; Q3 2,390.15; Q4 2,578.90. "
    "West 2020 Q1 1,801.75; Q2 1,512.20; Q3 1,958.45; Q4 2,102.60. Totals: 2019 26,525.35 and 2020 24,104.95, "
    "a change of -9.13%. Notes: figures in thousands of euros (€), unaudited; see appendix B-7, rows 14-38, "
    "and the footnotes marked with *, †, ‡ for adjustments made on 2021-02-28 by the finance team in Zürich."
)
TEXTS = [
    "Hello world",
    "OK",
    "How often should I change my car's engine oil?",
    "Motor oil should be replaced every 10,000 km",
    "The recipe needs two eggs",
    "How do I reset my password?",
    "I forgot my login credentials and need to set a new password.",
    "The train to Berlin leaves at noon.",
    "A man is playing a guitar.",
    "Someone is performing music on a stringed instrument.",
    "What is the capital of France?",
    "Paris is the capital and largest city of France.",
    "crème brûlée",
    "La crème brûlée était délicieuse, avec une croûte de sucre caramélisé.",
    "Zoë's naïve résumé mentioned the café's façade in São Paulo and Kraków.",
    "Invoice #4821 totals $1,299.99, due 2024-03-15.",
    "3.14159 2.71828 1.41421 6.02214076e23 42",
    "Quarterly revenue grew 12.5% year over year to €3.4 million.",
    "WARNING!!! The server at 127.0.0.1:5432 refused the connection (errno 111).",
    'fn main() { println!("Hello, world!"); }',
    "Line one.\n\nLine two,\tafter a tab.",
    "Great job 👍🎉",
    "東京は日本の首都です。",
    "PostgreSQL stores each document chunk next to its embedding, and an HNSW index answers "
    "nearest-neighbour queries. When a worker crashes halfway through a job, the message is redelivered "
    "and the chunk is embedded again, so every write must be idempotent.",
    "The weather was unusually warm for late October: the afternoon reached 24 degrees, people sat outside "
    "the cafés along the river, and the forecast promised two more days of sunshine before the rain.",
    LONG_1,
    LONG_2,
]
# (anchor, paraphrase, unrelated) index triples for the sanity check
TRIPLES = [(2, 3, 4), (5, 6, 7), (8, 9, 4), (10, 11, 7)]
# The sentence-transformers quickstart's example for this model and the
# similarities it prints (torch, float32): pairs (0,1), (0,2), (1,2).
PUBLISHED = (
    ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."],
    [0.6660, 0.1046, 0.1411],
)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", type=Path, default=default_model_dir())
    ap.add_argument("--out", type=Path, default=ROOT / "server/tests/fixtures/minilm_reference.json")
    ap.add_argument("--onnx", type=Path, help="an ONNX export of the model (inputs input_ids, attention_mask, "
                    "token_type_ids; output last_hidden_state) to compare against, with onnxruntime")
    args = ap.parse_args()

    tok = load_tokenizer(args.model_dir)
    model = MiniLM(args.model_dir)
    items, vecs, encs = [], [], []
    for text in TEXTS:
        enc = tok.encode(text)
        vec = pool(model.hidden_states(enc.ids, enc.type_ids, enc.attention_mask), enc.attention_mask)
        encs.append(enc)
        vecs.append(vec)
        items.append({"text": text, "tokens": len(enc.ids), "vector": [round(float(x), 7) for x in vec]})

    args.out.parent.mkdir(parents=True, exist_ok=True)
    head = {
        "model": "all-minilm-l6-v2",
        "dimensions": model.hidden,
        "max_tokens": MAX_TOKENS,
        "source": "scripts/reference/minilm_reference.py, float64 numpy",
    }
    body = ",\n".join("  " + json.dumps(it, ensure_ascii=False) for it in items)
    text = json.dumps(head, ensure_ascii=False)[:-1] + ',\n "items": [\n' + body + "\n ]\n}\n"
    json.loads(text)  # well-formed
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.out)
    print(f"wrote {len(items)} items to {args.out}")

    untruncated = Tokenizer.from_file(str(args.model_dir / "tokenizer.json"))
    untruncated.no_truncation()
    untruncated.no_padding()
    truncated = 0
    for it in items:
        full = len(untruncated.encode(it["text"]).ids)
        if full > MAX_TOKENS:
            truncated += 1
            print(f"  truncated: {full} -> {it['tokens']} word pieces: {it['text'][:50]!r}...")
    if truncated < 2:
        print("FAILED: fewer than two texts exercise truncation", file=sys.stderr)
        return 1

    print("sanity (cosine): anchor vs paraphrase | anchor vs unrelated")
    ok = True
    for a, p, u in TRIPLES:
        cp, cu = float(vecs[a] @ vecs[p]), float(vecs[a] @ vecs[u])
        ok &= cp > cu + 0.2
        print(f"  {cp:.4f} | {cu:.4f}  {TEXTS[a]!r}")
    if not ok:
        print("FAILED: a paraphrase does not clearly beat an unrelated text", file=sys.stderr)
        return 1

    pv = [pool(model.hidden_states(e.ids, e.type_ids, e.attention_mask), e.attention_mask)
          for e in (tok.encode(t) for t in PUBLISHED[0])]
    ours = [float(pv[0] @ pv[1]), float(pv[0] @ pv[2]), float(pv[1] @ pv[2])]
    print("sentence-transformers quickstart similarities, published | here: "
          + ", ".join(f"{a:.4f} | {b:.4f}" for a, b in zip(PUBLISHED[1], ours)))
    if any(abs(a - b) > 6e-4 for a, b in zip(PUBLISHED[1], ours)):
        print("FAILED: the published similarities are not reproduced", file=sys.stderr)
        return 1

    if args.onnx:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(str(args.onnx), opts, providers=["CPUExecutionProvider"])
        cos = []
        for enc, vec in zip(encs, vecs):
            feed = {
                "input_ids": np.array([enc.ids], dtype=np.int64),
                "attention_mask": np.array([enc.attention_mask], dtype=np.int64),
                "token_type_ids": np.array([enc.type_ids], dtype=np.int64),
            }
            hidden = sess.run(["last_hidden_state"], feed)[0][0].astype(np.float64)
            cos.append(float(pool(hidden, enc.attention_mask) @ vec))
        print(f"onnx cross-check ({args.onnx.name}): cosine min {min(cos):.5f}, mean {np.mean(cos):.5f}, "
              f"max {max(cos):.5f} over {len(cos)} texts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
