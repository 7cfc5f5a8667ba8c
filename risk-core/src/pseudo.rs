//! Pseudonyms for identifiers that leave the process or reach a disk.
//!
//! Entity keys (card, account, user ids) and the `u64` keys of IPs, e-mails and merchants are
//! kept as they are in memory (the decide path never pays for this), and replaced by keyed
//! pseudonyms wherever they are written or sent: audit records, Redis key names and values,
//! state snapshots, list journals, the deep tier's history and prompts.
//!
//! A pseudonym is keyed BLAKE3 (BLAKE3's keyed mode is a PRF, the role HMAC-SHA-256 plays in
//! PCI DSS 3.5.1.1's "keyed cryptographic hash"), with a 32-byte key derived from the
//! configured secret (`[privacy] key = "env:RISK_PSEUDONYM_KEY"`, at least 16 bytes) and a
//! domain string per kind of identifier, so one card id and one IP with the same `u64` get
//! unrelated pseudonyms. Without the key an attacker holding the files cannot go back from a
//! pseudonym to the id, even for the small spaces (an IPv4 address) an unkeyed hash leaves
//! open to enumeration; with it, the owner can recompute one to answer a lookup.
//!
//! Pseudonyms are stable for one key: rotating the key starts new Redis keys and new
//! history (see SECURITY.md, "Key rotation"). [`Pseudonymiser::key_id`] names the key in
//! the files so a reader can tell which key made them, without revealing it.

use std::fmt;

/// The kinds of identifier, each its own domain (unrelated pseudonyms for equal `u64`s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    /// Card / account / user ids (`Transaction::entity`).
    Entity,
    /// Group keys of entity state (merchant, device, IP, e-mail groups).
    Group,
    /// List entries (e-mails, IPs, card ids in deny and allow lists).
    List,
    /// Transaction ids.
    Txn,
}

impl Domain {
    fn tag(self) -> &'static [u8] {
        match self {
            Self::Entity => b"entity\0",
            Self::Group => b"group\0",
            Self::List => b"list\0",
            Self::Txn => b"txn\0",
        }
    }
}

/// The shortest secret accepted as a pseudonymisation key.
pub const MIN_KEY_BYTES: usize = 16;

/// The configured key is too short to be a key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{key}: the pseudonymisation key must be at least 16 bytes (it has {len})")]
pub struct KeyTooShort {
    /// The configuration key that gave it.
    pub key: String,
    /// Its length in bytes.
    pub len: usize,
}

/// Keyed pseudonyms. Cheap to clone; `Debug` shows the key id only.
#[derive(Clone)]
pub struct Pseudonymiser {
    key: [u8; 32],
    key_id: [u8; 4],
}

impl Pseudonymiser {
    /// A pseudonymiser keyed by `secret` (any length ≥ 16 bytes; a 32-byte key is derived
    /// from it with BLAKE3's key derivation). `config_key` labels the error.
    pub fn new(config_key: &str, secret: &[u8]) -> Result<Self, KeyTooShort> {
        if secret.len() < MIN_KEY_BYTES {
            return Err(KeyTooShort {
                key: config_key.into(),
                len: secret.len(),
            });
        }
        let key = blake3::derive_key("risk 2026-12 pseudonymisation key", secret);
        let id = blake3::derive_key("risk 2026-12 pseudonymisation key id", &key);
        Ok(Self {
            key,
            key_id: [id[0], id[1], id[2], id[3]],
        })
    }

    /// The pseudonym of a `u64` identifier in `domain`: 64 bits of keyed BLAKE3, never 0
    /// (0 keeps meaning "none", and is mapped to itself).
    pub fn u64(&self, domain: Domain, id: u64) -> u64 {
        if id == 0 {
            return 0;
        }
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(domain.tag());
        h.update(&id.to_le_bytes());
        let out = h.finalize();
        let b = out.as_bytes();
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]).max(1)
    }

    /// The pseudonym of a byte string in `domain`, as 32 lowercase hex digits (128 bits).
    pub fn hex(&self, domain: Domain, bytes: &[u8]) -> String {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(domain.tag());
        h.update(bytes);
        let out = h.finalize();
        let mut s = String::with_capacity(32);
        for b in &out.as_bytes()[..16] {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }

    /// A MAC of `bytes` under a key derived for `purpose` (the audit chain's links).
    pub fn mac(&self, purpose: &str, bytes: &[u8]) -> [u8; 32] {
        let k = blake3::derive_key(purpose, &self.key);
        *blake3::keyed_hash(&k, bytes).as_bytes()
    }

    /// Eight hex digits naming the key (derived from it, not revealing it): written next to
    /// pseudonyms so a reader knows which key made them.
    pub fn key_id(&self) -> String {
        self.key_id.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for Pseudonymiser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pseudonymiser(key id {})", self.key_id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pseudonyms_are_keyed_stable_and_per_domain() {
        let a = Pseudonymiser::new("privacy.key", b"0123456789abcdef-key-A").unwrap();
        let b = Pseudonymiser::new("privacy.key", b"0123456789abcdef-key-B").unwrap();
        assert_eq!(a.u64(Domain::Entity, 42), a.u64(Domain::Entity, 42));
        assert_ne!(a.u64(Domain::Entity, 42), 42);
        assert_ne!(a.u64(Domain::Entity, 42), b.u64(Domain::Entity, 42));
        assert_ne!(a.u64(Domain::Entity, 42), a.u64(Domain::Group, 42));
        assert_eq!(a.u64(Domain::Entity, 0), 0);
        assert_eq!(a.hex(Domain::List, b"x@y.com").len(), 32);
        assert_ne!(
            a.hex(Domain::List, b"x@y.com"),
            b.hex(Domain::List, b"x@y.com")
        );
        assert_ne!(a.key_id(), b.key_id());
        assert!(!format!("{a:?}").contains("0123456789"));
        let e = Pseudonymiser::new("privacy.key", b"short").unwrap_err();
        assert_eq!(
            e.to_string(),
            "privacy.key: the pseudonymisation key must be at least 16 bytes (it has 5)"
        );
    }
}
