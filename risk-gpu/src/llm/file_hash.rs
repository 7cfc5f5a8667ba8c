//! The hash that names a weights or template file in model identities and cache keys.

use std::path::Path;

/// A 64-bit hash of a file's bytes (multiply-rotate over 8-byte words; detects any
/// change, not meant to resist a forger).
pub fn file_hash(path: &Path) -> std::io::Result<u64> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut h: u64 = 0x243f_6a88_85a3_08d3;
    let mut total: u64 = 0;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        let mut words = buf[..n].chunks_exact(8);
        for w in &mut words {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
        }
        for &b in words.remainder() {
            h = (h ^ b as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(29);
        }
    }
    Ok(h ^ total.wrapping_mul(0xff51_afd7_ed55_8ccd))
}
