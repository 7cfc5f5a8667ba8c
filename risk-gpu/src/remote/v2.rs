//! The Open Inference Protocol (KServe V2) REST messages this tier sends and reads:
//! infer requests with one FP32/FP64 `[N, F]` input, JSON or with the binary tensor data
//! extension, and their responses; server and model metadata.
//!
//! Requests are written straight into a reused buffer (serde_json writes the numbers and
//! the escaped names; missing features, NaN, travel as JSON `null`, which MLServer reads
//! back as NaN). Responses go through serde derives; tensor `data` may be flat or nested
//! (both are allowed by the protocol) and is flattened while parsing, nesting bounded.

use super::config::Datatype;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// Server metadata (`GET /v2`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ServerMetadata {
    /// Server name, e.g. `mlserver` or `triton`.
    #[serde(default)]
    pub name: String,
    /// Server version.
    #[serde(default)]
    pub version: String,
    /// Protocol extensions, e.g. `binary_tensor_data`.
    #[serde(default)]
    pub extensions: Vec<String>,
}

/// One tensor of a model's metadata.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TensorMetadata {
    /// Tensor name.
    pub name: String,
    /// Element type, e.g. `FP32`.
    pub datatype: String,
    /// Shape; `-1` is a variable dimension.
    pub shape: Vec<i64>,
}

/// Model metadata (`GET /v2/models/{name}[/versions/{v}]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ModelMetadata {
    /// Model name.
    pub name: String,
    /// Versions the server holds.
    #[serde(default)]
    pub versions: Vec<String>,
    /// Framework, e.g. `xgboost`.
    #[serde(default)]
    pub platform: String,
    /// Inputs (MLServer lists them only when `model-settings.json` declares them).
    #[serde(default)]
    pub inputs: Vec<TensorMetadata>,
    /// Outputs (same).
    #[serde(default)]
    pub outputs: Vec<TensorMetadata>,
}

/// The binary extension's header giving the JSON part's length.
pub const HEADER_LENGTH: &str = "inference-header-content-length";

/// One infer request over `rows x cols` features.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    pub id: u64,
    pub input: &'a str,
    pub datatype: Datatype,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [f32],
    pub output: Option<&'a str>,
    pub binary: bool,
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing a &str to a Vec cannot fail.
    serde_json::to_writer(&mut *out, s).expect("string to Vec");
}

/// Writes the request body into `out` (cleared first). Returns the JSON part's length
/// when the body carries binary tensor data (the `Inference-Header-Content-Length`).
pub(crate) fn encode(r: &Request<'_>, out: &mut Vec<u8>) -> Option<usize> {
    use std::io::Write;
    debug_assert_eq!(r.data.len(), r.rows * r.cols);
    out.clear();
    let bytes = r.data.len() * r.datatype.size();
    // Writes to a Vec cannot fail.
    let _ = write!(out, "{{\"id\":\"{}\",\"inputs\":[{{\"name\":", r.id);
    json_str(out, r.input);
    let _ = write!(
        out,
        ",\"shape\":[{},{}],\"datatype\":\"{}\",",
        r.rows,
        r.cols,
        r.datatype.name()
    );
    if r.binary {
        let _ = write!(out, "\"parameters\":{{\"binary_data_size\":{bytes}}}}}]");
    } else {
        out.extend_from_slice(b"\"data\":");
        match r.datatype {
            Datatype::Fp32 => serde_json::to_writer(&mut *out, r.data),
            Datatype::Fp64 => {
                let wide: Vec<f64> = r.data.iter().map(|&v| v as f64).collect();
                serde_json::to_writer(&mut *out, &wide)
            }
        }
        .expect("numbers to Vec");
        out.extend_from_slice(b"}]");
    }
    match (r.output, r.binary) {
        (Some(o), binary) => {
            out.extend_from_slice(b",\"outputs\":[{\"name\":");
            json_str(out, o);
            if binary {
                out.extend_from_slice(b",\"parameters\":{\"binary_data\":true}");
            }
            out.extend_from_slice(b"}]");
        }
        (None, true) => out.extend_from_slice(b",\"parameters\":{\"binary_data_output\":true}"),
        (None, false) => {}
    }
    out.push(b'}');
    if !r.binary {
        return None;
    }
    let json = out.len();
    out.reserve(bytes);
    match r.datatype {
        Datatype::Fp32 => r
            .data
            .iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        Datatype::Fp64 => r
            .data
            .iter()
            .for_each(|&v| out.extend_from_slice(&(v as f64).to_le_bytes())),
    }
    Some(json)
}

