//! [`QuantPlan`]: the precision of every layer (optionally of every projection), the
//! embeddings and the output head, written in plain text:
//!
//! ```toml
//! [deep.scorer.quant]
//! "layers.0-7" = "f16"
//! "layers.8-27" = "awq_int4"        # group 128 (the default)
//! "layers.28-29" = "f16"
//! "layers.12.mlp.down_proj" = "int8" # a projection entry overrides its layer's entry
//! embeddings = "f16"
//! lm_head = "f32"
//! ```
//!
//! Precisions: `f32`, `f16`, `bf16`, `int8` (per-output-channel symmetric), `rtn_int4` and
//! `awq_int4` (asymmetric with a zero point per group; `_g32` / `_g64` / `_g128` picks the
//! group size, default 128). Two entries of the same kind covering one layer, ranges past
//! the model's last layer and unknown names are errors naming the entry.

use super::error::QuantError;
use std::fmt;

/// Storage precision of one weight matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    /// Unquantized.
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
    /// Symmetric 8-bit integers with one scale per output channel.
    Int8,
    /// 4-bit round-to-nearest, asymmetric (scale and zero point per `group` inputs).
    RtnInt4 {
        /// Input channels per scale / zero point.
        group: usize,
    },
    /// 4-bit with activation-aware scaling (AWQ) before the same quantizer as
    /// [`RtnInt4`](Self::RtnInt4); needs calibration.
    AwqInt4 {
        /// Input channels per scale / zero point.
        group: usize,
    },
}

/// Group sizes the INT4 formats accept.
pub const GROUP_SIZES: [usize; 3] = [32, 64, 128];
/// Default INT4 group size (AutoAWQ's).
pub const DEFAULT_GROUP: usize = 128;

impl Precision {
    /// The 4-bit group size, if this is an INT4 precision.
    pub fn group(self) -> Option<usize> {
        match self {
            Self::RtnInt4 { group } | Self::AwqInt4 { group } => Some(group),
            _ => None,
        }
    }

    /// Bytes needed to store an `out × inp` matrix (scales and zero points included).
    pub fn bytes(self, out: usize, inp: usize) -> usize {
        let n = out * inp;
        match self {
            Self::F32 => 4 * n,
            Self::F16 | Self::Bf16 => 2 * n,
            Self::Int8 => n + 4 * out,
            Self::RtnInt4 { group } | Self::AwqInt4 { group } => {
                let groups = inp.div_ceil(group);
                out * inp.div_ceil(2) + out * groups * 2 + out * groups.div_ceil(2)
            }
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::F32 => f.write_str("f32"),
            Self::F16 => f.write_str("f16"),
            Self::Bf16 => f.write_str("bf16"),
            Self::Int8 => f.write_str("int8"),
            Self::RtnInt4 { group } => write!(f, "rtn_int4_g{group}"),
            Self::AwqInt4 { group } => write!(f, "awq_int4_g{group}"),
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        let int4 = |rest: &str, awq: bool| -> Result<Self, String> {
            let group = if rest.is_empty() {
                DEFAULT_GROUP
            } else {
                let g = rest
                    .strip_prefix("_g")
                    .and_then(|g| g.parse::<usize>().ok())
                    .ok_or_else(|| format!("{s:?}: expected a group suffix like _g64"))?;
                if !GROUP_SIZES.contains(&g) {
                    return Err(format!(
                        "{s:?}: group size {g} not supported (use 32, 64 or 128)"
                    ));
                }
                g
            };
            Ok(if awq {
                Self::AwqInt4 { group }
            } else {
                Self::RtnInt4 { group }
            })
        };
        match t.as_str() {
            "f32" | "fp32" => Ok(Self::F32),
            "f16" | "fp16" => Ok(Self::F16),
            "bf16" => Ok(Self::Bf16),
            "int8" => Ok(Self::Int8),
            _ => {
                if let Some(rest) = t.strip_prefix("awq_int4") {
                    int4(rest, true)
                } else if let Some(rest) = t.strip_prefix("rtn_int4") {
                    int4(rest, false)
                } else {
                    Err(format!(
                        "unknown precision {s:?} (f32, f16, bf16, int8, rtn_int4[_gN], awq_int4[_gN])"
                    ))
                }
            }
        }
    }
}

/// The seven projections of a Llama block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proj {
    /// `self_attn.q_proj`.
    Q,
    /// `self_attn.k_proj`.
    K,
    /// `self_attn.v_proj`.
    V,
    /// `self_attn.o_proj`.
    O,
    /// `mlp.gate_proj`.
    Gate,
    /// `mlp.up_proj`.
    Up,
    /// `mlp.down_proj`.
    Down,
}

