//! CSV export of a generated data set (`examples/export_synth`, `tools/train_xgboost.py`).

use super::{schema, Labeled};
use std::io::{self, Write};

/// Writes the data set as CSV: typed fields, every feature (categoricals as text,
/// missing as empty), then `is_fraud` and `scenario`.
pub fn write_csv(rows: &[Labeled], mut w: impl Write) -> io::Result<()> {
    let schema = schema();
    write!(w, "id,entity,timestamp_ms,device,merchant")?;
    for f in schema.fields() {
        write!(w, ",{}", f.name)?;
    }
    writeln!(w, ",is_fraud,scenario")?;
    for r in rows {
        let t = &r.txn;
        write!(
            w,
            "{},{},{},{},{}",
            t.id.0, t.entity.0, t.timestamp_ms, t.device.0, r.merchant
        )?;
        for (f, &v) in schema.fields().iter().zip(t.features.values()) {
            if v.is_nan() {
                write!(w, ",")?;
            } else if f.kind == crate::schema::FieldKind::Categorical {
                write!(w, ",{}", f.value_of(v as u32).unwrap_or("__other__"))?;
            } else {
                write!(w, ",{v}")?;
            }
        }
        writeln!(w, ",{},{}", r.is_fraud as u8, r.scenario.as_str())?;
    }
    Ok(())
}
