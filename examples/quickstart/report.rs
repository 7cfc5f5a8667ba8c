//! The quickstart's printed reports: rule statistics, decision counts, latency
//! percentiles, entity state and the audit trail.

use risk_core::audit::{Query, SegmentLog};
use risk_core::{Engine, LatencySummary, MetricsSnapshot, Tier};
use risk_rules::{Hits, RuleSet};
use std::time::Instant;

/// Per rule: how often it fired, its precision against the labels, and the decisions it
/// made (as the deciding hard rule, or as the top reason when the rule tier decided).
pub fn print_rules(
    set: &RuleSet,
    rows: &[risk_core::synth::Labeled],
    decisions: &[risk_core::Decision],
    m: &MetricsSnapshot,
) {
    let n = set.rules().len();
    let (mut fired, mut fired_fraud, mut decided) = (vec![0u64; n], vec![0u64; n], vec![0u64; n]);
    let mut hits = Hits::new();
    for (r, d) in rows.iter().zip(decisions) {
        set.evaluate(&r.txn.features, &mut hits);
        for &i in hits.indices() {
            fired[i as usize] += 1;
            fired_fraud[i as usize] += r.is_fraud as u64;
        }
        // The deciding rule: the hard rule whose action was taken, else (when the rule
        // tier decided by threshold) the rule with the largest contribution.
        let rules = set.rules();
        let decider = if d.hard_rule {
            hits.indices().iter().copied().find(|&i| {
                let r = &rules[i as usize];
                r.hard && r.outcome == risk_rules::Outcome::Action(d.action)
            })
        } else if d.tier == Tier::Rules {
            hits.indices().iter().copied().max_by(|&a, &b| {
                let c = |i: u32| rules[i as usize].contribution(set.review_score());
                c(a).total_cmp(&c(b))
            })
        } else {
            None
        };
        if let Some(i) = decider {
            decided[i as usize] += 1;
        }
    }
    println!(
        "\nrules: the rule tier decided {} transactions ({} by a hard rule); top rules by hits",
        m.tier(Tier::Rules),
        m.hard_rule
    );
    println!(
        "  {:<34} {:>7} {:>10} {:>8}",
        "rule", "fired", "precision", "decided"
    );
    let mut idx: Vec<usize> = (0..n).collect();
    idx.sort_by_key(|&i| std::cmp::Reverse(fired[i]));
    for &i in idx.iter().take(15) {
        let r = &set.rules()[i];
        println!(
            "  {:<34} {:>7} {:>9.1}% {:>8}{}",
            r.id,
            fired[i],
            100.0 * fired_fraud[i] as f64 / fired[i].max(1) as f64,
            decided[i],
            if r.hard { "  (hard)" } else { "" }
        );
    }
    let silent = idx.iter().filter(|&&i| fired[i] == 0).count();
    println!(
        "  ... {} more; {} never fired on this replay",
        n.saturating_sub(15),
        silent
    );
}

pub fn print_counts(m: &MetricsSnapshot) {
    let pct = |x: u64| 100.0 * x as f64 / m.decisions.max(1) as f64;
    print!("  by action:");
    for (a, c) in m.by_action {
        print!("  {} {} ({:.2}%)", a.as_str(), c, pct(c));
    }
    print!("\n  by tier:  ");
    for (t, c) in m.by_tier {
        print!("  {} {} ({:.2}%)", t.as_str(), c, pct(c));
    }
    print!("\n  fallbacks:");
    for (f, c) in m.fallbacks {
        print!("  {} {}", f.as_str(), c);
    }
    println!();
}

pub fn lat(name: &str, l: &LatencySummary) {
    let us = |ns: u64| ns as f64 / 1e3;
    println!(
        "  {:<24} n={:<7} p50 {:>9.2} µs  p99 {:>9.2} µs  p99.9 {:>9.2} µs  max {:>10.2} µs",
        name,
        l.count,
        us(l.p50_ns),
        us(l.p99_ns),
        us(l.p999_ns),
        us(l.max_ns)
    );
}

/// Entity state: features, memory, counters, and what the state stage costs: the same
/// replay through a state engine of the same configuration alone, against the whole
/// `decide` per transaction (`decide_ns`).
pub fn print_state(engine: &Engine, txns: &[risk_core::Transaction], decide_ns: f64) {
    let Some(st) = engine.state() else { return };
    let s = st.stats();
    let clock = risk_core::ManualClock::new();
    // Far ahead of the data: the future bound never clamps an event time.
    clock.set_unix_origin_ms(i64::MAX / 4);
    let alone = risk_core::state::StateEngine::new(st.config().clone(), st.schema().clone(), clock);
    let stage_ns = alone.ok().map(|alone| {
        let mut rows = txns.to_vec();
        let t = Instant::now();
        for r in &mut rows {
            std::hint::black_box(alone.apply(r));
        }
        t.elapsed().as_nanos() as f64 / rows.len().max(1) as f64
    });
    println!(
        "\nentity state: {} velocity features computed by the engine from raw transactions",
        st.config().features.len()
    );
    for m in st.memory() {
        println!(
            "  {:<8} {:>7} keys  {:>5} bytes/key",
            m.source, m.keys, m.bytes_per_key
        );
    }
    println!(
        "  updates {}  late {}  without time {}",
        s.updates, s.late, s.no_time
    );
    if let Some(ns) = stage_ns {
        println!(
            "  state stage alone: {ns:.0} ns per transaction over this replay ({:.0}% of a {decide_ns:.0} ns decide)",
            100.0 * ns / decide_ns.max(1.0)
        );
    }
}

