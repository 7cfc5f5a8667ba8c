//! Scorers named in `risk.toml`: a [`ScorerSpec`] (one `[*.scorer]` table) is built by the
//! factory registered for its `kind` in a [`ScorerRegistry`]; `constant` and `ensemble` are
//! built in, backends (`rules`, `xgboost`, `onnx`, ...) register theirs.

use super::constant::ConstantScorer;
use super::Scorer;
use crate::error::ConfigError;
use crate::schema::FeatureSchema;
use crate::setting::unit;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A scorer table from `risk.toml` (`[rules.scorer]`, `[fast.scorer]`, `[deep.scorer]`),
/// handed to the factory registered for its `kind`.
#[derive(Debug, Clone)]
pub struct ScorerSpec {
    /// The table's dotted key, for error messages.
    pub key: String,
    /// Every key of the table, `kind` included.
    pub table: toml::Table,
    /// The engine's schema.
    pub schema: Arc<FeatureSchema>,
    /// Directory of the config file: relative paths in the table resolve against it.
    pub base_dir: PathBuf,
}

impl ScorerSpec {
    /// A string value, or an error naming the key.
    pub fn str(&self, name: &str) -> Result<&str, ConfigError> {
        self.table
            .get(name)
            .and_then(|v| v.as_str())
            .ok_or_else(|| ConfigError::invalid(format!("{}.{name}", self.key), "missing string"))
    }

    /// A path value resolved against the config's directory.
    pub fn path(&self, name: &str) -> Result<PathBuf, ConfigError> {
        let p = Path::new(self.str(name)?);
        Ok(if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        })
    }

    /// A number value, if present.
    pub fn f64(&self, name: &str) -> Result<Option<f64>, ConfigError> {
        match self.table.get(name) {
            None => Ok(None),
            Some(v) => v
                .as_float()
                .or_else(|| v.as_integer().map(|i| i as f64))
                .map(Some)
                .ok_or_else(|| {
                    ConfigError::invalid(format!("{}.{name}", self.key), "must be a number")
                }),
        }
    }
}

type Factory = Arc<dyn Fn(&ScorerSpec) -> Result<Arc<dyn Scorer>, ConfigError> + Send + Sync>;

/// Maps scorer `kind`s in `risk.toml` to factories. Backends register their kinds
/// (`risk-rules` registers `rules`, `risk-gpu` its model kinds); the core registers
/// `constant`.
#[derive(Clone)]
pub struct ScorerRegistry {
    kinds: BTreeMap<String, Factory>,
}

impl fmt::Debug for ScorerRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.kinds.keys()).finish()
    }
}

impl Default for ScorerRegistry {
    fn default() -> Self {
        let mut r = Self {
            kinds: BTreeMap::new(),
        };
        r.register("constant", |spec| {
            let p = spec.f64("probability")?.ok_or_else(|| {
                ConfigError::invalid(format!("{}.probability", spec.key), "missing number")
            })? as f32;
            unit(&format!("{}.probability", spec.key), p)?;
            Ok(Arc::new(ConstantScorer::new(p)))
        });
        r
    }
}

impl ScorerRegistry {
    /// Registers (or replaces) a kind.
    pub fn register(
        &mut self,
        kind: &str,
        f: impl Fn(&ScorerSpec) -> Result<Arc<dyn Scorer>, ConfigError> + Send + Sync + 'static,
    ) {
        self.kinds.insert(kind.to_owned(), Arc::new(f));
    }

    /// Builds the scorer a spec describes. The kind `ensemble` is built here from its
    /// `members` (see [`crate::ensemble`]):
    ///
    /// ```toml
    /// [fast.scorer]
    /// kind = "ensemble"
    /// [[fast.scorer.members]]
    /// kind = "xgboost"
    /// path = "models/xgb_fraud.json"
    /// weight = 0.6                     # default 1
    /// [[fast.scorer.members]]
    /// kind = "bert"
    /// model = "..."
    /// weight = 0.4
    /// calibration = "bert.cal.json"    # optional, risk_core::calibrate JSON
    /// ```
    pub fn build(&self, spec: &ScorerSpec) -> Result<Arc<dyn Scorer>, ConfigError> {
        let key = format!("{}.kind", spec.key);
        let kind = spec
            .table
            .get("kind")
            .and_then(|k| k.as_str())
            .ok_or_else(|| ConfigError::invalid(&key, "missing string"))?;
        if kind == "ensemble" {
            return self.ensemble(spec);
        }
        let f = self
            .kinds
            .get(kind)
            .ok_or_else(|| ConfigError::UnknownKind {
                key,
                kind: kind.to_owned(),
                known: self.kinds.keys().cloned().collect::<Vec<_>>().join(", "),
            })?;
        f(spec)
    }
}