impl Proj {
    /// All projections in block order.
    pub const ALL: [Proj; 7] = [
        Proj::Q,
        Proj::K,
        Proj::V,
        Proj::O,
        Proj::Gate,
        Proj::Up,
        Proj::Down,
    ];

    /// Hugging Face name inside a layer (`self_attn.q_proj`, ...).
    pub fn hf_name(self) -> &'static str {
        match self {
            Proj::Q => "self_attn.q_proj",
            Proj::K => "self_attn.k_proj",
            Proj::V => "self_attn.v_proj",
            Proj::O => "self_attn.o_proj",
            Proj::Gate => "mlp.gate_proj",
            Proj::Up => "mlp.up_proj",
            Proj::Down => "mlp.down_proj",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        let s = s
            .strip_prefix("self_attn.")
            .or_else(|| s.strip_prefix("mlp."))
            .unwrap_or(s);
        Some(match s {
            "q_proj" => Proj::Q,
            "k_proj" => Proj::K,
            "v_proj" => Proj::V,
            "o_proj" => Proj::O,
            "gate_proj" => Proj::Gate,
            "up_proj" => Proj::Up,
            "down_proj" => Proj::Down,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Layers {
        from: usize,
        to: usize,
        proj: Option<Proj>,
    },
    Embeddings,
    Head,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    key: String,
    target: Target,
    precision: Precision,
}

/// A per-layer precision plan (see the module docs). Unlisted weights stay `f32`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QuantPlan {
    entries: Vec<Entry>,
}

/// A plan applied to a model with a known number of layers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedPlan {
    /// `layers[i][p]`: precision of projection `p` (in [`Proj::ALL`] order) of layer `i`.
    pub layers: Vec<[Precision; 7]>,
    /// Token embeddings.
    pub embeddings: Precision,
    /// Output head (`None`: tied to the embeddings and not listed, so it shares them).
    pub head: Option<Precision>,
}

impl ResolvedPlan {
    /// Precision of `proj` in `layer`.
    pub fn get(&self, layer: usize, proj: Proj) -> Precision {
        self.layers[layer][proj as usize]
    }

    /// Whether any projection needs AWQ calibration.
    pub fn needs_awq(&self) -> bool {
        self.layers
            .iter()
            .flatten()
            .any(|p| matches!(p, Precision::AwqInt4 { .. }))
    }
}

fn plan_err(key: &str, reason: impl Into<String>) -> QuantError {
    QuantError::Plan {
        entry: key.to_owned(),
        reason: reason.into(),
    }
}

fn parse_target(key: &str) -> Result<Target, QuantError> {
    match key {
        "embeddings" | "embed_tokens" | "model.embed_tokens" => return Ok(Target::Embeddings),
        "lm_head" | "head" => return Ok(Target::Head),
        _ => {}
    }
    let rest = key
        .strip_prefix("layers.")
        .or_else(|| key.strip_prefix("model.layers."))
        .ok_or_else(|| {
            plan_err(
                key,
                "expected layers.N, layers.A-B, layers.A-B.<projection>, embeddings or lm_head",
            )
        })?;
    let (range, proj) = match rest.split_once('.') {
        Some((r, p)) => {
            let proj = Proj::parse(p).ok_or_else(|| {
                plan_err(
                    key,
                    format!("unknown projection {p:?} (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)"),
                )
            })?;
            (r, Some(proj))
        }
        None => (rest, None),
    };
    let num = |s: &str| {
        s.trim()
            .parse::<usize>()
            .map_err(|_| plan_err(key, format!("{s:?} is not a layer number")))
    };
    let (from, to) = match range.split_once('-') {
        Some((a, b)) => (num(a)?, num(b)?),
        None => {
            let n = num(range)?;
            (n, n)
        }
    };
    if from > to {
        return Err(plan_err(key, format!("empty range {from}-{to}")));
    }
    Ok(Target::Layers { from, to, proj })
}

impl QuantPlan {
    /// An empty plan: everything `f32`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `key = precision` (see the module docs), checking the entry on its own;
    /// overlaps and ranges are checked by [`resolve`](Self::resolve).
    pub fn set(&mut self, key: &str, precision: &str) -> Result<&mut Self, QuantError> {
        let target = parse_target(key.trim())?;
        let precision = precision
            .parse::<Precision>()
            .map_err(|e| plan_err(key, e))?;
        self.entries.push(Entry {
            key: key.trim().to_owned(),
            target,
            precision,
        });
        Ok(self)
    }

