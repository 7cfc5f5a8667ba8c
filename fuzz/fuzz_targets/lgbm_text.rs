//! The LightGBM text-model loader on arbitrary bytes: a validated model or a typed `TreeError`,
//! never a panic, an out-of-bounds read or an allocation beyond what the bytes can hold;
//! a loaded model predicts and explains.
#![no_main]

use libfuzzer_sys::fuzz_target;
use risk_gpu::trees::XgbModel;

fuzz_target!(|data: &[u8]| {
    if data.len() > 256 * 1024 {
        return;
    }
    let Ok(m) = XgbModel::from_lightgbm(data) else { return };
    let nf = m.num_features();
    if nf > 4096 {
        return;
    }
    for fill in [f32::NAN, 0.0, 1.0, -1e30, 1e30] {
        let x = vec![fill; nf];
        let p = m.predict(&x);
        assert!(p.is_nan() || (0.0..=1.0).contains(&p));
        let mut phi = Vec::new();
        m.contributions(&x, &mut phi);
        assert_eq!(phi.len(), nf + 1);
    }
});
