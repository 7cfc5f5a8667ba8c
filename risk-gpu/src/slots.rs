//! Schema slots of a feature list, shared by the backends that send a feature vector
//! (ONNX, remote).

/// The schema slots of `features` in order (`None`: every schema field in order); `Err`
/// names the first feature the schema lacks. Shared by the backends that send a feature
/// vector (ONNX, remote).
pub(crate) fn feature_slots(
    schema: &risk_core::FeatureSchema,
    features: Option<&[String]>,
) -> Result<Vec<risk_core::Slot>, String> {
    let names: Vec<String> = match features {
        Some(f) => f.to_vec(),
        None => schema.fields().iter().map(|f| f.name.clone()).collect(),
    };
    names
        .iter()
        .map(|n| {
            schema
                .slot(n)
                .ok_or_else(|| format!("feature {n:?} is not in the schema"))
        })
        .collect()
}
