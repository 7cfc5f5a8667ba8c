#!/usr/bin/env python3
"""Train the sequence-tier GRU model on the synthetic data (dev-time tool).

Writes, under testdata/models/:
  seq_gru.onnx              GRU over the card's last N transactions + MLP of the flat
                            features; inputs seq float[B,N,9], mask float[B,N],
                            x float[B,18] (NaN = missing); output probabilities float[B,1]
  seq_ref.manifest.json     shapes, names, field order, metrics (GRU and XGBoost on the same
                            rows), versions, checks
  seq_ref_seq.f32           R reference test rows' sequences (little-endian f32, R x 32 x 9)
  seq_ref_mask.f32          their masks (R x 32, 1 = real row, padding after the real rows)
  seq_ref_x.f32             their flat features (R x 18, NaN = missing)
  seq_ref_probs.f32         PyTorch (eval mode) probabilities of those rows (R)

The data comes from the Rust generator (`cargo run --release --example export_synth --
OUT ROWS SEED --raw --sequences`): the features and the `card_seq` sequence of every row
exactly as the engine's entity state computes them. Before training, the test set's
sequences are rebuilt from the raw rows with pandas/numpy alone and must equal the
exported tensor bit for bit. The ONNX file is checked with onnx.checker and ONNX Runtime
must reproduce PyTorch (at N = 32 and at a truncated N = 16).

    pip install torch numpy pandas onnx onnxruntime xgboost-cpu scikit-learn
    python3 tools/train_sequence.py
(`--exporter PATH` runs a prebuilt export_synth binary instead of `cargo run`.)
"""
import argparse
import json
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "models"

SEQ_FIELDS = ["amount", "dt", "mcc", "channel", "country", "is_foreign", "device_new",
              "hour", "txn_count_1h"]
SEQ_N = 32
SEQ_MISSING = -1.0
# Vocabularies: ids are 1-based (0 = unknown); embedding tables hold ids 0..V.
VOCAB = {"mcc": 14, "channel": 5, "country": 16, "currency": 9}
EXPORT_CMD = ["cargo", "run", "--quiet", "--release", "--example", "export_synth", "--"]


# ---------------------------------------------------------------- data

def export(exporter, rows, seed, path):
    subprocess.run(exporter + [str(path), str(rows), str(seed), "--raw", "--sequences"],
                   cwd=ROOT, check=True)
    df = pd.read_csv(path)  # empty = NaN; values are f32 printed shortest round-trip
    names = list(df.columns[:-1])
    x64 = df[names].to_numpy(np.float64)
    x = x64.astype(np.float32)
    check_no_double_rounding(x64, x)
    y = df["is_fraud"].to_numpy(np.int32)
    n = len(df)
    seq = np.fromfile(f"{path}.seq.f32", dtype="<f4")
    assert seq.size == n * SEQ_N * len(SEQ_FIELDS), (seq.size, n)
    seq = seq.reshape(n, SEQ_N, len(SEQ_FIELDS))
    lens = np.fromfile(f"{path}.seqlen.u32", dtype="<u4")
    assert lens.shape == (n,), lens.shape
    keys = pd.read_csv(f"{path}.keys.csv", dtype={"entity": np.int64, "timestamp_ms": np.int64})
    assert len(keys) == n
    return dict(names=names, x=x, y=y, seq=seq, lens=lens, keys=keys)


def check_no_double_rounding(x64, x32):
    """Decimal -> f64 -> f32 could in theory round twice wrongly if the f64 lands exactly on
    the midpoint of two f32s; count such values (must be 0 for an exact cross-check)."""
    ok = np.isfinite(x64)
    back = x32.astype(np.float64)
    off = ok & (back != x64)
    if off.any():
        nb = np.nextafter(x32[off], np.where(x64[off] > back[off], np.inf, -np.inf).astype(np.float32))
        mid = (back[off] + nb.astype(np.float64)) / 2
        assert not (mid == x64[off]).any(), "a CSV value parsed onto an f32 midpoint"


