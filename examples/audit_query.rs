//! Query the audit log, and replay it through a candidate engine.
//!
//! ```text
//! cargo run --release --example quickstart -- 20000        # writes target/quickstart-audit
//! cargo run --release --example audit_query -- --txn 42     # its records, as JSON lines
//! cargo run --release --example audit_query -- --entity 17 --limit 5
//! cargo run --release --example audit_query -- --rule R_CT_SMALL_BURST --limit 3
//! cargo run --release --example audit_query -- --from 1767225600000 --to 1767229200000
//! cargo run --release --example audit_query -- --verify
//! cargo run --release --example audit_query -- --verify --key env:RISK_PSEUDONYM_KEY
//! cargo run --release --example audit_query -- --replay-decline-at 0.6
//! ```
//!
//! `--verify` checks every checksum and the hash chain and names the first broken link
//! (exit status 1 when the log is damaged or tampered with). `--key SPEC` (`env:NAME` or
//! `file:PATH`) is the log's `[privacy] key`: the chain is checked keyed and `--entity`
//! looks up the entity's pseudonym.
//!
//! `--dir DIR` reads another log (default `target/quickstart-audit`). `--replay-decline-at
//! X` re-decides every recorded decision with the quickstart's rules and XGBoost model but
//! a decline threshold of X, and prints what would change (per action, per rule, per
//! model).

use risk_core::audit::{AuditReader, Query};
use risk_core::replay::replay;
use risk_core::Engine;
use risk_gpu::trees::{XgbModel, XgbScorer};
use risk_rules::{RuleScorer, RuleSet, DEFAULT_RULES};
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/quickstart-audit");
    let mut q = Query::default();
    let (mut limit, mut verify, mut replay_at, mut key) = (usize::MAX, false, None, None);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--dir" => dir = val()?.into(),
            "--txn" => q.txn = Some(val()?.parse()?),
            "--entity" => q.entity = Some(val()?.parse()?),
            "--rule" => {
                q.rule = Some(val()?);
                q.verdicts = false;
            }
            "--from" => q.from_ms = Some(val()?.parse()?),
            "--to" => q.to_ms = Some(val()?.parse()?),
            "--decisions-only" => q.verdicts = false,
            "--limit" => limit = val()?.parse()?,
            "--verify" => verify = true,
            "--key" => key = Some(val()?),
            "--replay-decline-at" => replay_at = Some(val()?.parse::<f32>()?),
            "--help" | "-h" => {
                println!("see the module docs of examples/audit_query.rs");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let mut reader = AuditReader::new(&dir);
    if let Some(spec) = key {
        let secret = risk_core::secret::Secret::resolve("--key", &spec)?;
        let p = risk_core::pseudo::Pseudonymiser::new("--key", secret.expose().as_bytes())?;
        reader = reader.with_pseudonymiser(p);
    }
    if verify {
        match reader
            .verify()
            .and_then(|n| Ok((n, reader.verify_chain()?)))
        {
            Ok((n, c)) => {
                println!(
                    "{}: {n} records in {} segments (seq {}..={}), every checksum good, chain intact ({}; {})",
                    dir.display(),
                    c.segments,
                    c.first_seq,
                    c.last_seq,
                    if c.keyed { "keyed" } else { "unkeyed" },
                    if c.anchored_at_start {
                        "checked from record 1"
                    } else {
                        "anchored at the oldest record kept"
                    }
                );
                return Ok(());
            }
            Err(e) => {
                eprintln!("{}: NOT INTACT: {e}", dir.display());
                std::process::exit(1);
            }
        }
    }
    if let Some(decline_at) = replay_at {
        let schema = risk_core::synth::schema();
        let model = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/models/xgb_fraud.json"
        );
        let xgb = Arc::new(XgbModel::from_file(model)?);
        let set = RuleSet::compile(DEFAULT_RULES, "risk-rules/rules/default.rules", &schema)?;
        let base = risk_core::Policy::default();
        let candidate = Engine::builder(schema.clone())
            .rules(Arc::new(RuleScorer::new(set, schema.clone())))
            .fast(Arc::new(XgbScorer::new(xgb, &schema, 0.3, 3)?))
            .thresholds(base.approve_below.min(decline_at), decline_at)
            .build()?;
        let q = Query {
            verdicts: false,
            ..q
        };
        let rep = replay(reader.query(q)?.take(limit), &candidate, 5);
        println!(
            "replayed {} of {} recorded decisions (skipped {:?}, damaged {}); decline_at {} -> {decline_at}",
            rep.replayed, rep.records, rep.skipped, rep.corrupt, base.decline_at
        );
        println!("  action changes: {} {:?}", rep.changed, rep.transitions);
        println!("  by deciding tier: {:?}", rep.tier_transitions);
        for r in rep.rules.iter().take(5) {
            println!(
                "  rule {}: fired {} -> {} (started {}, stopped {})",
                r.rule, r.recorded, r.candidate, r.started, r.stopped
            );
        }
        for m in &rep.models {
            println!(
                "  model {} -> {}: {} scored by both, mean |delta| {:.2e}, max {:.2e}, {} actions changed",
                m.recorded, m.candidate, m.scored_both, m.mean_abs_delta, m.max_abs_delta, m.action_changed
            );
        }
        for x in &rep.examples {
            println!(
                "  e.g. txn {}: {:?} -> {:?}",
                x.txn, x.recorded, x.candidate
            );
        }
        return Ok(());
    }
    let mut n = 0;
    for e in reader.query(q)?.take(limit) {
        match e {
            Ok(e) => println!("{}", e.to_json()),
            Err(err) => eprintln!("DAMAGED: {err}"),
        }
        n += 1;
    }
    eprintln!("{n} records");
    Ok(())
}
