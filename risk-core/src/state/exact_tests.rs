//! The event log against a direct computation over every event kept, on random streams
//! with out-of-order reads and inserts, pruning, the bound and labels.

use super::*;

/// The window `(s, e]` over `evs` (arrival order), computed directly.
fn direct(evs: &[(i64, f64)], s: i64, e: i64) -> (f64, f64, f64, f64, f64) {
    let inside: Vec<f64> = evs
        .iter()
        .filter(|x| x.0 > s && x.0 <= e)
        .map(|x| x.1)
        .collect();
    let sum: f64 = inside.iter().sum();
    let sq: f64 = inside.iter().map(|v| v * v).sum();
    let mn = inside.iter().cloned().fold(f64::NAN, f64::min);
    let mx = inside.iter().cloned().fold(f64::NAN, f64::max);
    (inside.len() as f64, sum, sq, mn, mx)
}

fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn the_log_equals_a_direct_window_on_random_streams() {
    let mut x = 0x853c_49e6_748f_ea9bu64;
    let mut next = move || {
        x = crate::hash::splitmix(x);
        x
    };
    let (mut checked, mut fallbacks) = (0, 0);
    for round in 0..200 {
        let span = 1 + (next() % 5_000) as i64;
        let delay = if round % 3 == 0 {
            (next() % 3_000) as i64
        } else {
            0
        };
        let win = Win { span, delay };
        let lateness = (next() % 2_000) as i64;
        let max = 1 + (next() % 64) as usize;
        let mut log = EventLog::default();
        let mut all: Vec<(i64, f64)> = Vec::new();
        let mut clock = NO_TIME;
        let mut t = 1_000_000i64;
        for _ in 0..300 {
            t += (next() % 400) as i64;
            // Some events come late (up to the lateness bound: later ones are counted at
            // the clock by the store, as here).
            let ts = if next() % 5 == 0 {
                t - (next() % 3_000) as i64
            } else {
                t
            };
            clock = clock.max(ts);
            let te = if clock - ts <= lateness { ts } else { clock };
            let v = (next() % 10_000) as f64 / 100.0;
            let mut out = GroupRead::default();
            let complete = log.read(win, te, true, false, &mut out);
            let (s, e) = win.bounds(te);
            if complete {
                let (n, sum, sq, mn, mx) = direct(&all, s, e);
                assert_eq!(out.n, n, "round {round}: count at {te}");
                assert!(
                    close(out.sum, sum),
                    "round {round}: sum {} vs {sum}",
                    out.sum
                );
                assert!(close(out.sumsq, sq), "round {round}: sumsq");
                assert!(
                    close(out.min, mn) && close(out.max, mx),
                    "round {round}: min/max"
                );
                checked += 1;
            } else {
                fallbacks += 1;
            }
            let keep = win.keep_after(clock, lateness);
            log.insert(win, te, v, max, keep);
            all.push((te, v));
            // Pruned events are in no window a read can reach: forget them too.
            all.retain(|x| x.0 > keep);
            assert!(log.len() <= max);
        }
    }
    assert!(checked > 20_000, "{checked}");
    assert!(
        fallbacks > 0,
        "the bound was never reached: the test cannot tell"
    );
}

#[test]
fn labels_mark_and_clear_one_event_of_their_time() {
    let win = Win {
        span: 100,
        delay: 50,
    };
    let mut log = EventLog::default();
    for (t, _) in [(10, 0), (20, 0), (20, 0), (30, 0)] {
        log.insert(win, t, 0.0, 100, NO_TIME);
    }
    let mut out = GroupRead::default();
    assert!(log.read(win, 80, false, true, &mut out));
    assert_eq!(
        (out.txns, out.frauds),
        (4.0, 0.0),
        "(−70, 30]: 10, 20, 20, 30"
    );
    assert!(log.label(20, 1));
    assert!(log.label(20, 1));
    assert!(!log.label(20, 1), "both transactions at 20 are marked");
    assert!(!log.label(25, 1), "no transaction at 25");
    assert!(log.read(win, 80, false, true, &mut out));
    assert_eq!((out.txns, out.frauds), (4.0, 2.0));
    assert!(log.label(20, -1));
    assert!(log.read(win, 85, false, true, &mut out));
    assert_eq!(out.frauds, 1.0, "the cursor follows the retraction");
    // An earlier read (out of order) scans: (−90, 10].
    assert!(log.read(win, 60, false, true, &mut out));
    assert_eq!((out.txns, out.frauds), (1.0, 0.0));
}

#[test]
fn a_restored_log_rebuilds_its_cursor() {
    let win = Win {
        span: 1_000,
        delay: 0,
    };
    let mut log = EventLog::default();
    for i in 0..50 {
        log.insert(win, i * 100, i as f64, 1_000, NO_TIME);
        let mut out = GroupRead::default();
        log.read(win, i * 100, false, false, &mut out);
    }
    let bytes = postcard::to_allocvec(&log).unwrap();
    let mut back: EventLog = postcard::from_bytes(&bytes).unwrap();
    assert!(back.valid(1_000));
    assert!(!back.valid(10), "more events than the bound");
    back.rebuild(win);
    let (mut a, mut b) = (GroupRead::default(), GroupRead::default());
    log.read(win, 5_000, true, false, &mut a);
    back.read(win, 5_000, true, false, &mut b);
    assert_eq!(a, b);
    assert_eq!(a.n, 9.0, "(4000, 5000]: 4100..=4900");
}

#[test]
fn no_time_is_the_records() {
    assert_eq!(NO_TIME, crate::state::record::NO_TIME);
}
