//! The tier comparison's statistics: AUPRC, recall at 1% and 5% false-positive rate, and
//! at an equal alert budget recall, value detection and cost; 95% intervals from a
//! cluster bootstrap over cards (Poisson(1) weights per card, so a card's rows move
//! together); the same definitions as `examples/evaluate.py`'s `weighted_metrics`. Used
//! by the quickstart's tier comparison and `examples/deep_realistic`.

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Poisson};

/// The figures of one system, in [`NAMES`] order.
type Figures = [f64; 6];
/// Column names of [`Figures`].
const NAMES: [&str; 6] = [
    "AUPRC",
    "recall@1%FPR",
    "recall@5%FPR",
    "recall@budget",
    "value detected",
    "cost",
];

/// A figure and its 95% interval.
pub type Interval = (f64, f64, f64);

/// Point figures and intervals per system, then the paired lift of each system over
/// `fast`.
#[derive(Debug, Clone)]
pub struct Report {
    rows: Vec<(String, Vec<Interval>)>,
}

/// Rows of `scores` ordered by score, highest first (ties in input order).
fn order(scores: &[f32]) -> Vec<u32> {
    let mut o: Vec<u32> = (0..scores.len() as u32).collect();
    o.sort_by(|&a, &b| scores[b as usize].total_cmp(&scores[a as usize]));
    o
}

/// [`Figures`] of one ranking with row weights `w`.
fn figures(
    y: &[bool],
    amount: &[f64],
    order: &[u32],
    w: &[f64],
    budget: f64,
    review: f64,
) -> Figures {
    let (mut frauds, mut legit, mut total, mut value) = (0.0, 0.0, 0.0, 0.0);
    for i in 0..y.len() {
        total += w[i];
        if y[i] {
            frauds += w[i];
            value += w[i] * amount[i];
        } else {
            legit += w[i];
        }
    }
    let (mut tp, mut fp, mut seen, mut ap) = (0.0, 0.0, 0.0, 0.0);
    let mut at = [0.0f64; 2];
    let (mut caught, mut alerts, mut value_caught) = (0.0, 0.0, 0.0);
    for &i in order {
        let (i, wi) = (i as usize, w[i as usize]);
        seen += wi;
        if y[i] {
            tp += wi;
        } else {
            fp += wi;
        }
        if y[i] && wi > 0.0 {
            ap += wi * tp / (tp + fp);
        }
        for (k, fpr) in [0.01, 0.05].into_iter().enumerate() {
            if fp <= fpr * legit {
                at[k] = tp;
            }
        }
        if seen <= budget * total {
            caught = tp;
            alerts = seen;
            if y[i] {
                value_caught += wi * amount[i];
            }
        }
    }
    let per = |x: f64| if frauds > 0.0 { x / frauds } else { 0.0 };
    [
        per(ap),
        per(at[0]),
        per(at[1]),
        per(caught),
        if value > 0.0 {
            value_caught / value
        } else {
            0.0
        },
        alerts * review + (value - value_caught),
    ]
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let x = p * (v.len() - 1) as f64;
    let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (x - lo as f64)
}

/// Bootstraps every system's figures (`cards`: each row's card, numbered from 0), and
/// the paired lift of every system after `fast` over it.
pub fn bootstrap(
    y: &[bool],
    amount: &[f64],
    cards: &[u32],
    systems: &[(&str, Vec<f32>)],
    reps: usize,
    budget: f64,
    review: f64,
) -> Report {
    let orders: Vec<Vec<u32>> = systems.iter().map(|(_, s)| order(s)).collect();
    let ones = vec![1.0; y.len()];
    let point: Vec<Figures> = orders
        .iter()
        .map(|o| figures(y, amount, o, &ones, budget, review))
        .collect();
    let n_cards = cards.iter().max().map_or(0, |&c| c as usize + 1);
    let poisson = Poisson::new(1.0).expect("a positive rate");
    let mut rng = StdRng::seed_from_u64(20);
    let mut draws: Vec<Vec<Figures>> = vec![Vec::with_capacity(reps); systems.len()];
    let mut w = vec![0.0; y.len()];
    for _ in 0..reps {
        let per_card: Vec<f64> = (0..n_cards).map(|_| poisson.sample(&mut rng)).collect();
        for (wi, &c) in w.iter_mut().zip(cards) {
            *wi = per_card[c as usize];
        }
        for (k, o) in orders.iter().enumerate() {
            draws[k].push(figures(y, amount, o, &w, budget, review));
        }
    }
    let interval = |point: f64, xs: Vec<f64>| -> Interval {
        (point, percentile(xs.clone(), 0.025), percentile(xs, 0.975))
    };
    let mut rows = Vec::new();
    for (k, (name, _)) in systems.iter().enumerate() {
        let cells = (0..NAMES.len())
            .map(|m| interval(point[k][m], draws[k].iter().map(|d| d[m]).collect()))
            .collect();
        rows.push((name.to_string(), cells));
    }
    if let Some(f) = systems.iter().position(|s| s.0 == "fast") {
        for (k, (name, _)) in systems.iter().enumerate().skip(f + 1) {
            let cells = (0..NAMES.len())
                .map(|m| {
                    let d = draws[k].iter().zip(&draws[f]).map(|(a, b)| a[m] - b[m]);
                    interval(point[k][m] - point[f][m], d.collect())
                })
                .collect();
            rows.push((format!("lift {name} over fast"), cells));
        }
    }
    Report { rows }
}

