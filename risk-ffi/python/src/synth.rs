//! `risk.synth`: the SDK's synthetic transaction stream (`risk_core::synth`: cards,
//! terminals and labelled fraud scenarios; the easy preset or the realistic one) as an
//! Arrow table, for notebooks, tests and benchmarks that need rows without a data set.

use arrow_array::builder::{
    BooleanBuilder, Float32Builder, Float64Builder, StringBuilder, StringDictionaryBuilder,
    TimestampMillisecondBuilder, UInt16Builder, UInt64Builder,
};
use arrow_array::types::Int16Type;
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use pyo3::prelude::*;
use pyo3_arrow::PyTable;
use risk_core::schema::FieldKind;
use risk_core::synth::{self as gen, Preset, SynthConfig};
use std::sync::Arc;

/// Fields written from the transaction's typed fields, not from its feature slots.
const TYPED: [&str; 5] = ["amount", "currency", "mcc", "country", "channel"];

/// The largest stream `synth` makes in one call.
const MAX_ROWS: usize = 20_000_000;

/// Generates `n` synthetic transactions (deterministic for a `seed`) as a pyarrow
/// Table: `id`, `entity`, `time` (timestamp, ms, UTC), `device`, `merchant` (terminal id),
/// `amount`, `currency`, `mcc`, `country`, `channel`, every feature of the example schema,
/// then `is_fraud`, `scenario`, `label_time` (when the fraud label arrives; null for
/// legitimate rows and for fraud never reported) and `email` (the account e-mail of the
/// realistic preset's online rows, a key entity state can count by; null otherwise). `raw=True` leaves the velocity
/// features (those entity state computes) null, as a processor's raw log would have
/// them; otherwise they hold what entity state computed in event order. Rows are in
/// event-time order.
///
/// `preset="easy"` (30 days, 2% fraud in short bursts, labels at once) or
/// `"realistic"` (120 days, 0.3% fraud a fast model sees only in part, look-alikes,
/// label delay, drift: `risk_core::synth::realistic`); `days` and `fraud_rate`
/// override the preset's. `history=True` appends the history features
/// (`risk_core::synth::HISTORY`: links to confirmed fraud through the device, e-mail or
/// merchant, cards per device and merchant, devices and categories per card, hour and
/// amount against the card's own), computed by entity state with each label fed when
/// its `label_time` says it arrived. `history_scenarios=False` (realistic preset) makes
/// no fraud from the scenarios only history reveals (low-and-slow takeover, mule chains,
/// cash-out, shared identities): their share goes to the others, legitimate traffic
/// unchanged (the control under which what history adds must vanish).
///
/// >>> frame = risk.synth(100_000, seed=7)
/// >>> hard = risk.synth(1_000_000, preset="realistic")
// One parameter per Python keyword argument.
#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (n, seed=0, raw=false, days=None, fraud_rate=None, preset="easy", history=false, history_scenarios=true))]
pub fn synth<'py>(
    py: Python<'py>,
    n: usize,
    seed: u64,
    raw: bool,
    days: Option<u32>,
    fraud_rate: Option<f64>,
    preset: &str,
    history: bool,
    history_scenarios: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let Some(preset) = Preset::parse(preset) else {
        return Err(crate::errors::input(format!(
            "preset = {preset:?}: expected \"easy\" or \"realistic\""
        )));
    };
    if n > MAX_ROWS {
        return Err(crate::errors::input(format!(
            "n = {n}: at most {MAX_ROWS} rows a call"
        )));
    }
    let mut cfg = match preset {
        Preset::Easy => SynthConfig::new(seed, n),
        Preset::Realistic => SynthConfig::realistic(seed, n),
    };
    cfg.days = days.unwrap_or(cfg.days);
    cfg.fraud_rate = fraud_rate.unwrap_or(cfg.fraud_rate);
    cfg.history_scenarios = history_scenarios;
    if cfg.days == 0 || !(0.0..=1.0).contains(&cfg.fraud_rate) {
        return Err(crate::errors::input(
            "days must be at least 1 and fraud_rate within [0, 1]",
        ));
    }
    let batch = py.detach(|| {
        let rows = if raw {
            gen::generate_raw(&cfg)
        } else {
            gen::generate(&cfg)
        };
        let batch = to_batch(&rows);
        if history {
            with_history(batch, &rows)
        } else {
            batch
        }
    });
    let schema = batch.schema();
    PyTable::try_new(vec![batch], schema)?.into_pyarrow(py)
}

