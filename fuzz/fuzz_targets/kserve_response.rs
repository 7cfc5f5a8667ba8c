//! The remote tier's KServe V2 response parser on arbitrary bytes (a server's answer is
//! untrusted input): probabilities or a typed error, never a panic, an out-of-bounds
//! read or unbounded nesting. The first two bytes choose rows (1-8) and whether the rest
//! is a binary-extension body (its JSON header length from the next two bytes).
#![no_main]

use libfuzzer_sys::fuzz_target;
use risk_gpu::remote::v2::parse_response;

fuzz_target!(|data: &[u8]| {
    let [mode, rows, rest @ ..] = data else { return };
    let rows = (*rows as usize % 8) + 1;
    let (header_len, body) = if mode & 1 == 1 {
        let [a, b, body @ ..] = rest else { return };
        (Some(u16::from_le_bytes([*a, *b]) as usize), body)
    } else {
        (None, rest)
    };
    let output = if mode & 2 == 2 { None } else { Some("predict_proba") };
    if let Ok(p) = parse_response(body, header_len, output, rows, (mode >> 2) as usize % 3, 7) {
        assert_eq!(p.len(), rows);
    }
});
