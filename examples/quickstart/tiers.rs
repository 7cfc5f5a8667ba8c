//! The tier comparison's statistics: AUPRC, recall at 1% and 5% false-positive rate, and
//! at an equal alert budget recall, value detection and cost; 95% intervals from a
//! cluster bootstrap over cards (Poisson(1) weights per card, so a card's rows move
//! together); the same definitions as `examples/evaluate.py`'s `weighted_metrics`.

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
    let yy: Vec<bool> = keep.iter().map(|&i| y[i]).collect();
    let zero = vec![0.0; keep.len()];
    let fo = order(&keep.iter().map(|&i| fast[i]).collect::<Vec<_>>());
    let oo = order(&keep.iter().map(|&i| other[i]).collect::<Vec<_>>());
    let ap = |o: &[u32], w: &[f64]| figures(&yy, &zero, o, w, 0.0, 0.0)[0];
    let ones = vec![1.0; keep.len()];
    let (a, b) = (ap(&fo, &ones), ap(&oo, &ones));
    let n_cards = cards.iter().max().map_or(0, |&c| c as usize + 1);
    let poisson = Poisson::new(1.0).expect("a positive rate");
    let mut rng = StdRng::seed_from_u64(22);
    let ratios: Vec<f64> = (0..reps)
        .map(|_| {
            let per_card: Vec<f64> = (0..n_cards).map(|_| poisson.sample(&mut rng)).collect();
            let w: Vec<f64> = keep.iter().map(|&i| per_card[cards[i] as usize]).collect();
            ap(&oo, &w) / ap(&fo, &w).max(1e-12)
        })
        .collect();
    InBand {
        rows: keep.len(),
        frauds: yy.iter().filter(|&&f| f).count(),
        fast: a,
        other: b,
        ratio: (
            b / a.max(1e-12),
            percentile(ratios.clone(), 0.025),
            percentile(ratios, 0.975),
        ),
    }
}
