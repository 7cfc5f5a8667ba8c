#!/usr/bin/env python3
"""Train the fast-tier XGBoost model on the synthetic data (dev-time tool).

Writes, under testdata/models/:
  xgb_fraud.json            XGBoost JSON model (binary:logistic, 100 trees, depth 6)
  xgb_fraud.onnx            the same model converted by onnxmltools (input float[N,18])
  xgb_ref.manifest.json     shapes, feature names, training facts
  xgb_ref_features.f32      test rows (little-endian f32, rows x features, NaN = missing)
  xgb_ref_probs.f32         xgboost predict_proba[:, 1] for every test row
  xgb_ref_margins.f32       xgboost output_margin for every test row
  xgb_ref_contribs.f32      xgboost pred_contribs (features + bias) for the first rows

The data comes from the Rust generator (`cargo run --release --example export_synth`),
so the model sees exactly the f32 values the engine passes at serving time.

    pip install xgboost-cpu onnxmltools onnx scikit-learn
    python3 tools/train_xgboost.py
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np
import xgboost as xgb

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "models"


def export(rows, seed, path):
    subprocess.run(
        ["cargo", "run", "--quiet", "--release", "--example", "export_synth", "--",
         str(path), str(rows), str(seed), "--raw"],
        cwd=ROOT, check=True)
    with open(path) as f:
        header = f.readline().strip().split(",")
    data = np.genfromtxt(path, delimiter=",", skip_header=1, dtype=np.float64,
                         missing_values="", filling_values=np.nan)
    x = data[:, :-1].astype(np.float32)
    y = data[:, -1].astype(np.int32)
    return header[:-1], x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-rows", type=int, default=60000)
    ap.add_argument("--test-rows", type=int, default=12000)
    ap.add_argument("--contrib-rows", type=int, default=2000)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--depth", type=int, default=6)
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory() as tmp:
        names, xtr, ytr = export(args.train_rows, 7, pathlib.Path(tmp) / "train.csv")
        _, xte, yte = export(args.test_rows, 42, pathlib.Path(tmp) / "test.csv")
    print(f"train {xtr.shape} fraud {ytr.mean():.4f}; test {xte.shape} fraud {yte.mean():.4f}")

    clf = xgb.XGBClassifier(
        n_estimators=args.trees, max_depth=args.depth, learning_rate=0.1,
        objective="binary:logistic", tree_method="hist", subsample=0.9,
        colsample_bytree=0.9, random_state=0, n_jobs=2, missing=np.nan)
    clf.fit(xtr, ytr)
    booster = clf.get_booster()
    booster.feature_names = None  # positional features, as the Rust loader maps them
    booster.save_model(str(OUT / "xgb_fraud.json"))

    dte = xgb.DMatrix(xte, missing=np.nan)
    probs = clf.predict_proba(xte)[:, 1].astype(np.float32)
    margins = booster.predict(dte, output_margin=True).astype(np.float32)
    contribs = booster.predict(xgb.DMatrix(xte[: args.contrib_rows], missing=np.nan),
                               pred_contribs=True).astype(np.float32)
    xte.astype("<f4").tofile(OUT / "xgb_ref_features.f32")
    probs.astype("<f4").tofile(OUT / "xgb_ref_probs.f32")
    margins.astype("<f4").tofile(OUT / "xgb_ref_margins.f32")
    contribs.astype("<f4").tofile(OUT / "xgb_ref_contribs.f32")

    from onnxmltools import convert_xgboost
    from onnxmltools.convert.common.data_types import FloatTensorType
    onx = convert_xgboost(clf, initial_types=[("input", FloatTensorType([None, xtr.shape[1]]))],
                          target_opset=15)
    (OUT / "xgb_fraud.onnx").write_bytes(onx.SerializeToString())

    try:
        from sklearn.metrics import average_precision_score
        auprc = float(average_precision_score(yte, probs))
    except ImportError:
        auprc = None
    manifest = {
        "features": names,
        "test_rows": int(xte.shape[0]),
        "contrib_rows": int(contribs.shape[0]),
        "missing_share": float(np.isnan(xte).mean()),
        "trees": args.trees,
        "max_depth": args.depth,
        "xgboost": xgb.__version__,
        "test_auprc": auprc,
        "train": {"rows": args.train_rows, "seed": 7},
        "test": {"rows": args.test_rows, "seed": 42},
    }
    (OUT / "xgb_ref.manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps(manifest, indent=2))


if __name__ == "__main__":
    sys.exit(main())