def build_sequences(d):
    """The reference: every row's last SEQ_N transactions of its card (event time, ties in
    arrival order) up to and including itself, from the flat CSV and keys with numpy alone."""
    names, x, keys = d["names"], d["x"], d["keys"]
    n = len(x)
    ent = keys["entity"].to_numpy()
    ts = keys["timestamp_ms"].to_numpy()
    order = np.lexsort((np.arange(n), ts, ent))  # card, then event time, then arrival
    ent_s, ts_s = ent[order], ts[order]
    new_group = np.r_[True, ent_s[1:] != ent_s[:-1]]
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
    pos = np.arange(n) - group_start  # position within the card's history

    # per-transaction fields (a row's fields do not depend on which window holds it)
    col = {f: names.index(f) for f in SEQ_FIELDS if f != "dt"}
    fields = np.empty((n, len(SEQ_FIELDS)), np.float32)
    for j, f in enumerate(SEQ_FIELDS):
        if f == "dt":
            gap = np.zeros(n, np.int64)
            gap[1:] = ts_s[1:] - ts_s[:-1]
            gap[new_group] = 0
            dt_sorted = gap.astype(np.float32) / np.float32(1000.0)  # (ms as f32) / 1000 in f32
            dt = np.empty(n, np.float32)
            dt[order] = dt_sorted
            fields[:, j] = dt
        else:
            fields[:, j] = x[:, col[f]]
    fields[np.isnan(fields)] = np.float32(SEQ_MISSING)

    length_s = np.minimum(pos + 1, SEQ_N)
    first_s = np.arange(n) - length_s + 1
    idx_s = first_s[:, None] + np.arange(SEQ_N)[None, :]
    valid_s = np.arange(SEQ_N)[None, :] < length_s[:, None]
    rows_s = order[np.where(valid_s, idx_s, 0)]  # sorted position -> original row
    seq_s = np.where(valid_s[:, :, None], fields[rows_s], np.float32(0.0)).astype(np.float32)
    seq = np.empty_like(seq_s)
    seq[order] = seq_s
    lens = np.empty(n, np.uint32)
    lens[order] = length_s.astype(np.uint32)
    return seq, lens


def cross_check(d):
    ref_seq, ref_len = build_sequences(d)
    ts = d["keys"]["timestamp_ms"].to_numpy()
    in_event_order = bool((np.diff(ts) >= 0).all())
    len_bad = np.flatnonzero(ref_len != d["lens"])
    a = ref_seq.view(np.uint32)
    b = d["seq"].view(np.uint32)
    diff = a != b
    rows_bad = np.flatnonzero(diff.any(axis=(1, 2)))
    if len(len_bad) or len(rows_bad):
        lines = [f"pandas cross-check FAILED: {len(len_bad)} lengths and {len(rows_bad)} rows differ "
                 f"(rows in event order: {in_event_order})"]
        for j, f in enumerate(SEQ_FIELDS):
            c = int(diff[:, :, j].sum())
            if c:
                r, t = np.argwhere(diff[:, :, j])[0]
                lines.append(f"  field {f}: {c} values differ; first row {r} slot {t}: "
                             f"exported {d['seq'][r, t, j]!r} reference {ref_seq[r, t, j]!r}")
        for r in len_bad[:5]:
            lines.append(f"  row {r}: exported length {d['lens'][r]} reference {ref_len[r]}")
        raise SystemExit("\n".join(lines))
    return {"rows": int(len(ref_len)), "values": int(ref_seq.size),
            "rows_in_event_order": in_event_order}


def masks(lens, n=SEQ_N):
    return (np.arange(n)[None, :] < lens[:, None]).astype(np.float32)


# ---------------------------------------------------------------- model

