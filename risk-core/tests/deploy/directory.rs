//! The model directory: versions side by side, restart on the last promoted version,
//! a crash mid-deploy, stored candidates, and a damaged directory refused at start.

use super::*;
use risk_core::deploy::{CanaryStage, Candidate, DeployError, Target};
use std::path::Path;

/// A registry with kind `amount`: a model file `{"version": .., "scale": .., "offset": ..}`.
fn registry() -> ScorerRegistry {
    let mut r = ScorerRegistry::default();
    r.register("amount", |spec| {
        let p = spec.path("path")?;
        let text = std::fs::read_to_string(&p)
            .map_err(|e| ConfigError::invalid(&spec.key, format!("{}: {e}", p.display())))?;
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| ConfigError::invalid(&spec.key, e.to_string()))?;
        let m = Model::new(
            v["version"].as_str().unwrap_or("?"),
            v["scale"].as_f64().unwrap_or(0.8) as f32,
            v["offset"].as_f64().unwrap_or(0.0) as f32,
        );
        Ok(m as Arc<dyn Scorer>)
    });
    r
}

fn model_file(dir: &Path, name: &str, version: &str, scale: f32) -> String {
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!(r#"{{"version":"{version}","scale":{scale},"offset":0}}"#),
    )
    .unwrap();
    format!("[scorer]\nkind = \"amount\"\npath = \"{name}\"\n")
}

fn open(dir: &Path, clock: &Arc<ManualClock>, first: &Path) -> Result<Engine, ConfigError> {
    let reg = registry();
    let spec = ScorerSpec {
        key: "fast.scorer".into(),
        table: toml::from_str(&format!(
            "kind = \"amount\"\npath = \"{}\"",
            first.display()
        ))
        .unwrap(),
        schema: schema(),
        base_dir: dir.to_path_buf(),
    };
    let fast = reg.build(&spec)?;
    Engine::builder(schema())
        .rules(Arc::new(AmountRules(0.8)))
        .fast(fast)
        .clock(Arc::clone(clock) as Arc<dyn Clock>)
        .registry(reg)
        .deploy_config(DeployConfig {
            dir: Some(dir.join("models")),
            ..quiet()
        })
        .build()
}

