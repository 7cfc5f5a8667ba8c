//! `[state]` in `risk.toml`: serde structs (unknown keys are errors) mapped onto
//! [`StateConfig`].

use super::def::{Agg, Current, FeatureDef, Filter, KeySource, ListDef, RedisConfig, StateConfig};
use super::def::{SeqField, SequenceDef};
use crate::decision::Action;
use crate::error::ConfigError;
use crate::secret::SecretSpec;
use crate::setting::{count, ms, us};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawState {
    pub max_keys: Option<i64>,
    pub max_future_ms: Option<f64>,
    pub max_lateness_ms: Option<f64>,
    pub max_pending_labels: Option<i64>,
    pub snapshot: Option<String>,
    pub dir: Option<String>,
    #[serde(default)]
    pub features: Vec<RawFeature>,
    #[serde(default)]
    pub lists: BTreeMap<String, RawList>,
    #[serde(default)]
    pub sequences: Vec<RawSequence>,
    pub redis: Option<RawRedis>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSequence {
    pub name: String,
    pub key: String,
    pub length: i64,
    pub fields: Vec<String>,
    pub current: Option<String>,
    pub missing: Option<f64>,
    #[serde(default)]
    pub filter: toml::Table,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRedis {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub cluster: Vec<String>,
    pub timeout_ms: Option<f64>,
    pub prefix: Option<String>,
    pub retry_ms: Option<f64>,
    pub pending_ttl: Option<String>,
    pub max_pending: Option<i64>,
    pub queue: Option<i64>,
    pub share_lists: Option<bool>,
    pub lists_check_ms: Option<f64>,
    pub rows_linger_ms: Option<f64>,
    pub connections: Option<i64>,
    pub read_spin_us: Option<f64>,
    pub carry_keys: Option<bool>,
    pub username: Option<String>,
    pub password: Option<SecretSpec>,
    pub tls_ca_file: Option<String>,
    pub tls_cert_file: Option<String>,
    pub tls_key_file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFeature {
    pub name: String,
    pub key: String,
    pub agg: String,
    pub of: Option<String>,
    pub window: Option<String>,
    pub buckets: Option<i64>,
    pub current: Option<String>,
    #[serde(default)]
    pub filter: toml::Table,
    #[serde(default)]
    pub outcome: Vec<String>,
    pub delay: Option<String>,
    pub exact_limit: Option<i64>,
    pub exact: Option<bool>,
    pub max_events: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawList {
    pub key: String,
    pub file: Option<String>,
}

/// Parses `"90s"`, `"1h"`, `"7d"`, `"1h 30m"` (humantime's syntax).
fn duration(key: &str, s: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(s)
        .map_err(|e| ConfigError::invalid(key, format!("{s:?} is not a duration like \"1h\": {e}")))
}

fn current(key: &str, c: Option<&str>, default: Current) -> Result<Current, ConfigError> {
    match c {
        None => Ok(default),
        Some("exclude") => Ok(Current::Exclude),
        Some("include") => Ok(Current::Include),
        Some(o) => Err(ConfigError::invalid(
            format!("{key}.current"),
            format!("{o:?} is not \"include\" or \"exclude\""),
        )),
    }
}

impl RawSequence {
    fn to_def(&self, key: &str) -> Result<SequenceDef, ConfigError> {
        let length = u32::try_from(count(&format!("{key}.length"), Some(self.length), 0)?)
            .map_err(|_| ConfigError::invalid(format!("{key}.length"), "too large"))?;
        let mut d = SequenceDef::new(&self.name, KeySource::parse(&self.key), length, &[]);
        d.fields = self.fields.iter().map(|f| SeqField::parse(f)).collect();
        d.current = current(key, self.current.as_deref(), Current::Include)?;
        if let Some(m) = self.missing {
            d.missing = m as f32;
        }
        for (name, v) in &self.filter {
            d.filters.push(filter(&format!("{key}.filter"), name, v)?);
        }
        Ok(d)
    }
}

fn filter(key: &str, name: &str, v: &toml::Value) -> Result<Filter, ConfigError> {
    let bad = || {
        ConfigError::invalid(
            format!("{key}.{name}"),
            "expected a list of values or a table of bounds (gt, ge, lt, le)",
        )
    };
    match v {
        toml::Value::Array(items) => {
            let values = items
                .iter()
                .map(|i| i.as_str().map(str::to_owned).ok_or_else(bad))
                .collect::<Result<Vec<_>, _>>()?;
            if values.is_empty() {
                return Err(ConfigError::invalid(format!("{key}.{name}"), "empty list"));
            }
            Ok(Filter::In {
                field: name.to_owned(),
                values,
            })
        }
        toml::Value::Table(t) => {
            let mut b = [None; 4];
            for (k, v) in t {
                let i = ["gt", "ge", "lt", "le"]
                    .iter()
                    .position(|x| x == k)
                    .ok_or_else(bad)?;
                let x = v.as_float().or(v.as_integer().map(|i| i as f64));
                b[i] = Some(x.filter(|x| x.is_finite()).ok_or_else(bad)?);
            }
            Ok(Filter::Range {
                field: name.to_owned(),
                gt: b[0],
                ge: b[1],
                lt: b[2],
                le: b[3],
            })
        }
        _ => Err(bad()),
    }
}

impl RawState {
    /// The fields this section fills (features, then `list.<name>.<key>`).
    pub(crate) fn field_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.features.iter().map(|f| f.name.clone()).collect();
        v.extend(self.lists.iter().map(|(n, l)| {
            ListDef {
                name: n.clone(),
                key: KeySource::parse(&l.key),
                file: None,
            }
            .field_name()
        }));
        v
    }

    pub(crate) fn to_config(&self, base: &Path) -> Result<StateConfig, ConfigError> {
        let d = StateConfig::default();
        let mut features = Vec::with_capacity(self.features.len());
        for (i, f) in self.features.iter().enumerate() {
            let key = format!("state.features[{i}]");
            let agg = Agg::parse(&f.agg).ok_or_else(|| {
                ConfigError::invalid(
                    format!("{key}.agg"),
                    format!("{:?} is not one of count, sum, avg, min, max, stddev, distinct, since_last, ratio, fraud_count, fraud_rate", f.agg),
                )
            })?;
            let mut def = FeatureDef::new(&f.name, KeySource::parse(&f.key), agg);
            def.of = f.of.clone();
            if let Some(w) = &f.window {
                def.window = duration(&format!("{key}.window"), w)?;
            }
            if let Some(b) = f.buckets {
                def.buckets = u32::try_from(count(&format!("{key}.buckets"), Some(b), 0)?)
                    .map_err(|_| ConfigError::invalid(format!("{key}.buckets"), "too large"))?;
            }
            def.current = current(&key, f.current.as_deref(), Current::Exclude)?;
            for (name, v) in &f.filter {
                def.filters.push(filter(&format!("{key}.filter"), name, v)?);
            }
            for o in &f.outcome {
                def.outcome.push(Action::parse(o).ok_or_else(|| {
                    ConfigError::invalid(
                        format!("{key}.outcome"),
                        format!("{o:?} is not approve, review or decline"),
                    )
                })?);
            }
            if let Some(dl) = &f.delay {
                def.delay = duration(&format!("{key}.delay"), dl)?;
            }
            if let Some(x) = f.exact_limit {
                def.exact_limit = u32::try_from(count(&format!("{key}.exact_limit"), Some(x), 0)?)
                    .map_err(|_| ConfigError::invalid(format!("{key}.exact_limit"), "too large"))?;
            }
            def.exact = f.exact.unwrap_or(false);
            if let Some(x) = f.max_events {
                if !def.exact {
                    return Err(ConfigError::invalid(
                        format!("{key}.max_events"),
                        "bounds an exact window: set exact = true with it",
                    ));
                }
                def.max_events = u32::try_from(count(&format!("{key}.max_events"), Some(x), 0)?)
                    .map_err(|_| ConfigError::invalid(format!("{key}.max_events"), "too large"))?;
            }
            features.push(def);
        }
        let lists = self
            .lists
            .iter()
            .map(|(name, l)| ListDef {
                name: name.clone(),
                key: KeySource::parse(&l.key),
                file: l.file.as_ref().map(|f| base.join(f)),
            })
            .collect();
        let sequences = self
            .sequences
            .iter()
            .enumerate()
            .map(|(i, q)| q.to_def(&format!("state.sequences[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StateConfig {
            features,
            lists,
            sequences,
            max_keys: count("state.max_keys", self.max_keys, d.max_keys)?,
            max_future: ms("state.max_future_ms", self.max_future_ms, d.max_future)?,
            max_lateness: ms(
                "state.max_lateness_ms",
                self.max_lateness_ms,
                d.max_lateness,
            )?,
            max_pending_labels: count(
                "state.max_pending_labels",
                self.max_pending_labels,
                d.max_pending_labels,
            )?,
            snapshot: self.snapshot.as_ref().map(|p| base.join(p)),
            dir: self.dir.as_ref().map(|p| base.join(p)),
            redis: match &self.redis {
                None => None,
                Some(r) => {
                    let d = RedisConfig::default();
                    if r.url.is_none() && r.cluster.is_empty() {
                        return Err(ConfigError::invalid(
                            "state.redis",
                            "give `url` (one server) or `cluster` (seed nodes)",
                        ));
                    }
                    let file = |v: &Option<String>| v.as_ref().map(|p| base.join(p));
                    let password = match &r.password {
                        None => None,
                        Some(p) => Some(p.resolve("state.redis.password").map_err(|e| {
                            ConfigError::invalid("state.redis.password", e.to_string())
                        })?),
                    };
                    Some(RedisConfig {
                        url: r.url.clone().unwrap_or(d.url.clone()),
                        cluster: r.cluster.clone(),
                        username: r.username.clone(),
                        password,
                        tls_ca_file: file(&r.tls_ca_file),
                        tls_cert_file: file(&r.tls_cert_file),
                        tls_key_file: file(&r.tls_key_file),
                        timeout: ms("state.redis.timeout_ms", r.timeout_ms, d.timeout)?,
                        prefix: r.prefix.clone().unwrap_or(d.prefix),
                        retry: ms("state.redis.retry_ms", r.retry_ms, d.retry)?,
                        pending_ttl: match &r.pending_ttl {
                            None => d.pending_ttl,
                            Some(t) => duration("state.redis.pending_ttl", t)?,
                        },
                        max_pending: count(
                            "state.redis.max_pending",
                            r.max_pending,
                            d.max_pending,
                        )?,
                        queue: count("state.redis.queue", r.queue, d.queue)?,
                        share_lists: r.share_lists.unwrap_or(d.share_lists),
                        carry_keys: r.carry_keys.unwrap_or(d.carry_keys),
                        lists_check: ms(
                            "state.redis.lists_check_ms",
                            r.lists_check_ms,
                            d.lists_check,
                        )?,
                        rows_linger: ms(
                            "state.redis.rows_linger_ms",
                            r.rows_linger_ms,
                            d.rows_linger,
                        )?,
                        connections: count(
                            "state.redis.connections",
                            r.connections,
                            d.connections,
                        )?,
                        read_spin: us("state.redis.read_spin_us", r.read_spin_us, d.read_spin)?,
                        pseudonymiser: None,
                    })
                }
            },
        })
    }
}