def make_model(torch, nn, names, hidden=32, emb=8):
    """The model class for schema `names`. Kept to few ONNX nodes (batch-1 latency is per
    node): the numeric transforms are per-column constant vectors over whole tensors, and
    the categorical ids of a tensor share one embedding table (column offsets) whose rows
    are summed (a sum of embeddings feeds a linear layer as a concatenation would)."""
    fi = {f: i for i, f in enumerate(names)}
    k = len(names)
    # one table for every categorical column: [0 unknown/pad, currency 1..9, mcc 1..14, ...]
    cats = ["currency", "mcc", "country", "channel"]
    base, off = 0, {}
    for c in cats:
        off[c] = base
        base += VOCAB[c] + 1
    table_rows = base
    seq_cat = ["mcc", "channel", "country"]  # seq columns 2..4
    x_cat = names[fi["currency"]:fi["channel"] + 1]
    assert x_cat == ["currency", "mcc", "country", "channel"], x_cat  # x columns 1..4

    def onehot(cols, width, value=1.0):
        v = np.zeros(width, np.float32)
        v[cols] = value
        return v

    seq_log = onehot([SEQ_FIELDS.index(f) for f in ("amount", "dt", "txn_count_1h")], 9)
    seq_lin = onehot([SEQ_FIELDS.index(f) for f in ("is_foreign", "device_new")], 9)
    seq_lin[SEQ_FIELDS.index("hour")] = 1.0 / 24.0
    cat_x = [fi[c] for c in cats]
    flag_x = [fi["is_foreign"], fi["device_new"], fi["high_risk_country"]]
    x_lin = onehot(flag_x, k)
    x_lin[fi["hour"]] = 1.0 / 24.0
    x_log = onehot([i for i in range(k) if i not in cat_x + flag_x + [fi["hour"]]], k)

    class SeqModel(nn.Module):
        def __init__(self):
            super().__init__()
            t = torch.from_numpy
            # value = log1p(relu(v)) * a_log + v * a_lin + c  (normalisation folded in later)
            self.register_buffer("seq_a_log", t(seq_log.copy()))
            self.register_buffer("seq_a_lin", t(seq_lin.copy()))
            self.register_buffer("seq_c", torch.zeros(9))
            self.register_buffer("x_a_log", t(x_log.copy()))
            self.register_buffer("x_a_lin", t(x_lin.copy()))
            self.register_buffer("x_c", torch.zeros(k))
            self.register_buffer("seq_id_max", t(np.array([VOCAB[c] for c in seq_cat], np.float32)))
            self.register_buffer("seq_id_off", t(np.array([off[c] for c in seq_cat], np.float32)))
            self.register_buffer("x_id_max", t(np.array([VOCAB[c] for c in x_cat], np.float32)))
            self.register_buffer("x_id_off", t(np.array([off[c] for c in x_cat], np.float32)))
            self.emb = nn.Embedding(table_rows, emb)
            self.gru = nn.GRU(9 + emb, hidden, batch_first=True)
            self.att = nn.Linear(hidden, 1)
            self.flat = nn.Sequential(nn.Linear(2 * k + emb, 32), nn.ReLU(),
                                      nn.Linear(32, 32), nn.ReLU())
            self.head = nn.Sequential(nn.Linear(2 * hidden + 32, 32), nn.ReLU(), nn.Linear(32, 1))

        def ids(self, v, vmax, voff):  # float ids -> rows of the shared table (clamped)
            return (torch.minimum(torch.clamp(v, min=0.0), vmax) + voff).long()

        def seq_values(self, seq):
            return torch.log1p(torch.relu(seq)) * self.seq_a_log + seq * self.seq_a_lin

        def x_values(self, x0):
            return torch.log1p(torch.relu(x0)) * self.x_a_log + x0 * self.x_a_lin

        def forward(self, seq, mask, x):
            e = self.emb(self.ids(seq[:, :, 2:5], self.seq_id_max, self.seq_id_off)).sum(dim=2)
            h, _ = self.gru(torch.cat([self.seq_values(seq) + self.seq_c, e], dim=2))  # [B,N,H]
            score = self.att(h).squeeze(2) + (mask - 1.0) * 1e9    # [B, N], no -inf
            w = torch.softmax(score, dim=1)
            pooled = torch.sum(h * w.unsqueeze(2), dim=1)
            nxt = torch.cat([mask[:, 1:], mask[:, :1] * 0.0], dim=1)
            last = torch.sum(h * (mask - nxt).unsqueeze(2), dim=1)  # output at the last real row
            miss = torch.isnan(x)
            x0 = torch.where(miss, torch.zeros_like(x), x)
            ex = self.emb(self.ids(x0[:, 1:5], self.x_id_max, self.x_id_off)).sum(dim=1)
            f = torch.cat([self.x_values(x0) + self.x_c, miss.float(), ex], dim=1)
            logit = self.head(torch.cat([pooled, last, self.flat(f)], dim=1))
            return torch.sigmoid(logit)                            # [B, 1]

    return SeqModel