#[test]
fn a_restart_comes_back_on_the_last_promoted_version_and_a_crash_mid_deploy_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path();
    let clock = ManualClock::new();
    model_file(work, "v1.json", "1", 0.8);
    let e = open(work, &clock, &work.join("v1.json")).unwrap();
    let mut next = 0;
    run(&e, &mut next, 600, 1000);
    let v2 = model_file(work, "v2.json", "2", 0.82);
    let mut plan = immediate();
    plan.by = "pipeline#7".into();
    e.deploy(Target::Fast, Candidate::from_toml(&v2, work).unwrap(), plan)
        .unwrap();
    let serving = e.versions().fast.unwrap();
    assert_eq!(serving.version(), "2");
    let dir = e.model_directory().unwrap().clone();
    let key = format!("{:016x}", serving.hash());
    let meta = dir.meta(Target::Fast, &key).unwrap();
    assert_eq!(meta.deployed_by, "pipeline#7");
    assert!(meta.gate.is_some());
    let states: Vec<&str> = meta.history.iter().map(|c| c.state.as_str()).collect();
    assert_eq!(states, ["validated", "promoted"]);
    assert!(dir
        .version_dir(Target::Fast, &key)
        .join("v2.json")
        .is_file());
    // A third version starts a canary, then the process dies before promoting it.
    let v3 = model_file(work, "v3.json", "3", 0.81);
    let mut plan = immediate();
    plan.canary = vec![CanaryStage {
        share: 0.5,
        min_decisions: 1_000_000,
        min_duration: Duration::ZERO,
    }];
    e.deploy(Target::Fast, Candidate::from_toml(&v3, work).unwrap(), plan)
        .unwrap();
    assert!(run(&e, &mut next, 200, 1000)
        .iter()
        .any(|d| d.versions.fast.unwrap().version() == "3"));
    drop(e); // no shutdown, no promote: a crash
             // Leftovers of a torn write are ignored; the artifact's original is gone.
    std::fs::write(work.join("models/fast/PROMOTED.tmp"), "garbage").unwrap();
    std::fs::remove_file(work.join("v2.json")).unwrap();
    let e = open(work, &clock, &work.join("v1.json")).unwrap();
    let restarted = e.versions().fast.unwrap();
    assert_eq!(
        restarted, serving,
        "restart serves the last promoted version"
    );
    assert!(run(&e, &mut next, 100, 1000)
        .iter()
        .all(|d| d.versions.fast == Some(serving)));
    // Every version is stored side by side, and a stored one is one call away.
    let versions: Vec<String> = dir
        .versions(Target::Fast)
        .unwrap()
        .into_iter()
        .map(|m| m.version)
        .collect();
    assert!(
        versions.contains(&"2".to_owned()) && versions.contains(&"3".to_owned()),
        "{versions:?}"
    );
    let v3key = dir
        .versions(Target::Fast)
        .unwrap()
        .into_iter()
        .find(|m| m.version == "3")
        .unwrap()
        .key;
    run(&e, &mut next, 600, 1000);
    e.deploy(Target::Fast, Candidate::Stored(v3key.clone()), immediate())
        .unwrap();
    assert_eq!(e.versions().fast.unwrap().version(), "3");
    assert!(matches!(
        e.deploy(
            Target::Fast,
            Candidate::Stored("../../etc".into()),
            immediate()
        ),
        Err(DeployError::Directory(_))
    ));
    drop(e);
    // A damaged directory is refused at start, naming it.
    std::fs::write(
        dir.version_dir(Target::Fast, &v3key).join("meta.json"),
        "{not json",
    )
    .unwrap();
    let err = open(work, &clock, &work.join("v1.json")).unwrap_err();
    assert!(err.to_string().contains("deploy.dir"), "{err}");
}

#[test]
fn risk_toml_deploy_table_and_fast_calibration() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = r#"
        [schema]
        fields = [{ name = "amount", kind = "numeric", required = true }]
        [rules.scorer]
        kind = "constant"
        probability = 0.1
        [fast]
        scorer = { kind = "constant", probability = 0.5 }
        calibration = { method = "platt", a = 1.0, b = -2.0 }
        [deploy]
        dir = "models"
        check_interval_ms = 50
        sample_every = 4
    "#;
    let e = Engine::from_toml_str(
        cfg,
        tmp.path(),
        Path::new("risk.toml"),
        &ScorerRegistry::default(),
    )
    .unwrap();
    assert!(e.model_directory().unwrap().root().ends_with("models"));
    let s = e.schema().clone();
    let t = Transaction::builder(&s)
        .id(1)
        .amount(5.0, "USD")
        .numeric("amount", 5.0)
        .build()
        .unwrap();
    let d = e.decide(&t).unwrap();
    let want = 1.0 / (1.0 + (2.0f64).exp());
    assert!(
        (d.model_score.unwrap() as f64 - want).abs() < 1e-5,
        "{:?}",
        d.model_score
    );
    for bad in [
        cfg.replace("b = -2.0", "b = -2.0, extra = 1"),
        cfg.replace("a = 1.0", "a = -1.0"),
        cfg.replace("sample_every = 4", "sample_every = 0"),
        cfg.replace("check_interval_ms = 50", "check_interval_ms = 0"),
        cfg.replace("[deploy]", "[deploy]\nbogus = 1"),
    ] {
        let r = Engine::from_toml_str(
            &bad,
            tmp.path(),
            Path::new("risk.toml"),
            &ScorerRegistry::default(),
        );
        assert!(r.is_err(), "accepted: {bad}");
    }
}