/// Prints the report as a table.
pub fn print_table(r: &Report) {
    print!("  {:<28}", "system");
    for n in NAMES {
        print!(" {n:>22}");
    }
    println!();
    for (name, cells) in &r.rows {
        print!("  {name:<28}");
        for (m, (x, lo, hi)) in cells.iter().enumerate() {
            let s = if NAMES[m] == "cost" {
                format!("{x:.0} [{lo:.0},{hi:.0}]")
            } else {
                format!("{x:.3} [{lo:.3},{hi:.3}]")
            };
            print!(" {s:>22}");
        }
        println!();
    }
}

/// AUPRC over the fast tier's gray zone: the rows its score ranks below its top
/// `band.0` and within its top `band.1` of traffic.
#[derive(Debug, Clone, Copy)]
pub struct InBand {
    /// Rows in the zone.
    pub rows: usize,
    /// Frauds among them.
    pub frauds: usize,
    /// AUPRC of the fast score there.
    pub fast: f64,
    /// AUPRC of the other score there.
    pub other: f64,
    /// other / fast with its 95% interval.
    pub ratio: Interval,
}

/// [`InBand`] of `other` against `fast`.
pub fn in_band(
    y: &[bool],
    cards: &[u32],
    fast: &[f32],
    other: &[f32],
    band: (f64, f64),
    reps: usize,
) -> InBand {
    let mut sorted = fast.to_vec();
    sorted.sort_by(f32::total_cmp);
    let q = |p: f64| sorted[((sorted.len().max(1) - 1) as f64 * p) as usize];
    let (hi, lo) = (q(1.0 - band.0), q(1.0 - band.1));
    let keep: Vec<usize> = (0..y.len())
        .filter(|&i| fast[i] < hi && fast[i] >= lo)
        .collect();
    let pick = |v: &[f32]| keep.iter().map(|&i| v[i]).collect::<Vec<_>>();
    let yy: Vec<bool> = keep.iter().map(|&i| y[i]).collect();
    let cc: Vec<u32> = keep.iter().map(|&i| cards[i]).collect();
    let (a, b, ratio) = auprc_ratio(
        &yy,
        &cc,
        &vec![1.0; keep.len()],
        &pick(fast),
        &pick(other),
        reps,
    );
    InBand {
        rows: keep.len(),
        frauds: yy.iter().filter(|&&f| f).count(),
        fast: a,
        other: b,
        ratio,
    }
}

