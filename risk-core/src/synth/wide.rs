//! A wider synthetic row for rule benchmarks and tests: the 18 features of
//! [`schema`](super::schema) plus 12 that analysts' rules commonly read (30-day amount
//! profile, account and e-mail age, login failures, device and merchant spread,
//! chargebacks, card / IP country, device OS), derived from each generated row so that
//! they vary together the way real features do.
//!
//! Rows are complete (no missing value) so that peers without a missing-value notion
//! (zen-expression) see the same inputs; missing values are covered by the rule
//! language's property tests instead.

use super::{generate, Rng, SynthConfig, COUNTRIES};
use crate::schema::{FeatureSchema, Features, FieldKind};
use std::sync::Arc;

/// Operating systems of [`wide_schema`]'s `device_os`.
pub const DEVICE_OS: [&str; 6] = ["ios", "android", "windows", "macos", "linux", "other"];

/// The numeric fields [`wide_schema`] adds to the synthetic schema.
pub const WIDE_NUMERIC: [&str; 9] = [
    "avg_amount_30d",
    "max_amount_30d",
    "amount_sum_1h",
    "account_age_days",
    "email_age_days",
    "failed_logins_24h",
    "distinct_devices_7d",
    "distinct_merchants_24h",
    "chargebacks_90d",
];

/// The synthetic schema plus [`WIDE_NUMERIC`] and three categoricals (`card_country`,
/// `ip_country` over [`COUNTRIES`], `device_os` over [`DEVICE_OS`]): 30 fields.
pub fn wide_schema() -> Arc<FeatureSchema> {
    let base = super::schema();
    let mut b = FeatureSchema::builder();
    for f in base.fields() {
        b = match f.kind {
            FieldKind::Numeric if !f.nullable => b.numeric_required(&f.name),
            FieldKind::Numeric => b.numeric(&f.name),
            FieldKind::Categorical => {
                let v: Vec<&str> = f.vocab().iter().map(String::as_str).collect();
                b.categorical(&f.name, &v)
            }
        };
    }
    for n in WIDE_NUMERIC {
        b = b.numeric(n);
    }
    b.categorical("card_country", &COUNTRIES)
        .categorical("ip_country", &COUNTRIES)
        .categorical("device_os", &DEVICE_OS)
        .build()
        .expect("the wide synthetic schema is valid")
}

/// `n` complete rows over [`wide_schema`], deterministic in `seed`: generated
/// transactions (velocity features from entity state), missing values imputed (numeric
/// 0, categorical the vocabulary's first value), the 12 extra fields derived.
pub fn wide_rows(seed: u64, n: usize) -> Vec<Features> {
    let schema = wide_schema();
    let rows = generate(&SynthConfig::new(seed, n));
    let mut r = Rng::new(seed ^ 0x5769_6465);
    let country = |r: &mut Rng| COUNTRIES[r.below(COUNTRIES.len() as u64) as usize];
    rows.iter()
        .take(n)
        .map(|l| {
            let src = &l.txn.features;
            let mut f = schema.features();
            let base = src.schema().len();
            for (i, &v) in src.values().iter().enumerate() {
                let field = &src.schema().fields()[i];
                f.values_mut()[i] = match (v.is_nan(), &field.kind) {
                    (false, FieldKind::Categorical) if v < 1.0 => 1.0,
                    (false, _) => v,
                    (true, FieldKind::Numeric) => 0.0,
                    (true, FieldKind::Categorical) => 1.0,
                };
            }
            let get = |name: &str| src.by_name(name).filter(|v| !v.is_nan()).unwrap_or(0.0);
            let amount = get("amount").max(0.01);
            let ratio = get("amount_ratio");
            let avg = if ratio > 0.05 {
                amount / ratio
            } else {
                amount * r.range(0.5, 2.0) as f32
            }
            .max(0.5);
            let max = avg * r.range(1.2, 5.0) as f32;
            let c1h = get("txn_count_1h");
            let c24 = get("txn_count_24h");
            let card_age = get("card_age_days");
            let fraud = l.is_fraud;
            let extra = [
                avg,
                max,
                amount * r.range(1.0, 1.0 + c1h as f64) as f32,
                card_age + r.below(800) as f32,
                if fraud && r.chance(0.5) {
                    r.below(30) as f32
                } else {
                    r.below(4_000) as f32
                },
                if r.chance(if fraud { 0.4 } else { 0.05 }) {
                    1.0 + r.below(9) as f32
                } else {
                    0.0
                },
                1.0 + r.below(if fraud { 6 } else { 3 }) as f32,
                (1.0 + r.below(1 + c24 as u64) as f32).min(c24.max(1.0)),
                if r.chance(0.03) {
                    1.0 + r.below(3) as f32
                } else {
                    0.0
                },
            ];
            for (k, v) in extra.into_iter().enumerate() {
                f.values_mut()[base + k] = v;
            }
            let cs = src.schema().slot("country").expect("a country field");
            let home = src
                .schema()
                .field(cs)
                .value_of(f.values()[cs.index()] as u32);
            let home = home.unwrap_or("US").to_owned();
            let foreign = get("is_foreign") > 0.5;
            let card = if foreign {
                country(&mut r)
            } else {
                home.as_str()
            };
            let card = card.to_owned();
            let ip = if r.chance(0.85) {
                home.clone()
            } else {
                country(&mut r).to_owned()
            };
            let os = DEVICE_OS[r.below(DEVICE_OS.len() as u64) as usize];
            f.set_categorical("card_country", &card).expect("a country");
            f.set_categorical("ip_country", &ip).expect("a country");
            f.set_categorical("device_os", os).expect("an os");
            f
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_rows_are_complete_varied_and_deterministic() {
        let s = wide_schema();
        assert_eq!(s.len(), 30);
        let a = wide_rows(7, 500);
        assert_eq!(a.len(), 500);
        assert!(a.iter().all(|f| f.values().iter().all(|v| !v.is_nan())));
        let b = wide_rows(7, 500);
        assert!(a.iter().zip(&b).all(|(x, y)| x.values() == y.values()));
        let foreign_ip = a
            .iter()
            .filter(|f| f.by_name("ip_country") != f.by_name("country"))
            .count();
        assert!(foreign_ip > 10 && foreign_ip < 250, "{foreign_ip}");
    }
}