/// A response that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// Not the protocol's JSON (or not JSON at all).
    Malformed(String),
    /// JSON, but not the tensor asked for: missing output, wrong shape, type or length.
    Shape(String),
}

/// What the caller expects back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want<'a> {
    pub id: u64,
    pub output: Option<&'a str>,
    pub rows: usize,
    pub positive: usize,
}

/// Tensor data flattened while parsing; `null` is NaN.
#[derive(Debug, Default)]
struct Flat(Vec<f64>);

const MAX_NESTING: usize = 8;

struct FlatVisitor<'a> {
    out: &'a mut Vec<f64>,
    depth: usize,
}

impl<'de> de::DeserializeSeed<'de> for FlatVisitor<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FlatVisitor<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("numbers, null, or arrays of them")
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.out.push(v);
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.out.push(v as f64);
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.out.push(v as f64);
        Ok(())
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.out.push(v as u8 as f64);
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.out.push(f64::NAN);
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.depth >= MAX_NESTING {
            return Err(de::Error::custom(format!(
                "tensor data nested deeper than {MAX_NESTING}"
            )));
        }
        while seq
            .next_element_seed(FlatVisitor {
                out: &mut *self.out,
                depth: self.depth + 1,
            })?
            .is_some()
        {}
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Flat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut out = Vec::new();
        d.deserialize_any(FlatVisitor {
            out: &mut out,
            depth: 0,
        })?;
        Ok(Flat(out))
    }
}