    /// Builds a plan from `key = "precision"` pairs (a TOML table's string values).
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, QuantError> {
        let mut p = Self::new();
        for (k, v) in pairs {
            p.set(k, v)?;
        }
        Ok(p)
    }

    /// Every layer of an `n`-layer model at `precision` (embeddings and head unlisted).
    pub fn uniform(layers: usize, precision: Precision) -> Self {
        let mut p = Self::new();
        if layers > 0 {
            p.entries.push(Entry {
                key: format!("layers.0-{}", layers - 1),
                target: Target::Layers {
                    from: 0,
                    to: layers - 1,
                    proj: None,
                },
                precision,
            });
        }
        p
    }

    /// Whether the plan lists nothing (an `f32` model).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Applies the plan to a model of `layers` layers (`tied`: the head shares the
    /// embeddings). Errors name the entry: out of range, or two entries of the same
    /// kind (layer or projection) covering one weight.
    pub fn resolve(&self, layers: usize, tied: bool) -> Result<ResolvedPlan, QuantError> {
        let mut out = vec![[Precision::F32; 7]; layers];
        // Who set each (layer, proj): (entry index, projection-specific?).
        let mut owner: Vec<[Option<(usize, bool)>; 7]> = vec![[None; 7]; layers];
        let mut embeddings: Option<(usize, Precision)> = None;
        let mut head: Option<(usize, Precision)> = None;
        for (ei, e) in self.entries.iter().enumerate() {
            match e.target {
                Target::Embeddings | Target::Head => {
                    let slot = if e.target == Target::Embeddings {
                        &mut embeddings
                    } else {
                        &mut head
                    };
                    if let Some((prev, _)) = slot {
                        return Err(plan_err(
                            &e.key,
                            format!("also set by {:?}", self.entries[*prev].key),
                        ));
                    }
                    *slot = Some((ei, e.precision));
                }
                Target::Layers { from, to, proj } => {
                    if to >= layers {
                        return Err(plan_err(
                            &e.key,
                            format!(
                                "layer {to} does not exist (the model has layers 0-{})",
                                layers.saturating_sub(1)
                            ),
                        ));
                    }
                    let specific = proj.is_some();
                    for l in from..=to {
                        for p in Proj::ALL {
                            if proj.is_some_and(|q| q != p) {
                                continue;
                            }
                            match owner[l][p as usize] {
                                Some((prev, prev_specific)) if prev_specific == specific => {
                                    return Err(plan_err(
                                        &e.key,
                                        format!(
                                            "overlaps {:?} at layer {l}",
                                            self.entries[prev].key
                                        ),
                                    ));
                                }
                                // A projection entry beats a whole-layer entry, in any order.
                                Some((_, true)) if !specific => {}
                                _ => {
                                    owner[l][p as usize] = Some((ei, specific));
                                    out[l][p as usize] = e.precision;
                                }
                            }
                        }
                    }
                }
            }
        }
        let embeddings = embeddings.map_or(Precision::F32, |(_, p)| p);
        let head = match head {
            Some((_, p)) => Some(p),
            None if tied => None,
            None => Some(Precision::F32),
        };
        if let Some(Precision::AwqInt4 { .. }) = head {
            return Err(plan_err(
                "lm_head",
                "awq_int4 is for block projections (its scales fold into the preceding norm); use rtn_int4 or int8",
            ));
        }
        if let Precision::AwqInt4 { .. } = embeddings {
            return Err(plan_err(
                "embeddings",
                "awq_int4 is for block projections; use rtn_int4, int8 or f16",
            ));
        }
        Ok(ResolvedPlan {
            layers: out,
            embeddings,
            head,
        })
    }
}

/// Canonical text (`layers.0-7=f16,layers.8-27=awq_int4_g128`), part of prefix-cache
/// keys and model identities; `f32` for the empty plan.
impl fmt::Display for QuantPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.entries.is_empty() {
            return f.write_str("f32");
        }
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}={}", e.key, e.precision)?;
        }
        Ok(())
    }
}