fn mode_of(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Edits one version's `meta.json` with `f`.
fn edit_meta(meta: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(meta).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(meta, serde_json::to_string(&v).unwrap()).unwrap();
}

#[test]
fn the_directory_is_private_and_verifies_artifacts_by_blake3_and_refuses_unsafe_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path();
    let clock = ManualClock::new();
    model_file(work, "v1.json", "1", 0.8);
    let e = open(work, &clock, &work.join("v1.json")).unwrap();
    let mut next = 0;
    run(&e, &mut next, 600, 1000);
    let v2 = model_file(work, "v2.json", "2", 0.82)
        + "endpoint = \"https://risk:hunter2-pass@kserve.example/v2?token=tok-SECRET\"\n";
    e.deploy(
        Target::Fast,
        Candidate::from_toml(&v2, work).unwrap(),
        immediate(),
    )
    .unwrap();
    let serving = e.versions().fast.unwrap();
    let dir = e.model_directory().unwrap().clone();
    let key = format!("{:016x}", serving.hash());
    let vdir = dir.version_dir(Target::Fast, &key);
    let meta_path = vdir.join("meta.json");
    let meta = dir.meta(Target::Fast, &key).unwrap();
    let a = meta.artifact.clone().expect("the artifact is recorded");
    assert_eq!(a.file, "v2.json");
    assert_eq!(
        a.blake3,
        blake3::hash(&std::fs::read(work.join("v2.json")).unwrap())
            .to_hex()
            .to_string()
    );
    // Private modes, and no credential in meta.json.
    for d in [work.join("models"), work.join("models/fast"), vdir.clone()] {
        assert_eq!(mode_of(&d), 0o700, "{}", d.display());
    }
    for f in [
        meta_path.clone(),
        vdir.join("v2.json"),
        work.join("models/fast/PROMOTED"),
    ] {
        assert_eq!(mode_of(&f), 0o600, "{}", f.display());
    }
    let text = std::fs::read_to_string(&meta_path).unwrap();
    assert!(
        !text.contains("hunter2") && !text.contains("tok-SECRET"),
        "{text}"
    );
    assert!(text.contains("kserve.example"), "{text}");
    drop(e);
    // A changed artifact is refused, at read and at restart.
    let good = std::fs::read(vdir.join("v2.json")).unwrap();
    std::fs::write(
        vdir.join("v2.json"),
        br#"{"version":"2","scale":0.0,"offset":1}"#,
    )
    .unwrap();
    let err = dir.meta(Target::Fast, &key).unwrap_err();
    assert!(
        matches!(&err, DeployError::ArtifactMismatch { expected, .. } if *expected == a.blake3),
        "{err}"
    );
    let err = open(work, &clock, &work.join("v1.json"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("BLAKE3") && err.contains("deploy.dir"),
        "{err}"
    );
    std::fs::write(vdir.join("v2.json"), &good).unwrap();
    dir.meta(Target::Fast, &key).unwrap();
    // Absolute paths and `..` in meta.json are refused by name.
    let original = std::fs::read_to_string(&meta_path).unwrap();
    for (field, path, why) in [
        ("artifact", "/etc/passwd", "absolute"),
        ("artifact", "../../v1.json", ".."),
        ("artifact", "sub/v2.json", "one file name"),
        ("spec", "/etc/passwd", "absolute"),
        ("spec", "../../../v1.json", ".."),
    ] {
        std::fs::write(&meta_path, &original).unwrap();
        edit_meta(&meta_path, |v| {
            if field == "artifact" {
                v["artifact"]["file"] = path.into();
            } else {
                v["spec"] = format!("kind = \"amount\"\npath = \"{path}\"\n").into();
            }
        });
        let err = dir.meta(Target::Fast, &key).unwrap_err();
        assert!(
            matches!(&err, DeployError::UnsafePath { path: p, .. } if p == path),
            "{err}"
        );
        assert!(err.to_string().contains(why), "{err}");
        let err = open(work, &clock, &work.join("v1.json"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("refusing"), "{err}");
    }
    std::fs::write(&meta_path, &original).unwrap();
    let e = open(work, &clock, &work.join("v1.json")).unwrap();
    assert_eq!(e.versions().fast.unwrap(), serving);
}