/// `batch` with the [`gen::HISTORY`] columns of `rows` appended (float32, null = missing).
fn with_history(batch: RecordBatch, rows: &[gen::Labeled]) -> RecordBatch {
    let (values, _) = gen::compute_history(rows);
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| (**f).clone())
        .collect();
    let mut cols = batch.columns().to_vec();
    for (k, name) in gen::HISTORY.iter().enumerate() {
        let mut b = Float32Builder::with_capacity(rows.len());
        for v in values.chunks(gen::HISTORY.len()).map(|r| r[k]) {
            b.append_option((!v.is_nan()).then_some(v));
        }
        fields.push(Field::new(*name, DataType::Float32, true));
        cols.push(Arc::new(b.finish()));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).expect("columns built to the schema")
}

fn to_batch(rows: &[gen::Labeled]) -> RecordBatch {
    let schema = gen::schema();
    let n = rows.len();
    let mut id = UInt64Builder::with_capacity(n);
    let mut entity = UInt64Builder::with_capacity(n);
    let mut time = TimestampMillisecondBuilder::with_capacity(n).with_timezone("UTC");
    let mut device = UInt64Builder::with_capacity(n);
    let mut merchant = StringBuilder::new();
    let mut amount = Float64Builder::with_capacity(n);
    let mut currency = StringDictionaryBuilder::<Int16Type>::new();
    let mut mcc = UInt16Builder::with_capacity(n);
    let mut country = StringDictionaryBuilder::<Int16Type>::new();
    let mut channel = StringDictionaryBuilder::<Int16Type>::new();
    let rest: Vec<_> = schema
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| !TYPED.contains(&f.name.as_str()))
        .collect();
    let mut nums: Vec<Float32Builder> = rest
        .iter()
        .map(|_| Float32Builder::with_capacity(n))
        .collect();
    let mut fraud = BooleanBuilder::with_capacity(n);
    let mut scenario = StringDictionaryBuilder::<Int16Type>::new();
    let mut label_time = TimestampMillisecondBuilder::with_capacity(n).with_timezone("UTC");
    let mut email = StringBuilder::new();
    for r in rows {
        let t = &r.txn;
        id.append_value(t.id.0);
        entity.append_value(t.entity.0);
        time.append_value(t.timestamp_ms);
        device.append_value(t.device.0);
        merchant.append_value(gen::terminal_id(r.merchant));
        amount.append_value(t.amount);
        currency.append_value(t.currency.as_str());
        mcc.append_value(t.mcc);
        country.append_value(t.country.as_str());
        channel.append_value(t.channel.as_str());
        let v = t.features.values();
        for ((slot, f), b) in rest.iter().zip(nums.iter_mut()) {
            debug_assert_eq!(
                f.kind,
                FieldKind::Numeric,
                "the synthetic extras are numeric"
            );
            let x = v[*slot];
            b.append_option((!x.is_nan()).then_some(x));
        }
        fraud.append_value(r.is_fraud);
        scenario.append_value(r.scenario.as_str());
        label_time.append_option(r.label_time_ms);
        email.append_option(r.email.as_deref());
    }
    let dict = || DataType::Dictionary(Box::new(DataType::Int16), Box::new(DataType::Utf8));
    let mut fields = vec![
        Field::new("id", DataType::UInt64, false),
        Field::new("entity", DataType::UInt64, false),
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            false,
        ),
        Field::new("device", DataType::UInt64, false),
        Field::new("merchant", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, false),
        Field::new("currency", dict(), false),
        Field::new("mcc", DataType::UInt16, false),
        Field::new("country", dict(), false),
        Field::new("channel", dict(), false),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(id.finish()),
        Arc::new(entity.finish()),
        Arc::new(time.finish()),
        Arc::new(device.finish()),
        Arc::new(merchant.finish()),
        Arc::new(amount.finish()),
        Arc::new(currency.finish()),
        Arc::new(mcc.finish()),
        Arc::new(country.finish()),
        Arc::new(channel.finish()),
    ];
    for ((_, f), mut b) in rest.iter().zip(nums) {
        fields.push(Field::new(f.name.as_str(), DataType::Float32, true));
        cols.push(Arc::new(b.finish()));
    }
    fields.push(Field::new("is_fraud", DataType::Boolean, false));
    cols.push(Arc::new(fraud.finish()));
    fields.push(Field::new("scenario", dict(), false));
    cols.push(Arc::new(scenario.finish()));
    fields.push(Field::new(
        "label_time",
        DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        true,
    ));
    cols.push(Arc::new(label_time.finish()));
    fields.push(Field::new("email", DataType::Utf8, true));
    cols.push(Arc::new(email.finish()));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).expect("columns built to the schema")
}