/// Parses the canonical text form (`key=precision` pairs separated by commas; `f32` or
/// an empty string for no entries).
impl std::str::FromStr for QuantPlan {
    type Err = QuantError;
    fn from_str(s: &str) -> Result<Self, QuantError> {
        let s = s.trim();
        if s.is_empty() || s == "f32" {
            return Ok(Self::new());
        }
        let mut p = Self::new();
        for part in s.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| plan_err(part, "expected key=precision"))?;
            p.set(k.trim().trim_matches('"'), v.trim().trim_matches('"'))?;
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_issue_example() {
        let p: QuantPlan = "layers.0-7=f16,layers.8-27=awq_int4,layers.28-29=f16"
            .parse()
            .unwrap();
        let r = p.resolve(30, true).unwrap();
        assert_eq!(r.get(0, Proj::Q), Precision::F16);
        assert_eq!(r.get(8, Proj::Down), Precision::AwqInt4 { group: 128 });
        assert_eq!(r.get(29, Proj::Up), Precision::F16);
        assert!(r.needs_awq());
        assert_eq!(r.head, None);
        assert_eq!(p.to_string().parse::<QuantPlan>().unwrap(), p);
    }

    #[test]
    fn projection_entry_overrides_layer_entry_in_any_order() {
        for order in [
            [
                ("layers.12.mlp.down_proj", "int8"),
                ("layers.0-29", "rtn_int4_g64"),
            ],
            [
                ("layers.0-29", "rtn_int4_g64"),
                ("layers.12.down_proj", "int8"),
            ],
        ] {
            let r = QuantPlan::from_pairs(order)
                .unwrap()
                .resolve(30, false)
                .unwrap();
            assert_eq!(r.get(12, Proj::Down), Precision::Int8);
            assert_eq!(r.get(12, Proj::Up), Precision::RtnInt4 { group: 64 });
            assert_eq!(r.head, Some(Precision::F32));
        }
    }

    #[test]
    fn errors_name_the_entry() {
        let e = QuantPlan::from_pairs([("layers.0-7", "f16"), ("layers.7-9", "int8")])
            .unwrap()
            .resolve(30, true)
            .unwrap_err();
        assert!(e.to_string().contains("layers.7-9") && e.to_string().contains("layers.0-7"));
        let e = QuantPlan::from_pairs([("layers.28-30", "f16")])
            .unwrap()
            .resolve(30, true)
            .unwrap_err();
        assert!(e.to_string().contains("layers.28-30") && e.to_string().contains("0-29"));
        for (k, v, want) in [
            ("layers.x", "f16", "not a layer number"),
            ("layers.9-3", "f16", "empty range"),
            ("blocks.1", "f16", "expected layers.N"),
            ("layers.1.attn", "f16", "unknown projection"),
            ("layers.1", "int3", "unknown precision"),
            ("layers.1", "awq_int4_g100", "group size 100"),
            ("layers.1", "awq_int4g64", "group suffix"),
        ] {
            let e = QuantPlan::new().set(k, v).map(|_| ()).unwrap_err();
            assert!(e.to_string().contains(k), "{e}");
            assert!(e.to_string().contains(want), "{e}");
        }
        let e = QuantPlan::from_pairs([("lm_head", "awq_int4")])
            .unwrap()
            .resolve(2, false)
            .unwrap_err();
        assert!(e.to_string().contains("lm_head"));
    }

    #[test]
    fn int4_bytes_are_under_a_third_of_f16() {
        for g in GROUP_SIZES {
            let p = Precision::AwqInt4 { group: g };
            let r = p.bytes(1536, 576) as f64 / Precision::F16.bytes(1536, 576) as f64;
            assert!(r <= 0.3, "g{g}: {r}");
        }
    }
}
