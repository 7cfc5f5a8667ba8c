//! Fitting a [`HeadWeights`] on cached embeddings (the encoder stays frozen): logistic
//! regression or a one-hidden-layer ReLU MLP, binary cross-entropy with L2, Adam on
//! shuffled mini-batches, deterministic for a seed. Written here (a few dozen lines of
//! gradient code) rather than pulling a training framework into the crate.

use super::head::{sigmoid, HeadWeights};

/// Training settings.
#[derive(Debug, Clone, PartialEq)]
pub struct FitOptions {
    /// 0: logistic; otherwise the MLP's hidden units.
    pub units: usize,
    /// Passes over the data.
    pub epochs: usize,
    /// Adam step size.
    pub lr: f32,
    /// L2 penalty on the weights (not the biases).
    pub l2: f32,
    /// Mini-batch rows.
    pub batch: usize,
    /// Weight of a positive row's loss (class imbalance: fraud is rare).
    pub pos_weight: f32,
    /// Seed of the shuffles and the MLP's initial weights.
    pub seed: u64,
}

impl Default for FitOptions {
    fn default() -> Self {
        Self {
            units: 0,
            epochs: 40,
            lr: 0.01,
            l2: 1e-4,
            batch: 256,
            pos_weight: 1.0,
            seed: 7,
        }
    }
}

struct Adam {
    m: Vec<f32>,
    v: Vec<f32>,
    t: i32,
}