/// AUPRC of `base` and of `other` with row weights `w` (e.g. inverse sampling rates),
/// and `other / base` with its 95% interval from a card-level bootstrap (`cards`
/// numbered from 0): `(base, other, ratio)`.
pub fn auprc_ratio(
    y: &[bool],
    cards: &[u32],
    w: &[f64],
    base: &[f32],
    other: &[f32],
    reps: usize,
) -> (f64, f64, Interval) {
    let zero = vec![0.0; y.len()];
    let (bo, oo) = (order(base), order(other));
    let ap = |o: &[u32], w: &[f64]| figures(y, &zero, o, w, 0.0, 0.0)[0];
    let (a, b) = (ap(&bo, w), ap(&oo, w));
    let n_cards = cards.iter().max().map_or(0, |&c| c as usize + 1);
    let poisson = Poisson::new(1.0).expect("a positive rate");
    let mut rng = StdRng::seed_from_u64(22);
    let ratios: Vec<f64> = (0..reps)
        .map(|_| {
            let per_card: Vec<f64> = (0..n_cards).map(|_| poisson.sample(&mut rng)).collect();
            let ww: Vec<f64> = w
                .iter()
                .zip(cards)
                .map(|(&x, &c)| x * per_card[c as usize])
                .collect();
            ap(&oo, &ww) / ap(&bo, &ww).max(1e-12)
        })
        .collect();
    (
        a,
        b,
        (
            b / a.max(1e-12),
            percentile(ratios.clone(), 0.025),
            percentile(ratios, 0.975),
        ),
    )
}

/// Weighted AUPRC of one score (`w`: row weights).
pub fn auprc_weighted(y: &[bool], scores: &[f32], w: &[f64]) -> f64 {
    figures(y, &vec![0.0; y.len()], &order(scores), w, 0.0, 0.0)[0]
}

/// Card ids numbered from 0 in order of appearance.
pub fn dense_ids(keys: impl Iterator<Item = u64>) -> Vec<u32> {
    let mut map = std::collections::HashMap::new();
    keys.map(|k| {
        let next = map.len() as u32;
        *map.entry(k).or_insert(next)
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_of_a_known_ranking() {
        // Ranked: F L F L L ... (2 frauds in 10 rows), amounts 10 each.
        let y = [
            true, false, true, false, false, false, false, false, false, false,
        ];
        let scores: Vec<f32> = (0..10).map(|i| 1.0 - i as f32 / 10.0).collect();
        let amount = [10.0; 10];
        let w = [1.0; 10];
        let f = figures(&y, &amount, &order(&scores), &w, 0.2, 5.0);
        // AP = (1/1 + 2/3) / 2.
        assert!((f[0] - (1.0 + 2.0 / 3.0) / 2.0).abs() < 1e-12, "{f:?}");
        // 1% FPR of 8 legitimate rows allows none: the first fraud only.
        assert_eq!(f[1], 0.5);
        // Budget 20% = two alerts: one fraud caught, half its value.
        assert_eq!((f[3], f[4]), (0.5, 0.5));
        // Cost: two reviews + the missed fraud's amount.
        assert_eq!(f[5], 2.0 * 5.0 + 10.0);
        // Weights act as copies: doubling every row changes no share.
        let g = figures(&y, &amount, &order(&scores), &[2.0; 10], 0.2, 5.0);
        assert_eq!(&g[..5], &f[..5]);
        assert_eq!(g[5], 2.0 * f[5]);
    }

    #[test]
    fn a_better_score_has_a_ratio_above_one_and_its_interval_too() {
        // 2,000 rows over 200 cards, 5% fraud; `good` separates them, `poor` barely.
        let n = 2_000;
        let y: Vec<bool> = (0..n).map(|i| i % 20 == 0).collect();
        let cards: Vec<u32> = (0..n as u32).map(|i| i % 200).collect();
        let good: Vec<f32> = (0..n)
            .map(|i| if y[i] { 0.6 } else { 0.0 } + (i * 7919 % 1000) as f32 / 2000.0)
            .collect();
        let poor: Vec<f32> = (0..n)
            .map(|i| if y[i] { 0.05 } else { 0.0 } + (i * 7919 % 1000) as f32 / 1000.0)
            .collect();
        let (a, b, r) = auprc_ratio(&y, &cards, &vec![1.0; n], &poor, &good, 100);
        assert!(b > 0.9 && a < 0.5, "{a} {b}");
        assert!(r.1 > 1.0 && r.0 >= r.1 && r.0 <= r.2, "{r:?}");
        assert_eq!(auprc_weighted(&y, &good, &vec![1.0; n]), b);
        let rep = bootstrap(
            &y,
            &vec![1.0; n],
            &cards,
            &[("fast", poor.clone()), ("tiered", good.clone())],
            50,
            0.05,
            5.0,
        );
        let lift = &rep.rows[2];
        assert_eq!(lift.0, "lift tiered over fast");
        assert!(lift.1[0].1 > 0.0, "AUPRC lift interval {:?}", lift.1[0]);
    }
}