impl ScorerRegistry {
    fn ensemble(&self, spec: &ScorerSpec) -> Result<Arc<dyn Scorer>, ConfigError> {
        if let Some(k) = spec
            .table
            .keys()
            .find(|k| !["kind", "members"].contains(&k.as_str()))
        {
            return Err(ConfigError::invalid(
                format!("{}.{k}", spec.key),
                "unknown key (known: kind, members)",
            ));
        }
        let list = spec
            .table
            .get("members")
            .and_then(|m| m.as_array())
            .ok_or_else(|| {
                ConfigError::invalid(format!("{}.members", spec.key), "missing array of tables")
            })?;
        let mut members = Vec::with_capacity(list.len());
        for (i, m) in list.iter().enumerate() {
            let key = format!("{}.members[{i}]", spec.key);
            let mut table = m
                .as_table()
                .ok_or_else(|| ConfigError::invalid(&key, "expected a table"))?
                .clone();
            if table.get("kind").and_then(|k| k.as_str()) == Some("ensemble") {
                return Err(ConfigError::invalid(
                    format!("{key}.kind"),
                    "an ensemble member cannot be an ensemble",
                ));
            }
            let weight = match table.remove("weight") {
                None => 1.0,
                Some(v) => v
                    .as_float()
                    .or_else(|| v.as_integer().map(|i| i as f64))
                    .ok_or_else(|| {
                        ConfigError::invalid(format!("{key}.weight"), "must be a number")
                    })?,
            };
            let calibration = match table.remove("calibration") {
                None => None,
                Some(v) => {
                    let ckey = format!("{key}.calibration");
                    let p = v
                        .as_str()
                        .ok_or_else(|| ConfigError::invalid(&ckey, "expected a path"))?;
                    let p = if Path::new(p).is_absolute() {
                        PathBuf::from(p)
                    } else {
                        spec.base_dir.join(p)
                    };
                    let text = std::fs::read_to_string(&p).map_err(|e| {
                        ConfigError::invalid(&ckey, format!("{}: {e}", p.display()))
                    })?;
                    Some(
                        crate::calibrate::Calibration::from_json(&text).map_err(|e| {
                            ConfigError::invalid(&ckey, format!("{}: {e}", p.display()))
                        })?,
                    )
                }
            };
            let member_spec = ScorerSpec {
                key: key.clone(),
                table,
                schema: spec.schema.clone(),
                base_dir: spec.base_dir.clone(),
            };
            let scorer = self.build(&member_spec)?;
            members.push(crate::ensemble::Member {
                scorer,
                weight: weight as f32,
                calibration,
            });
        }
        let e = crate::ensemble::EnsembleScorer::new(members)
            .map_err(|m| ConfigError::invalid(format!("{}.members", spec.key), m))?;
        Ok(Arc::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::FeatureSchema;
    use crate::txn::Transaction;

    fn schema() -> Arc<FeatureSchema> {
        FeatureSchema::builder().numeric("amount").build().unwrap()
    }

    fn txn() -> Transaction {
        Transaction::builder(&schema())
            .amount(5.0, "USD")
            .build()
            .unwrap()
    }

    #[test]
    fn config_builds_an_ensemble() {
        let reg = ScorerRegistry::default();
        let spec = |text: &str| ScorerSpec {
            key: "fast.scorer".into(),
            table: text.parse::<toml::Table>().unwrap(),
            schema: schema(),
            base_dir: std::env::temp_dir(),
        };
        let s = reg
            .build(&spec(
                "kind = \"ensemble\"\n[[members]]\nkind = \"constant\"\nprobability = 0.1\nweight = 1\n[[members]]\nkind = \"constant\"\nprobability = 0.5\nweight = 3.0\n",
            ))
            .unwrap();
        assert!((s.score(&txn()).unwrap().probability - 0.4).abs() < 1e-6);
        assert!(
            s.info().version.contains("constant=0.1@1+constant=0.5@3"),
            "{}",
            s.info().version
        );
        for (bad, what) in [
            ("kind = \"ensemble\"\n", "members"),
            ("kind = \"ensemble\"\nmembers = []\n", "1 to 8"),
            ("kind = \"ensemble\"\n[[members]]\nkind = \"ensemble\"\n", "cannot be an ensemble"),
            ("kind = \"ensemble\"\n[[members]]\nkind = \"constant\"\nprobability = 0.1\nweight = \"x\"\n", "weight"),
            ("kind = \"ensemble\"\n[[members]]\nkind = \"constant\"\nprobability = 0.1\ncalibration = \"nope.json\"\n", "nope.json"),
            ("kind = \"ensemble\"\nextra = 1\n[[members]]\nkind = \"constant\"\nprobability = 0.1\n", "unknown key"),
        ] {
            let e = reg.build(&spec(bad)).err().unwrap_or_else(|| panic!("{bad} built"));
            assert!(e.to_string().contains(what), "{bad}: {e}");
        }
    }
}