impl Adam {
    fn new(n: usize) -> Self {
        Self {
            m: vec![0.0; n],
            v: vec![0.0; n],
            t: 0,
        }
    }
    fn step(&mut self, p: &mut [f32], g: &[f32], lr: f32) {
        self.t += 1;
        let (b1, b2) = (0.9f32, 0.999f32);
        let c1 = 1.0 - b1.powi(self.t);
        let c2 = 1.0 - b2.powi(self.t);
        for i in 0..p.len() {
            self.m[i] = b1 * self.m[i] + (1.0 - b1) * g[i];
            self.v[i] = b2 * self.v[i] + (1.0 - b2) * g[i] * g[i];
            p[i] -= lr * (self.m[i] / c1) / ((self.v[i] / c2).sqrt() + 1e-8);
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Fits a head on `x` (`rows × dim`, row-major) and labels `y`.
///
/// # Panics
/// If `x.len() != y.len() * dim` or `dim == 0` (a caller bug, not data).
pub fn fit_head(x: &[f32], dim: usize, y: &[bool], o: &FitOptions) -> HeadWeights {
    assert!(dim > 0 && x.len() == y.len() * dim, "x is rows × dim");
    let n = y.len();
    let mut rng = Rng(o.seed);
    let units = o.units;
    // Parameters in one vector: logistic [w(dim), b]; MLP [w1(u·dim), b1(u), w2(u), b2].
    let np = if units == 0 {
        dim + 1
    } else {
        units * dim + 2 * units + 1
    };
    let mut p = vec![0f32; np];
    if units > 0 {
        let s = (2.0 / dim as f32).sqrt();
        for w in &mut p[..units * dim] {
            *w = (rng.unit() * 2.0 - 1.0) * s;
        }
        let s2 = (1.0 / units as f32).sqrt();
        for w in &mut p[units * dim + units..units * dim + 2 * units] {
            *w = (rng.unit() * 2.0 - 1.0) * s2;
        }
    }
    let mut adam = Adam::new(np);
    let mut g = vec![0f32; np];
    let mut order: Vec<usize> = (0..n).collect();
    let mut hidden = vec![0f32; units];
    for _ in 0..o.epochs {
        for i in (1..n).rev() {
            order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
        }
        for chunk in order.chunks(o.batch.max(1)) {
            g.iter_mut().for_each(|v| *v = 0.0);
            for &r in chunk {
                let e = &x[r * dim..(r + 1) * dim];
                let wt = if y[r] { o.pos_weight } else { 1.0 };
                let target = if y[r] { 1.0 } else { 0.0 };
                if units == 0 {
                    let z: f32 = p[..dim].iter().zip(e).map(|(a, b)| a * b).sum::<f32>() + p[dim];
                    let d = wt * (sigmoid(z) - target);
                    for (gi, ei) in g[..dim].iter_mut().zip(e) {
                        *gi += d * ei;
                    }
                    g[dim] += d;
                } else {
                    let (w1, rest) = p.split_at(units * dim);
                    let (b1, rest) = rest.split_at(units);
                    let (w2, b2) = rest.split_at(units);
                    let mut z = b2[0];
                    for u in 0..units {
                        let a: f32 = w1[u * dim..(u + 1) * dim]
                            .iter()
                            .zip(e)
                            .map(|(a, b)| a * b)
                            .sum::<f32>()
                            + b1[u];
                        hidden[u] = a.max(0.0);
                        z += w2[u] * hidden[u];
                    }
                    let d = wt * (sigmoid(z) - target);
                    let (gw1, grest) = g.split_at_mut(units * dim);
                    let (gb1, grest) = grest.split_at_mut(units);
                    let (gw2, gb2) = grest.split_at_mut(units);
                    gb2[0] += d;
                    for u in 0..units {
                        gw2[u] += d * hidden[u];
                        if hidden[u] > 0.0 {
                            let du = d * w2[u];
                            gb1[u] += du;
                            for (gi, ei) in gw1[u * dim..(u + 1) * dim].iter_mut().zip(e) {
                                *gi += du * ei;
                            }
                        }
                    }
                }
            }
            let inv = 1.0 / chunk.len() as f32;
            let weights = if units == 0 { dim } else { units * dim };
            for i in 0..np {
                g[i] *= inv;
                let is_weight = i < weights
                    || (units > 0 && (units * dim + units..units * dim + 2 * units).contains(&i));
                if is_weight {
                    g[i] += o.l2 * p[i];
                }
            }
            adam.step(&mut p, &g, o.lr);
        }
    }
    if units == 0 {
        HeadWeights::Logistic {
            b: p[dim],
            w: p.truncate_into(dim),
        }
    } else {
        let b2 = p[np - 1];
        let w2 = p[units * dim + units..units * dim + 2 * units].to_vec();
        let b1 = p[units * dim..units * dim + units].to_vec();
        p.truncate(units * dim);
        HeadWeights::Mlp { w1: p, b1, w2, b2 }
    }
}

trait TruncateInto {
    fn truncate_into(self, n: usize) -> Vec<f32>;
}
impl TruncateInto for Vec<f32> {
    fn truncate_into(mut self, n: usize) -> Vec<f32> {
        self.truncate(n);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separates_a_linear_and_a_nonlinear_problem() {
        let mut rng = Rng(3);
        let (n, dim) = (2000, 4);
        let mut x = Vec::with_capacity(n * dim);
        let (mut lin, mut xor) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let r: Vec<f32> = (0..dim).map(|_| rng.unit() * 2.0 - 1.0).collect();
            lin.push(r[0] + 0.5 * r[1] > 0.1);
            xor.push((r[0] > 0.0) != (r[1] > 0.0));
            x.extend(r);
        }
        let acc = |h: &HeadWeights, y: &[bool]| {
            let head = super::super::head::TextHead {
                meta: super::super::head::HeadMeta {
                    format: super::super::head::HEAD_FORMAT.into(),
                    encoder: super::super::config::EncoderId {
                        name: "t".into(),
                        hidden_size: dim,
                        layers: 1,
                        weights_fnv64: "0".into(),
                    },
                    pooling: super::super::Pooling::Mean,
                    normalize: false,
                    max_tokens: 8,
                    trained: String::new(),
                },
                weights: h.clone(),
            };
            (0..n)
                .filter(|&r| (head.probability(&x[r * dim..(r + 1) * dim]) > 0.5) == y[r])
                .count() as f64
                / n as f64
        };
        let l = fit_head(&x, dim, &lin, &FitOptions::default());
        assert!(acc(&l, &lin) > 0.97, "logistic {}", acc(&l, &lin));
        let logistic_on_xor = fit_head(&x, dim, &xor, &FitOptions::default());
        let mlp = fit_head(
            &x,
            dim,
            &xor,
            &FitOptions {
                units: 16,
                epochs: 80,
                ..FitOptions::default()
            },
        );
        assert!(acc(&logistic_on_xor, &xor) < 0.7);
        assert!(acc(&mlp, &xor) > 0.9, "mlp {}", acc(&mlp, &xor));
        assert_eq!(
            mlp,
            fit_head(
                &x,
                dim,
                &xor,
                &FitOptions {
                    units: 16,
                    epochs: 80,
                    ..FitOptions::default()
                }
            )
        );
    }
}