def fit_normalisers(torch, model, seq, lens, x):
    """Standardise the numeric values on the training rows (real sequence rows only), folded
    into the per-column constants: (v - mu) / sd = v * (a / sd) + (-mu / sd)."""
    with torch.no_grad():
        v = model.seq_values(torch.from_numpy(seq)).numpy()[masks(lens).astype(bool)]
        xt = torch.from_numpy(x)
        xv = model.x_values(torch.where(torch.isnan(xt), torch.zeros_like(xt), xt)).numpy()
        for vals, a_log, a_lin, c in ((v, model.seq_a_log, model.seq_a_lin, model.seq_c),
                                      (xv, model.x_a_log, model.x_a_lin, model.x_c)):
            used = (a_log.numpy() != 0) | (a_lin.numpy() != 0)
            mu = np.where(used, vals.mean(0), 0.0).astype(np.float32)
            sd = np.where(used, np.maximum(vals.std(0), 1e-3), 1.0).astype(np.float32)
            a_log.div_(torch.from_numpy(sd))
            a_lin.div_(torch.from_numpy(sd))
            c.copy_(torch.from_numpy(-mu / sd))


def predict(torch, model, seq, mask, x, batch=2048):
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out.append(model(torch.from_numpy(seq[i:i + batch]), torch.from_numpy(mask[i:i + batch]),
                             torch.from_numpy(x[i:i + batch])).numpy()[:, 0])
    return np.concatenate(out).astype(np.float32)


def train(torch, nn, model, tr, args):
    seq, lens, x, y = tr["seq"], tr["lens"], tr["x"], tr["y"]
    mask = masks(lens)
    pos = float(y.sum())
    pos_weight = float(np.sqrt((len(y) - pos) / pos))  # softened inverse frequency
    g = torch.Generator().manual_seed(args.seed)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs)
    yt = torch.from_numpy(y.astype(np.float32))
    w_pos = torch.tensor(pos_weight)
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(len(y), generator=g).numpy()
        total, t0 = 0.0, time.perf_counter()
        for i in range(0, len(perm), args.batch):
            b = perm[i:i + args.batch]
            nmax = int(lens[b].max())  # padding is after the real rows: trim to the batch's longest
            p = model(torch.from_numpy(seq[b, :nmax]), torch.from_numpy(mask[b, :nmax]),
                      torch.from_numpy(x[b]))[:, 0]
            p = torch.clamp(p, 1e-7, 1 - 1e-7)
            yb = yt[b]
            loss = -(w_pos * yb * torch.log(p) + (1 - yb) * torch.log1p(-p)).mean()
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            total += loss.item() * len(b)
        sched.step()
        print(f"epoch {epoch + 1}/{args.epochs} loss {total / len(y):.4f} "
              f"({time.perf_counter() - t0:.1f}s)", flush=True)
    return pos_weight


# ---------------------------------------------------------------- reference rows

def pick_reference(lens, y, r, seed):
    rng = np.random.default_rng(seed)
    chosen = []

    def take(pool, k):
        pool = np.setdiff1d(pool, chosen)
        k = min(k, len(pool))
        chosen.extend(rng.choice(pool, size=k, replace=False).tolist())

    take(np.flatnonzero(lens == 1), 24)
    take(np.flatnonzero(lens == SEQ_N), 48)
    take(np.flatnonzero(y == 1), 48)
    for ln in range(2, SEQ_N):  # every length in between
        take(np.flatnonzero(lens == ln), 3)
    take(np.arange(len(y)), r - len(chosen))
    return np.sort(np.array(chosen[:r], dtype=np.int64))


# ---------------------------------------------------------------- ONNX

