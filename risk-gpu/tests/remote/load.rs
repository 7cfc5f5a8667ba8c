//! Loads that must be refused, each with a typed error naming what is wrong.

use super::*;
use risk_gpu::remote::{BreakerState, Datatype, FaultProxy, RemoteError, Wire};

fn refused(c: &KServeConfig) -> RemoteError {
    RemoteScorer::load(c, &schema()).expect_err("load must fail")
}

#[test]
fn metadata_that_does_not_fit_the_schema_is_refused() {
    let url = mlserver_url();
    let mut c = cfg(std::slice::from_ref(&url));
    c.input = "features".into();
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Metadata { message, .. } if message.contains("no input \"features\"")),
        "{e}"
    );
    let mut c = cfg(std::slice::from_ref(&url));
    c.datatype = Datatype::Fp64;
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Metadata { message, .. } if message.contains("FP32")),
        "{e}"
    );
    // 17 features for a model of 18.
    let mut c = cfg(std::slice::from_ref(&url));
    let names: Vec<String> = schema().fields().iter().map(|f| f.name.clone()).collect();
    c.features = Some(names[..17].to_vec());
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Metadata { message, .. } if message.contains("[N, 17]")),
        "{e}"
    );
    let mut c = cfg(std::slice::from_ref(&url));
    c.output = Some("logits".into());
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Metadata { message, .. } if message.contains("no output \"logits\"")),
        "{e}"
    );
    let mut c = cfg(std::slice::from_ref(&url));
    c.positive_class = 2;
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Metadata { message, .. } if message.contains("positive class 2")),
        "{e}"
    );
    // MLServer does not speak the binary extension.
    let mut c = cfg(std::slice::from_ref(&url));
    c.wire = Wire::Binary;
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Metadata { message, .. } if message.contains("binary_tensor_data")),
        "{e}"
    );
}

#[test]
fn a_model_or_version_the_server_lacks_is_refused() {
    let url = mlserver_url();
    let mut c = cfg(std::slice::from_ref(&url));
    c.model = "no-such-model".into();
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Unavailable(m) if m.contains("no-such-model")),
        "{e}"
    );
    let mut c = cfg(std::slice::from_ref(&url));
    c.version = Some("7".into());
    let e = refused(&c);
    assert!(
        matches!(&e, RemoteError::Unavailable(m) if m.contains("versions/7")),
        "{e}"
    );
    // The served version is accepted by name.
    let mut c = cfg(std::slice::from_ref(&url));
    c.version = Some("1".into());
    let s = load(&c);
    assert!(s.score(&txns(&reference(), 1)[0]).is_ok());
}

#[test]
fn no_server_is_refused_and_a_down_replica_starts_open() {
    let dead = FaultProxy::start(mlserver_addr()).unwrap();
    let dead_url = dead.url();
    dead.kill();
    let e = refused(&cfg(std::slice::from_ref(&dead_url)));
    assert!(
        matches!(&e, RemoteError::Unavailable(m) if m.contains(&dead_url)),
        "{e}"
    );
    // One of two down: the load works, the down one's breaker is open, calls go to the other.
    let s = load(&cfg(&[dead_url.clone(), mlserver_url()]));
    let eps = s.endpoints();
    assert_eq!(eps[0].breaker, BreakerState::Open);
    assert_eq!(eps[1].breaker, BreakerState::Closed);
    let r = reference();
    for t in txns(&r, 20) {
        s.score(&t).unwrap();
    }
    let eps = s.endpoints();
    assert_eq!(eps[0].attempts, 0);
    assert_eq!(eps[1].attempts, 2 + 20, "warm-up and calls");
}

#[test]
fn bad_configs_are_typed_errors_naming_the_field() {
    let s = schema();
    let check = |c: KServeConfig, field: &str| match RemoteScorer::load(&c, &s) {
        Err(RemoteError::Config { field: f, .. }) => assert_eq!(f, field),
        other => panic!("{field}: {other:?}"),
    };
    check(cfg(&[]), "endpoints");
    check(cfg(&["ftp://10.0.0.1:21".into()]), "endpoints");
    check(cfg(&["https://u:p@10.0.0.1:443".into()]), "endpoints");
    check(cfg(&["http://h:1/v2/models".into()]), "endpoints");
    let mut c = cfg(&[mlserver_url()]);
    c.model = "a/b".into();
    check(c, "model");
    let mut c = cfg(&[mlserver_url()]);
    c.max_batch = 0;
    check(c, "max_batch");
    let mut c = cfg(&[mlserver_url()]);
    c.hedge = Some(risk_gpu::remote::HedgeConfig {
        percentile: 1.5,
        ..Default::default()
    });
    check(c, "hedge.percentile");
    let mut c = cfg(&[mlserver_url()]);
    c.breaker.failures = 0;
    check(c, "breaker.failures");
    let mut c = cfg(&[mlserver_url()]);
    c.features = Some(vec!["amount".into(), "shoe_size".into()]);
    assert!(
        matches!(RemoteScorer::load(&c, &s), Err(RemoteError::Feature(m)) if m.contains("shoe_size"))
    );
}