#[derive(Debug, Default, Deserialize)]
struct OutParams {
    #[serde(default)]
    binary_data_size: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct OutTensor {
    name: String,
    datatype: String,
    shape: Vec<i64>,
    #[serde(default)]
    data: Option<Flat>,
    #[serde(default)]
    parameters: Option<OutParams>,
}

#[derive(Debug, Deserialize)]
struct Response {
    #[serde(default)]
    id: Option<String>,
    outputs: Vec<OutTensor>,
}

/// The error text of a failed request's body (`{"error": "..."}` in the protocol),
/// else the body's start; at most 200 characters.
pub(crate) fn error_text(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct E {
        error: String,
    }
    let s = match serde_json::from_slice::<E>(body) {
        Ok(e) => e.error,
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    };
    s.chars().take(200).collect()
}

/// Reads the positive-class probability of each row from a response body. `header_len`
/// is the `Inference-Header-Content-Length` when the response carries binary data.
pub(crate) fn decode(
    body: &[u8],
    header_len: Option<usize>,
    want: &Want<'_>,
) -> Result<Vec<f32>, DecodeError> {
    let json = match header_len {
        Some(n) if n <= body.len() => &body[..n],
        Some(n) => {
            return Err(DecodeError::Malformed(format!(
                "JSON header of {n} bytes in a {}-byte body",
                body.len()
            )))
        }
        None => body,
    };
    let resp: Response = serde_json::from_slice(json)
        .map_err(|e| DecodeError::Malformed(format!("response: {e}")))?;
    if let Some(id) = &resp.id {
        if id.parse::<u64>().ok() != Some(want.id) {
            return Err(DecodeError::Malformed(format!(
                "response id {id:?} answers another request (sent {})",
                want.id
            )));
        }
    }
    let idx = match want.output {
        Some(name) => resp.outputs.iter().position(|o| o.name == name),
        None => resp
            .outputs
            .iter()
            .position(|o| o.name == "predict_proba")
            .or((!resp.outputs.is_empty()).then_some(0)),
    }
    .ok_or_else(|| {
        DecodeError::Shape(format!(
            "no output {:?} among {:?}",
            want.output.unwrap_or("(any)"),
            resp.outputs
                .iter()
                .map(|o| o.name.as_str())
                .collect::<Vec<_>>()
        ))
    })?;
    let t = &resp.outputs[idx];
    let shape_err = |m: String| DecodeError::Shape(format!("output {:?}: {m}", t.name));
    let dt = Datatype::parse(&t.datatype)
        .ok_or_else(|| shape_err(format!("datatype {} (FP32, FP64)", t.datatype)))?;
    let (rows, cols) = match t.shape.as_slice() {
        [n] => (*n, 1),
        [n, k] => (*n, *k),
        s => return Err(shape_err(format!("shape {s:?} (expected [N] or [N, K])"))),
    };
    if rows != want.rows as i64 || cols < 1 {
        return Err(shape_err(format!(
            "shape {:?} for {} rows",
            t.shape, want.rows
        )));
    }
    let cols = cols as usize;
    let col = if cols == 1 { 0 } else { want.positive };
    if col >= cols {
        return Err(shape_err(format!(
            "{cols} columns, no positive class {}",
            want.positive
        )));
    }
    // A server's shape is untrusted: `rows * cols` (and the byte size) may not fit a usize.
    let n = want
        .rows
        .checked_mul(cols)
        .filter(|n| n.checked_mul(dt.size()).is_some())
        .ok_or_else(|| {
            shape_err(format!(
                "shape {:?}: {} x {cols} values overflow",
                t.shape, want.rows
            ))
        })?;
    let binary = t.parameters.as_ref().and_then(|p| p.binary_data_size);
    let mut probs = Vec::with_capacity(want.rows);
    match (&t.data, binary) {
        (_, Some(size)) => {
            if header_len.is_none() || u64::try_from(n * dt.size()).ok() != Some(size) {
                return Err(shape_err(format!(
                    "{size} binary bytes for {n} {} values",
                    dt.name()
                )));
            }
            let past = |m: &str| {
                DecodeError::Malformed(format!(
                    "binary output {m} past the {}-byte body",
                    body.len()
                ))
            };
            let before = resp.outputs[..idx]
                .iter()
                .filter_map(|o| o.parameters.as_ref().and_then(|p| p.binary_data_size))
                .try_fold(0u64, u64::checked_add)
                .and_then(|b| usize::try_from(b).ok())
                .ok_or_else(|| past("starts"))?;
            let offset = json
                .len()
                .checked_add(before)
                .ok_or_else(|| past("starts"))?;
            let end = offset
                .checked_add(n * dt.size())
                .ok_or_else(|| past("ends"))?;
            let raw = body.get(offset..end).ok_or_else(|| past("ends"))?;
            for r in 0..want.rows {
                let at = (r * cols + col) * dt.size();
                probs.push(match dt {
                    Datatype::Fp32 => f32::from_le_bytes(raw[at..at + 4].try_into().unwrap()),
                    Datatype::Fp64 => {
                        f64::from_le_bytes(raw[at..at + 8].try_into().unwrap()) as f32
                    }
                });
            }
        }
        (Some(Flat(v)), None) => {
            if v.len() != n {
                return Err(shape_err(format!(
                    "{} values for shape {:?}",
                    v.len(),
                    t.shape
                )));
            }
            probs.extend((0..want.rows).map(|r| v[r * cols + col] as f32));
        }
        (None, None) => return Err(shape_err("no data".into())),
    }
    Ok(probs)
}

/// Reads the probabilities of `rows` rows from an infer response body, as the tier does:
/// `output` (`None`: `predict_proba`, else the first), column `positive` of an `[N, K]`
/// output, `header_len` the `Inference-Header-Content-Length` of a binary response, `id`
/// the request id a response may echo. `Err` says what is wrong. Public for fuzzing
/// (`fuzz/fuzz_targets/kserve_response.rs`) and for tools that read saved responses.
pub fn parse_response(
    body: &[u8],
    header_len: Option<usize>,
    output: Option<&str>,
    rows: usize,
    positive: usize,
    id: u64,
) -> Result<Vec<f32>, String> {
    let want = Want {
        id,
        output,
        rows,
        positive,
    };
    decode(body, header_len, &want).map_err(|e| match e {
        DecodeError::Malformed(m) => format!("malformed: {m}"),
        DecodeError::Shape(m) => format!("shape: {m}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(data: &[f32], binary: bool) -> Request<'_> {
        Request {
            id: 7,
            input: "input-0",
            datatype: Datatype::Fp32,
            rows: data.len() / 2,
            cols: 2,
            data,
            output: Some("predict_proba"),
            binary,
        }
    }

    #[test]
    fn json_request_carries_missing_values_as_null() {
        let mut out = Vec::new();
        assert_eq!(
            encode(&req(&[1.5, f32::NAN, 0.1, 3.0], false), &mut out),
            None
        );
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], "7");
        assert_eq!(v["inputs"][0]["shape"], serde_json::json!([2, 2]));
        assert_eq!(v["inputs"][0]["datatype"], "FP32");
        assert_eq!(
            v["inputs"][0]["data"],
            serde_json::json!([1.5, null, 0.1, 3.0])
        );
        assert_eq!(v["outputs"][0]["name"], "predict_proba");
        // f32 values round-trip through their JSON text exactly.
        let x: f32 = 0.1;
        assert_eq!(v["inputs"][0]["data"][2].as_f64().unwrap() as f32, x);
    }

    #[test]
    fn binary_request_follows_the_extension() {
        let mut out = Vec::new();
        let data = [1.0f32, 2.0, f32::NAN, 4.0];
        let n = encode(&req(&data, true), &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out[..n]).unwrap();
        assert_eq!(v["inputs"][0]["parameters"]["binary_data_size"], 16);
        assert!(v["inputs"][0].get("data").is_none());
        assert_eq!(v["outputs"][0]["parameters"]["binary_data"], true);
        assert_eq!(out.len(), n + 16);
        assert_eq!(&out[n..n + 4], &1.0f32.to_le_bytes());
        assert!(f32::from_le_bytes(out[n + 8..n + 12].try_into().unwrap()).is_nan());
    }

    fn want(rows: usize) -> Want<'static> {
        Want {
            id: 7,
            output: Some("predict_proba"),
            rows,
            positive: 1,
        }
    }

