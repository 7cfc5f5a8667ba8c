//! Deploys and rollbacks under load: no decision lost, failed or late, and each one
//! records a version that was serving when it was made. And warm-up: a freshly
//! deployed model's first decisions are as fast as its steady state.

use super::*;
use risk_core::deploy::{Candidate, Target};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

#[test]
fn hundred_deploys_and_rollbacks_under_four_deciding_threads() {
    let e = Engine::builder(schema())
        .rules(Arc::new(AmountRules(0.8)))
        .fast(Model::new("a", 0.8, 0.0))
        // Real time; a deadline far above any scheduling pause of a loaded shared machine,
        // so a miss would mean the swap blocked a caller.
        .fast_deadline(Duration::from_secs(5))
        .deploy_config(DeployConfig {
            sample_every: 4,
            ..quiet()
        })
        .build()
        .unwrap();
    let events = e.deploy_events();
    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4u64)
        .map(|k| {
            let (e, stop, decided) = (e.clone(), Arc::clone(&stop), Arc::clone(&decided));
            std::thread::spawn(move || {
                let s = e.schema().clone();
                let mut out = Vec::new();
                let mut id = k << 40;
                while !stop.load(Ordering::Relaxed) {
                    id += 1;
                    let e0 = e.deploy_epoch();
                    let d = e.decide(&txn(&s, id, 10_000)).expect("no decision fails");
                    let e1 = e.deploy_epoch();
                    out.push((e0, e1, d.versions.rules, d.versions.fast, d.fallback));
                    decided.fetch_add(1, Ordering::Relaxed);
                }
                out
            })
        })
        .collect();
    let wait_for = |n: u64| {
        let target = decided.load(Ordering::Relaxed) + n;
        while decided.load(Ordering::Relaxed) < target {
            std::thread::yield_now();
        }
    };
    wait_for(2000);
    let t0 = std::time::Instant::now();
    let (fast_b, rules_b) = (Model::new("b", 0.81, 0.0), Arc::new(AmountRules(0.82)));
    for _ in 0..25 {
        e.deploy(Target::Fast, Candidate::scorer(fast_b.clone()), immediate())
            .unwrap();
        wait_for(300);
        e.rollback(Target::Fast, "cycle").unwrap();
        wait_for(300);
        e.deploy(
            Target::Rules,
            Candidate::scorer(rules_b.clone()),
            immediate(),
        )
        .unwrap();
        wait_for(300);
        e.rollback(Target::Rules, "cycle").unwrap();
        wait_for(300);
    }
    let secs = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let all: Vec<_> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    // The serving versions at each epoch, from the events (one swap per call).
    let v0 = e.versions();
    let mut at: HashMap<u64, (VersionId, Option<VersionId>)> = HashMap::new();
    let mut cur = (v0.rules, v0.fast);
    at.insert(0, cur);
    let mut n_events = 0;
    while let Ok(ev) = events.try_recv() {
        let id = |name: &str| {
            let h = u64::from_str_radix(&ev.version.hash, 16).unwrap();
            VersionId::new(name, &ev.version.version, h)
        };
        match ev.target {
            Target::Fast => cur.1 = Some(id(&ev.version.name)),
            Target::Rules => cur.0 = id(&ev.version.name),
            _ => unreachable!(),
        }
        at.insert(ev.epoch, cur);
        n_events += 1;
    }
    assert_eq!(n_events, 100, "100 deploys and rollbacks");
    assert_eq!(e.deploy_epoch(), 100);
    let rate = all.len() as f64 / secs;
    println!(
        "{} decisions over 100 deploys/rollbacks in {secs:.2} s ({rate:.0}/s on 4 threads)",
        all.len()
    );
    let mut fallbacks = 0;
    for (e0, e1, rules, fast, fallback) in &all {
        let ok = (*e0..=*e1).any(|ep| at.get(&ep) == Some(&(*rules, *fast)));
        assert!(
            ok,
            "decision recorded {rules}/{fast:?}, not serving in epochs {e0}..={e1}"
        );
        fallbacks += usize::from(fallback.is_some());
    }
    assert_eq!(
        fallbacks, 0,
        "no decision fell back (errors or deadline misses)"
    );
    assert!(all.len() >= 2000 + 100 * 300);
}

/// The first decision of a freshly deployed model against the first decision after the
/// same control-plane work without a deploy (1024 scores, a status read): any CPU cache
/// the deploy's gate evicted is evicted in both, so what remains is whether the new
/// version itself was warm. Also printed: the steady state.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "a latency ratio: meaningful in the README's --release run only"
)]
fn a_freshly_deployed_model_is_warm_from_its_first_decision() {
    let clock = ManualClock::new();
    let e = engine(Model::new("0", 0.8, 0.0), &clock);
    let mut next = 0;
    run(&e, &mut next, 600, 1000);
    let s = e.schema().clone();
    let time = |e: &Engine, id: u64| {
        let t = txn(&s, id, 1000);
        let t0 = std::time::Instant::now();
        let d = e.decide(&t).unwrap();
        let ns = t0.elapsed().as_nanos() as u64;
        assert!(d.model_score.is_some());
        ns
    };
    let (mut fresh, mut same, mut steady) = (Vec::new(), Vec::new(), Vec::new());
    let other = Model::new("work", 0.8, 0.0);
    for k in 0..31 {
        let m = Model::new(&format!("w{k}"), 0.8, 0.001 * k as f32);
        e.deploy(Target::Fast, Candidate::scorer(m), immediate())
            .unwrap();
        fresh.push(time(&e, 90_000 + k));
        for j in 0..100 {
            steady.push(time(&e, 200_000 + k * 1000 + j));
        }
        for j in 0..1024 {
            let _ = other.score(&txn(&s, 300_000 + j, 1000));
        }
        let _ = e.deploy_status(Target::Fast);
        same.push(time(&e, 95_000 + k));
    }
    let median = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (f, w, st) = (median(&mut fresh), median(&mut same), median(&mut steady));
    println!(
        "first decision: of a freshly deployed model {f} ns, of the serving one after the same \
         work {w} ns; steady state {st} ns"
    );
    assert!(
        f <= 2 * w.max(1),
        "fresh model's first call {f} ns vs {w} ns"
    );
}
