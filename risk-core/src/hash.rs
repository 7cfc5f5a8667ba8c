//! Every hash the crate uses, in one place: stable across platforms and releases (they
//! key persisted state, route canaries and fingerprint configurations, so a change here is
//! a change of data format).
//!
//! - [`Fnv`]: FNV-1a 64 over bytes (fingerprints, string ids, list keys).
//! - [`key_hash`] / [`email_hash`]: the keys transactions carry for merchants, IPs and
//!   e-mails.
//! - [`splitmix_finalize`] / [`splitmix`]: SplitMix64's full-avalanche mix of a `u64`
//!   (canary buckets, state shards and rings).
//! - [`KeyHasher`]: a `Hasher` for maps keyed by `u64` entity keys.

use std::hash::Hasher;

/// The 64-bit golden-ratio increment of SplitMix64.
pub const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// FNV-1a, 64 bit: stable across platforms and releases (unlike `DefaultHasher`).
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self::new()
    }
}

impl Fnv {
    /// A fresh hasher.
    pub const fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
    /// Feeds bytes.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= b as u64;
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
    /// Hash of one byte string.
    pub fn hash(bytes: &[u8]) -> u64 {
        let mut h = Self::new();
        h.write(bytes);
        h.finish()
    }
}

/// The hash of a string key as transactions carry it (`merchant`, `ip`, `email`):
/// FNV-1a of the trimmed text (e-mails lower-cased), never 0 (0 means "no key").
pub fn key_hash(s: &str) -> u64 {
    Fnv::hash(s.trim().as_bytes()).max(1)
}

/// The e-mail key of `s`: trimmed and lower-cased, then [`key_hash`].
pub fn email_hash(s: &str) -> u64 {
    key_hash(&s.trim().to_ascii_lowercase())
}

/// SplitMix64's finaliser: a full-avalanche mix so nearby keys land in unrelated buckets.
#[inline]
pub fn splitmix_finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One SplitMix64 step: spreads ids and FNV hashes over all 64 bits.
#[inline]
pub fn splitmix(x: u64) -> u64 {
    splitmix_finalize(x.wrapping_add(GOLDEN))
}

/// Multiply-xorshift hasher for `u64` keys (entity keys may be sequential ids).
#[derive(Debug, Default)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values are a data format (persisted state, canary buckets): pinned here.
    #[test]
    fn hashes_are_pinned() {
        assert_eq!(Fnv::hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(Fnv::hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(key_hash(" a "), Fnv::hash(b"a"));
        assert_eq!(email_hash(" A@B.com"), key_hash("a@b.com"));
        assert_eq!(splitmix(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix_finalize(0), 0);
        let mut h = KeyHasher::default();
        h.write_u64(1);
        assert_ne!(h.finish(), 1);
    }
}