pub fn print_audit(
    log: &SegmentLog,
    decisions: &[risk_core::Decision],
    export: &[risk_core::synth::Labeled],
) -> Result<(), Box<dyn std::error::Error>> {
    let st = log.stats();
    let t = Instant::now();
    let mut by_id: std::collections::HashMap<u64, risk_core::audit::AuditEntry> =
        std::collections::HashMap::with_capacity(decisions.len());
    let mut verdicts = 0;
    for e in log.reader().all()? {
        let e = e?;
        match e.decision() {
            Some(d) => {
                by_id.insert(d.txn_id, e);
            }
            None => verdicts += 1,
        }
    }
    let read = t.elapsed();
    let same = |d: &risk_core::Decision| {
        by_id
            .get(&d.txn.0)
            .and_then(|e| e.decision())
            .is_some_and(|r| {
                let v = r.versions.as_ref();
                r.score == d.score
                    && r.action == d.action as i32 + 1
                    && v.and_then(|v| v.rules.as_ref()).map(|x| x.hash)
                        == Some(d.versions.rules.hash())
                    && v.and_then(|v| v.fast.as_ref()).map(|x| x.hash)
                        == d.versions.fast.map(|x| x.hash())
            })
    };
    let found = decisions.iter().filter(|d| same(d)).count();
    // Train/serve parity: the features the engine computed and recorded equal, bit for
    // bit, what the training export computes (`generate`, `export_synth`).
    let parity = export
        .iter()
        .filter(|r| {
            by_id
                .get(&r.txn.id.0)
                .and_then(|e| e.decision())
                .is_some_and(|d| {
                    d.features.len() == r.txn.features.values().len()
                        && d.features
                            .iter()
                            .zip(r.txn.features.values())
                            .all(|(a, b)| a.to_bits() == b.to_bits())
                })
        })
        .count();
    let bytes: u64 = std::fs::read_dir(log.dir())?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!("\naudit trail ({})", log.dir().display());
    println!(
        "  records: {} decisions + {verdicts} verdicts, {:.1} MiB; accepted {} shed {} durable seq {}",
        by_id.len(),
        bytes as f64 / (1 << 20) as f64,
        st.accepted,
        st.shed_full,
        st.durable_seq
    );
    println!(
        "  every decision found again by id with its versions: {} ({found} of {}; log read in {read:.2?})",
        found == decisions.len(),
        decisions.len()
    );
    println!(
        "  features the engine computed = the training export's, bit for bit: {parity} of {}",
        export.len()
    );
    let chain = log.reader().verify_chain()?;
    println!(
        "  hash chain intact over {} records in {} segments ({}); entity keys {}",
        chain.records,
        chain.segments,
        if chain.keyed { "keyed" } else { "unkeyed" },
        if log.pseudonymised() {
            "pseudonymised"
        } else {
            "as they are (set [privacy] key to pseudonymise; SECURITY.md)"
        }
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode =
            |p: &std::path::Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777);
        let files: Vec<u32> = std::fs::read_dir(log.dir())?
            .filter_map(|e| mode(&e.ok()?.path()).ok())
            .collect();
        println!(
            "  file modes: directory {:o}, files {:?}",
            mode(log.dir())?,
            files
                .iter()
                .map(|m| format!("{m:o}"))
                .collect::<std::collections::BTreeSet<_>>()
        );
    }
    if let Some(d) = decisions.iter().find(|d| !d.rules_fired.is_empty()) {
        let t = Instant::now();
        let hits: Vec<_> = log
            .reader()
            .query(Query::txn(d.txn.0))?
            .collect::<Result<_, _>>()?;
        println!(
            "  lookup of txn {} ({} records, {:.2?}):",
            d.txn.0,
            hits.len(),
            t.elapsed()
        );
        if let Some(e) = hits.first() {
            let j = e.to_json();
            println!(
                "    action {} tier {} score {} rules_fired {} versions rules {} fast {}",
                j["action"],
                j["tier"],
                j["score"],
                j["rules_fired"],
                j["versions"]["rules"]["version"],
                j["versions"]["fast"]["version"]
            );
        }
    }
    Ok(())
}