def export_onnx(torch, model, path, sample, opset, mode):
    names_in = ["seq", "mask", "x"]
    kwargs = dict(input_names=names_in, output_names=["probabilities"], opset_version=opset)
    if mode == "auto":
        try:
            from torch.export import Dim
            b, n = Dim("B"), Dim("N")
            torch.onnx.export(model, sample, str(path), dynamo=True, external_data=False, verbose=False,
                              dynamic_shapes={"seq": {0: b, 1: n}, "mask": {0: b, 1: n},
                                              "x": {0: b}},
                              **kwargs)
            return "dynamo"
        except Exception as e:  # noqa: BLE001 - fall back to the TorchScript exporter
            print(f"dynamo export failed ({type(e).__name__}: {str(e)[:200]}); "
                  "using dynamo=False")
    torch.onnx.export(model, sample, str(path), dynamo=False, do_constant_folding=True,
                      dynamic_axes={"seq": {0: "B", 1: "N"}, "mask": {0: "B", 1: "N"},
                                    "x": {0: "B"}, "probabilities": {0: "B"}}, **kwargs)
    return "torchscript"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train-rows", type=int, default=60000)
    ap.add_argument("--test-rows", type=int, default=12000)
    ap.add_argument("--ref-rows", type=int, default=256)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trees", type=int, default=100)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--exporter", help="prebuilt export_synth binary (default: cargo run)")
    ap.add_argument("--out", default=str(OUT), help="output folder (default testdata/models)")
    ap.add_argument("--exporter-mode", choices=["auto", "torchscript"], default="auto",
                    help="auto: torch.onnx dynamo exporter, falling back to dynamo=False")
    args = ap.parse_args()

    import torch
    import torch.nn as nn
    import onnx
    import onnxruntime as ort
    import xgboost as xgb
    from sklearn.metrics import average_precision_score, roc_auc_score

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.use_deterministic_algorithms(True)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    exporter = shlex.split(args.exporter) if args.exporter else EXPORT_CMD

    with tempfile.TemporaryDirectory() as tmp:
        tr = export(exporter, args.train_rows, 7, pathlib.Path(tmp) / "train.csv")
        te = export(exporter, args.test_rows, 42, pathlib.Path(tmp) / "test.csv")
    names = tr["names"]
    assert names == te["names"] and len(names) == 18, names
    print(f"train {tr['x'].shape} fraud {tr['y'].mean():.4f}; "
          f"test {te['x'].shape} fraud {te['y'].mean():.4f}")

    check = cross_check(te)
    print(f"pandas cross-check: {check['rows']} test rows ({check['values']} sequence values) "
          "equal the exported tensor and lengths bit for bit")

    model = make_model(torch, nn, names, args.hidden)()
    fit_normalisers(torch, model, tr["seq"], tr["lens"], tr["x"])
    t0 = time.perf_counter()
    pos_weight = train(torch, nn, model, tr, args)
    train_s = time.perf_counter() - t0
    model.eval()

    te_mask = masks(te["lens"])
    gru_p = predict(torch, model, te["seq"], te_mask, te["x"])
    gru_auprc = float(average_precision_score(te["y"], gru_p))
    gru_roc = float(roc_auc_score(te["y"], gru_p))

    clf = xgb.XGBClassifier(
        n_estimators=args.trees, max_depth=args.depth, learning_rate=0.1,
        objective="binary:logistic", tree_method="hist", subsample=0.9,
        colsample_bytree=0.9, random_state=0, n_jobs=2, missing=np.nan)
    clf.fit(tr["x"], tr["y"])
    xgb_p = clf.predict_proba(te["x"])[:, 1]
    xgb_auprc = float(average_precision_score(te["y"], xgb_p))
    xgb_roc = float(roc_auc_score(te["y"], xgb_p))
    print(f"test GRU  AUPRC {gru_auprc:.4f} ROC AUC {gru_roc:.4f} (trained in {train_s:.1f}s)")
    print(f"test XGB  AUPRC {xgb_auprc:.4f} ROC AUC {xgb_roc:.4f} (flat features only)")

    # reference rows
    ref = pick_reference(te["lens"], te["y"], args.ref_rows, args.seed)
    r_seq = np.ascontiguousarray(te["seq"][ref])
    r_mask = np.ascontiguousarray(te_mask[ref])
    r_x = np.ascontiguousarray(te["x"][ref])
    r_p = predict(torch, model, r_seq, r_mask, r_x)

    onnx_path = out / "seq_gru.onnx"
    sample = tuple(torch.from_numpy(a[:2]) for a in (r_seq, r_mask, r_x))
    how = export_onnx(torch, model, onnx_path, sample, args.opset, args.exporter_mode)
    m = onnx.load(str(onnx_path))
    onnx.checker.check_model(m, full_check=True)
    opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])
    io = {"inputs": [{"name": i.name, "shape": i.shape, "type": i.type} for i in sess.get_inputs()],
          "outputs": [{"name": o.name, "shape": o.shape, "type": o.type} for o in sess.get_outputs()]}

    def ort_run(s, mk, xx):
        return sess.run(["probabilities"], {"seq": s, "mask": mk, "x": xx})[0].reshape(-1)

    o32 = ort_run(r_seq, r_mask, r_x)
    diff32 = float(np.abs(o32 - r_p).max())
    o1 = np.concatenate([ort_run(r_seq[i:i + 1], r_mask[i:i + 1], r_x[i:i + 1]) for i in range(len(ref))])
    diff1 = float(np.abs(o1 - r_p).max())
    s16, m16 = np.ascontiguousarray(r_seq[:, :16]), np.ascontiguousarray(r_mask[:, :16])
    t16 = predict(torch, model, s16, m16, r_x)
    o16 = ort_run(s16, m16, r_x)
    diff16 = float(np.abs(o16 - t16).max())
    short = te["lens"][ref] <= 16  # rows that fit in 16: truncation drops only padding
    pad_diff = float(np.abs(t16[short] - r_p[short]).max())
    print(f"ORT vs torch max |diff|: N=32 batch {diff32:.2e}, N=32 batch-1 {diff1:.2e}, "
          f"N=16 {diff16:.2e}; torch N=16 vs N=32 on rows of length <= 16: {pad_diff:.2e}")
    assert max(diff32, diff1, diff16) < 1e-5, (diff32, diff1, diff16)
    assert pad_diff < 1e-5, pad_diff

    r_seq.astype("<f4").tofile(out / "seq_ref_seq.f32")
    r_mask.astype("<f4").tofile(out / "seq_ref_mask.f32")
    r_x.astype("<f4").tofile(out / "seq_ref_x.f32")
    r_p.astype("<f4").tofile(out / "seq_ref_probs.f32")

    rl = te["lens"][ref]
    manifest = {
        "model": "seq_gru.onnx",
        "inputs": {"seq": ["B", "N", len(SEQ_FIELDS)], "mask": ["B", "N"], "x": ["B", len(names)]},
        "outputs": {"probabilities": ["B", 1]},
        "onnx_io": io,
        "sequence": "card_seq",
        "seq_fields": SEQ_FIELDS,
        "seq_missing": SEQ_MISSING,
        "seq_padding": 0.0,
        "mask": "1 = real row, 0 = padding; padding after the real rows; current transaction last",
        "N": SEQ_N,
        "F": len(SEQ_FIELDS),
        "K": len(names),
        "features": names,
        "vocab": VOCAB,
        "rows": int(len(ref)),
        "ref_test_rows": ref.tolist(),
        "ref_lengths": {"min": int(rl.min()), "max": int(rl.max()),
                        "len1": int((rl == 1).sum()), "len32": int((rl == SEQ_N).sum()),
                        "fraud": int(te["y"][ref].sum())},
        "files": {"seq": "seq_ref_seq.f32", "mask": "seq_ref_mask.f32", "x": "seq_ref_x.f32",
                  "probs": "seq_ref_probs.f32", "dtype": "<f4"},
        "metrics": {
            "gru": {"test_auprc": gru_auprc, "test_roc_auc": gru_roc},
            "xgboost_flat": {"test_auprc": xgb_auprc, "test_roc_auc": xgb_roc,
                             "trees": args.trees, "max_depth": args.depth},
        },
        "training": {"epochs": args.epochs, "batch": args.batch, "lr": args.lr,
                     "hidden": args.hidden, "seed": args.seed, "pos_weight": pos_weight,
                     "threads": args.threads, "seconds": round(train_s, 1),
                     "parameters": int(sum(p.numel() for p in model.parameters()))},
        "train": {"rows": args.train_rows, "seed": 7, "fraud_share": float(tr["y"].mean())},
        "test": {"rows": args.test_rows, "seed": 42, "fraud_share": float(te["y"].mean())},
        "pandas_cross_check": check,
        "ort_vs_torch_max_abs": {"n32": diff32, "n32_batch1": diff1, "n16": diff16},
        "torch_n16_vs_n32_len_le_16_max_abs": pad_diff,
        "onnx_exporter": how,
        "opset": opset,
        "versions": {"torch": torch.__version__, "onnx": onnx.__version__,
                     "onnxruntime": ort.__version__, "xgboost": xgb.__version__,
                     "numpy": np.__version__, "pandas": pd.__version__},
    }
    (out / "seq_ref.manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(json.dumps({k: manifest[k] for k in ("metrics", "onnx_io", "ort_vs_torch_max_abs",
                                               "pandas_cross_check", "training", "onnx_exporter")},
                     indent=2))
    print(f"seq_gru.onnx {onnx_path.stat().st_size} bytes")


if __name__ == "__main__":
    sys.exit(main())
