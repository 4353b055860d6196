"""A plain mean pool of all-MiniLM-L6-v2's Hugging Face weights, for tests/data/minilm_reference.json:
the tokenizer from `tokenizers`, the BERT forward pass written out in numpy (float64). Run by
`python tests/minilm.py --reference` with a torch-bearing interpreter's packages; argv: the model
folder and a JSON list of sentences; prints one JSON list of {text, tokens, vector, ids}."""

import json
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

folder, sentences = sys.argv[1], json.loads(sys.argv[2])
cfg = json.load(open(folder + "/config.json"))
w = {
    k.removeprefix("bert."): v.astype(np.float64) for k, v in load_file(folder + "/model.safetensors").items()
}
tok = Tokenizer.from_file(folder + "/tokenizer.json")
tok.no_padding()
H, heads, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]


def ln(x, p):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * w[p + ".weight"] + w[p + ".bias"]


def lin(x, p):
    return x @ w[p + ".weight"].T + w[p + ".bias"]


def gelu(x):
    from math import erf

    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


out = []
for s in sentences:
    ids = tok.encode(s).ids
    n = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = ln(x, "embeddings.LayerNorm")
    d = H // heads
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (
            lin(x, p + "attention.self." + t).reshape(n, heads, d).transpose(1, 0, 2)
            for t in ("query", "key", "value")
        )
        a = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        ctx = (a @ v).transpose(1, 0, 2).reshape(n, H)
        x = ln(x + lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        x = ln(x + lin(gelu(lin(x, p + "intermediate.dense")), p + "output.dense"), p + "output.LayerNorm")
    out.append({"text": s, "tokens": n, "vector": [round(float(f), 7) for f in x.mean(0)], "ids": ids})
print(json.dumps(out))