    #[test]
    fn json_response_flat_or_nested() {
        let flat = br#"{"model_name":"m","id":"7","outputs":[{"name":"predict_proba","shape":[2,2],"datatype":"FP32","parameters":{"content_type":"np"},"data":[0.9,0.1,0.3,0.7]}]}"#;
        assert_eq!(decode(flat, None, &want(2)).unwrap(), vec![0.1, 0.7]);
        let nested = br#"{"outputs":[{"name":"predict_proba","shape":[2,2],"datatype":"FP64","data":[[0.9,0.1],[0.3,null]]}]}"#;
        let p = decode(nested, None, &want(2)).unwrap();
        assert_eq!(p[0], 0.1);
        assert!(p[1].is_nan());
        // One column: the positive class is the value.
        let single = br#"{"outputs":[{"name":"predict","shape":[2,1],"datatype":"FP32","data":[0.25,0.5]}]}"#;
        let w = Want {
            output: None,
            ..want(2)
        };
        assert_eq!(decode(single, None, &w).unwrap(), vec![0.25, 0.5]);
    }

    #[test]
    fn bad_responses_are_typed() {
        let cases: [(&[u8], bool); 9] = [
            (b"{\"outputs\": [", true),
            (b"<html>502</html>", true),
            (br#"{"id":"8","outputs":[{"name":"predict_proba","shape":[1,2],"datatype":"FP32","data":[0.5,0.5]}]}"#, true),
            (br#"{"outputs":[{"name":"other","shape":[1,2],"datatype":"FP32","data":[0.5,0.5]}]}"#, false),
            (br#"{"outputs":[{"name":"predict_proba","shape":[2,2],"datatype":"FP32","data":[0.5,0.5,0.5,0.5]}]}"#, false),
            (br#"{"outputs":[{"name":"predict_proba","shape":[1,2],"datatype":"FP32","data":[0.5]}]}"#, false),
            (br#"{"outputs":[{"name":"predict_proba","shape":[1,2],"datatype":"BYTES","data":[0.5,0.5]}]}"#, false),
            (br#"{"outputs":[{"name":"predict_proba","shape":[1,1,2],"datatype":"FP32","data":[0.5,0.5]}]}"#, false),
            (br#"{"outputs":[{"name":"predict_proba","shape":[1,2],"datatype":"FP32","data":[[[[[[[[[[0.5]]]]]]]]]]}]}"#, true),
        ];
        for (body, malformed) in cases {
            let e = decode(body, None, &want(1)).unwrap_err();
            assert_eq!(
                matches!(e, DecodeError::Malformed(_)),
                malformed,
                "{}: {e:?}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(
            error_text(br#"{"error":"Model m not found"}"#),
            "Model m not found"
        );
    }

    #[test]
    fn huge_output_width_is_a_typed_error_not_an_overflow() {
        // 4 x 2^62 wraps to 0 in a usize: the empty data once "matched" and the slice
        // index then panicked (also the seed fuzz/seeds/kserve_response/huge_width_overflow.json).
        let w = Want {
            positive: 0,
            ..want(4)
        };
        let json = br#"{"outputs":[{"name":"predict_proba","shape":[4,4611686018427387904],"datatype":"FP32","data":[]}]}"#;
        let e = decode(json, None, &w).unwrap_err();
        assert!(
            matches!(&e, DecodeError::Shape(m) if m.contains("overflow")),
            "{e:?}"
        );
        // Binary: 4 x 2^61 x 8 bytes wraps to 0 as well.
        let bin = br#"{"outputs":[{"name":"predict_proba","shape":[4,2305843009213693952],"datatype":"FP64","parameters":{"binary_data_size":0}}]}"#;
        let e = decode(bin, Some(bin.len()), &w).unwrap_err();
        assert!(
            matches!(&e, DecodeError::Shape(m) if m.contains("overflow")),
            "{e:?}"
        );
        // An earlier output's size that runs past the address space.
        let far = br#"{"outputs":[{"name":"a","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":18446744073709551615}},{"name":"predict_proba","shape":[1,1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}"#;
        let e = decode(far, Some(far.len()), &want(1)).unwrap_err();
        assert!(matches!(e, DecodeError::Malformed(_)), "{e:?}");
    }

    #[test]
    fn binary_response_reads_its_output_past_others() {
        let json = br#"{"outputs":[{"name":"label","shape":[2],"datatype":"FP32","parameters":{"binary_data_size":8}},{"name":"predict_proba","shape":[2,2],"datatype":"FP32","parameters":{"binary_data_size":16}}]}"#;
        let mut body = json.to_vec();
        for v in [0f32, 1.0, 0.8, 0.2, 0.4, 0.6] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(
            decode(&body, Some(json.len()), &want(2)).unwrap(),
            vec![0.2, 0.6]
        );
        // Truncated binary part.
        let e = decode(&body[..body.len() - 3], Some(json.len()), &want(2)).unwrap_err();
        assert!(matches!(e, DecodeError::Malformed(_)), "{e:?}");
        // A header longer than the body.
        let e = decode(json, Some(json.len() + 1), &want(2)).unwrap_err();
        assert!(matches!(e, DecodeError::Malformed(_)), "{e:?}");
    }
}
