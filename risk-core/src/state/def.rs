//! Feature and list definitions: what `[[state.features]]` and `[state.lists.*]` say.
//!
//! A definition is plain data; [`super::plan::Plan`] compiles a set of them against a
//! schema (slots, shared bucket rings) and refuses what cannot work, naming the feature.

use crate::decision::Action;
use crate::pseudo::Pseudonymiser;
use crate::secret::{redact_url, Secret};
use std::path::PathBuf;
use std::time::Duration;

/// `[state.redis]`.
///
/// `Debug` shows the URLs without credentials and the password as `[redacted]`.
#[derive(Clone)]
pub struct RedisConfig {
    /// `redis://host:port/db` or `rediss://host:port/db` (TLS; one server; ignored when
    /// `cluster` is given). A password written in it still works but is never printed;
    /// prefer [`password`](Self::password).
    pub url: String,
    /// Redis Cluster seed nodes (`redis://host:port` or `rediss://host:port`); empty: one
    /// server at `url`.
    pub cluster: Vec<String>,
    /// The ACL user (`AUTH <username> <password>`); none: the `default` user.
    pub username: Option<String>,
    /// The ACL password (`env:NAME` / `file:PATH` in risk.toml); overrides one in the URL.
    pub password: Option<Secret>,
    /// PEM file of the CA(s) that signed the server's certificate: only they are trusted
    /// (none: the system's roots). Needs a `rediss://` URL.
    pub tls_ca_file: Option<PathBuf>,
    /// PEM certificate (chain) of this client, for servers that ask for one
    /// (`tls-auth-clients yes`); with [`tls_key_file`](Self::tls_key_file).
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of [`tls_cert_file`](Self::tls_cert_file) (PKCS#8, PKCS#1 or SEC1).
    pub tls_key_file: Option<PathBuf>,
    /// Bound on each socket read and write of the decide path's round trip.
    pub timeout: Duration,
    /// Key prefix (keys are `<prefix>:<definitions fingerprint>:<source>:{<key>}`: the
    /// key in braces, Redis Cluster's hash tag, so that a key of other definitions lives
    /// in the same slot and can be carried).
    pub prefix: String,
    /// After a failure, how long Redis is skipped (features missing) before a retry.
    pub retry: Duration,
    /// How long a transaction is remembered for a label.
    pub pending_ttl: Duration,
    /// Transactions remembered for labels on Redis at most (kept in 256 shards of
    /// `max_pending / 256` each, at least one; the oldest of a full shard is dropped,
    /// counted in [`StateStats::pending_dropped`](super::StateStats::pending_dropped)).
    pub max_pending: usize,
    /// Background writes (outcomes, pending labels) queued at most.
    pub queue: usize,
    /// Keep the lists' entries on this Redis, shared by every host (`share_lists`,
    /// default `true`); `false`: each host keeps its own (files + journal).
    pub share_lists: bool,
    /// Shared lists: how often the background subscriber checks each list's version
    /// on Redis (also its connect and read timeout). Bounds how late a change whose
    /// pub/sub message was lost is seen, and how soon an outage is noticed
    /// (`lists_check_ms`, default 1000).
    pub lists_check: Duration,
    /// One server: how long a sequence row that holds the decision's own state features
    /// waits for this host's next call to carry it before it is sent in a call of its
    /// own (`rows_linger_ms`, default 1). Bounds how much later than the decision's
    /// reply another host sees the row (plus a round trip); 0: sent as soon as the
    /// connection is idle.
    pub rows_linger: Duration,
    /// One server: the decide path's connections (`connections`, default 2, at most
    /// 64), each pipelined with an I/O thread of its own; a call takes the first that no
    /// other caller waits on, so that many decisions are in flight at once (one
    /// connection carries one batch per round trip). When sequences hold rows for the
    /// next call, a decision takes the connection of their key (a hash of it), so a
    /// key's rows and later calls stay in order; on two key sources, one connection.
    pub connections: usize,
    /// One server: how long a read of the decide path's connections polls its socket
    /// (yielding the CPU between polls) before it blocks (`read_spin_us`, default 0: it
    /// blocks at once; at most 10,000 and at most the timeout). A reply that comes while polling is read without
    /// the thread's wake-up from the kernel (~50 µs on the VMs measured, BENCHMARKS.md
    /// [18]), at the cost of the CPU time polled.
    pub read_spin: Duration,
    /// Keys carried across a change of definitions (`carry_keys`, default `true`): the
    /// engine publishes its definitions' layout in the fleet's registry
    /// (`<prefix>:defs`), and a key that these definitions have not written yet is
    /// built, on its first decision, from the key of the newest other definitions
    /// published there (their clock and every window and sequence defined alike), as a
    /// snapshot of other definitions is restored. `false`: such a key starts empty.
    pub carry_keys: bool,
    /// When set, every identifier in a Redis key name or value (entity and group keys,
    /// transaction ids) is its keyed pseudonym: the server never sees a raw card id.
    /// No risk.toml key of its own: the engine passes `[privacy] key` here.
    pub pseudonymiser: Option<Pseudonymiser>,
}

impl Default for RedisConfig {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379/".into(),
            cluster: Vec::new(),
            username: None,
            password: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            timeout: Duration::from_millis(5),
            prefix: "risk".into(),
            retry: Duration::from_secs(1),
            pending_ttl: Duration::from_secs(120 * 86_400),
            max_pending: 10_000_000,
            queue: 65_536,
            share_lists: true,
            lists_check: Duration::from_secs(1),
            rows_linger: Duration::from_millis(1),
            connections: 2,
            read_spin: Duration::ZERO,
            carry_keys: true,
            pseudonymiser: None,
        }
    }
}

impl RedisConfig {
    /// The server(s) as they may be printed: URLs without credentials.
    pub fn server(&self) -> String {
        if self.cluster.is_empty() {
            redact_url(&self.url)
        } else {
            let nodes: Vec<String> = self.cluster.iter().map(|u| redact_url(u)).collect();
            format!("cluster [{}]", nodes.join(", "))
        }
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let nodes: Vec<String> = self.cluster.iter().map(|u| redact_url(u)).collect();
        f.debug_struct("RedisConfig")
            .field("url", &redact_url(&self.url))
            .field("cluster", &nodes)
            .field("username", &self.username)
            .field("password", &self.password)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_key_file", &self.tls_key_file)
            .field("timeout", &self.timeout)
            .field("prefix", &self.prefix)
            .field("retry", &self.retry)
            .field("pending_ttl", &self.pending_ttl)
            .field("max_pending", &self.max_pending)
            .field("queue", &self.queue)
            .field("share_lists", &self.share_lists)
            .field("lists_check", &self.lists_check)
            .field("rows_linger", &self.rows_linger)
            .field("connections", &self.connections)
            .field("read_spin", &self.read_spin)
            .field("carry_keys", &self.carry_keys)
            .field("pseudonymiser", &self.pseudonymiser)
            .finish()
    }
}

impl PartialEq for RedisConfig {
    fn eq(&self, o: &Self) -> bool {
        self.url == o.url
            && self.cluster == o.cluster
            && self.username == o.username
            && self.password == o.password
            && self.tls_ca_file == o.tls_ca_file
            && self.tls_cert_file == o.tls_cert_file
            && self.tls_key_file == o.tls_key_file
            && self.timeout == o.timeout
            && self.prefix == o.prefix
            && self.retry == o.retry
            && self.pending_ttl == o.pending_ttl
            && self.max_pending == o.max_pending
            && self.queue == o.queue
            && self.share_lists == o.share_lists
            && self.lists_check == o.lists_check
            && self.rows_linger == o.rows_linger
            && self.connections == o.connections
            && self.read_spin == o.read_spin
            && self.carry_keys == o.carry_keys
            && self.pseudonymiser.as_ref().map(Pseudonymiser::key_id)
                == o.pseudonymiser.as_ref().map(Pseudonymiser::key_id)
    }
}

/// What a feature (or a list) is keyed by: whose history it reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeySource {
    /// The transaction's entity (card / account / user): [`crate::Transaction::entity`].
    Entity,
    /// The device fingerprint: [`crate::Transaction::device`].
    Device,
    /// The merchant / terminal: [`crate::Transaction::merchant`].
    Merchant,
    /// The IP address: [`crate::Transaction::ip`].
    Ip,
    /// The e-mail address: [`crate::Transaction::email`].
    Email,
    /// The transaction's country (typed field).
    Country,
    /// Any categorical field of the schema, by name (its category id is the key).
    Field(String),
}

impl KeySource {
    /// Parses `entity` (alias `card`, `account`), `device`, `merchant` (alias
    /// `terminal`), `ip`, `email`, `country`, or the name of a categorical field.
    pub fn parse(s: &str) -> Self {
        match s {
            "entity" | "card" | "account" => KeySource::Entity,
            "device" => KeySource::Device,
            "merchant" | "terminal" => KeySource::Merchant,
            "ip" => KeySource::Ip,
            "email" => KeySource::Email,
            "country" => KeySource::Country,
            other => KeySource::Field(other.to_owned()),
        }
    }

    /// The canonical name (`entity`, `device`, ..., or the field's name).
    pub fn name(&self) -> &str {
        match self {
            KeySource::Entity => "entity",
            KeySource::Device => "device",
            KeySource::Merchant => "merchant",
            KeySource::Ip => "ip",
            KeySource::Email => "email",
            KeySource::Country => "country",
            KeySource::Field(f) => f,
        }
    }
}

/// How a feature aggregates the key's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Agg {
    /// Events in the window (0 when none).
    Count,
    /// Sum of `of` over the window (0 when none).
    Sum,
    /// Mean of `of` (missing when none).
    Avg,
    /// Least `of` (missing when none).
    Min,
    /// Greatest `of` (missing when none).
    Max,
    /// Population standard deviation of `of` (missing when none).
    Stddev,
    /// Distinct values of the key source `of` (exact up to `exact_limit`, then a
    /// HyperLogLog with 128 registers per bucket: about 9% standard error).
    Distinct,
    /// Seconds since the key's previous matching event (missing when none).
    SinceLast,
    /// The current `of` over the window's mean of `of` (missing when none or 0): the
    /// amount against the entity's typical amount.
    Ratio,
    /// Transactions reported fraudulent in the delayed window (labels, see `delay`).
    FraudCount,
    /// Fraud share of the transactions in the delayed window (missing when none).
    FraudRate,
}

impl Agg {
    /// Parses the TOML name (`count`, `sum`, `avg`, `min`, `max`, `stddev`,
    /// `distinct`, `since_last`, `ratio`, `fraud_count`, `fraud_rate`).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "count" => Agg::Count,
            "sum" => Agg::Sum,
            "avg" | "mean" => Agg::Avg,
            "min" => Agg::Min,
            "max" => Agg::Max,
            "stddev" => Agg::Stddev,
            "distinct" => Agg::Distinct,
            "since_last" => Agg::SinceLast,
            "ratio" => Agg::Ratio,
            "fraud_count" => Agg::FraudCount,
            "fraud_rate" => Agg::FraudRate,
            _ => return None,
        })
    }

    /// Whether the aggregate reads a numeric value (`of` names a numeric field).
    pub fn needs_value(self) -> bool {
        matches!(
            self,
            Agg::Sum | Agg::Avg | Agg::Min | Agg::Max | Agg::Stddev | Agg::Ratio
        )
    }

    /// Whether the aggregate reads labels.
    pub fn is_label(self) -> bool {
        matches!(self, Agg::FraudCount | Agg::FraudRate)
    }
}

/// Whether the transaction being decided counts in its own features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Current {
    /// The state before this transaction (the default): "in the hour before".
    #[default]
    Exclude,
    /// The state including this transaction (when it passes the filters).
    Include,
}

/// A condition on the transaction that decides whether it enters a feature's history.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// A categorical field (or `channel`, `country`, `currency`) is one of the values.
    In {
        /// Field name.
        field: String,
        /// Accepted values.
        values: Vec<String>,
    },
    /// A numeric field within bounds (each bound optional; missing values never pass).
    Range {
        /// Field name.
        field: String,
        /// `value > gt`.
        gt: Option<f64>,
        /// `value >= ge`.
        ge: Option<f64>,
        /// `value < lt`.
        lt: Option<f64>,
        /// `value <= le`.
        le: Option<f64>,
    },
}

/// One velocity / behaviour feature.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureDef {
    /// The schema field it fills (numeric; added to the schema by `risk.toml`).
    pub name: String,
    /// Whose history.
    pub key: KeySource,
    /// The aggregate.
    pub agg: Agg,
    /// The value aggregated (a numeric field, `amount` by default) or, for
    /// [`Agg::Distinct`], the key source counted.
    pub of: Option<String>,
    /// The window's length (`W`; default 1 hour).
    pub window: Duration,
    /// Buckets per window (`B`, default 12): the window is kept as `B + 1` time buckets
    /// of `W / B` each and covers between `W` and `W + W/B` of history.
    pub buckets: u32,
    /// Whether the current transaction counts itself.
    pub current: Current,
    /// All must pass for an event to enter the history.
    pub filters: Vec<Filter>,
    /// Only events whose decision was one of these actions (entered after the decision;
    /// `current = "include"` is refused with it).
    pub outcome: Vec<Action>,
    /// Label features: how long before the read the window ends (a multiple of the
    /// bucket width).
    pub delay: Duration,
    /// [`Agg::Distinct`]: values kept exactly before switching to the sketch.
    pub exact_limit: u32,
    /// An exact sliding window (`exact = true`): the key's events inside the window are
    /// kept (time, value), so the feature equals the aggregate over the events at
    /// `(t - W, t]` (label features: `(t - D - W, t - D]`), pandas'
    /// `rolling(W, closed="right")`, instead of the `W` to `W + W/B` of buckets. For
    /// count, sum, avg, min, max, stddev, ratio, fraud_count and fraud_rate; in process
    /// only. The buckets stay as the fallback past [`max_events`](Self::max_events).
    pub exact: bool,
    /// Exact windows: events kept per key at most (1..=[`MAX_EVENTS`](super::MAX_EVENTS),
    /// default 1,024). Past it the oldest are dropped, and a read whose window may have
    /// held one answers from the buckets (counted in `StateStats::exact_fallback`).
    pub max_events: u32,
}

impl FeatureDef {
    /// A feature with the defaults (1 h window, 12 buckets, current excluded).
    pub fn new(name: &str, key: KeySource, agg: Agg) -> Self {
        Self {
            name: name.to_owned(),
            key,
            agg,
            of: None,
            window: Duration::from_secs(3_600),
            buckets: 12,
            current: Current::Exclude,
            filters: Vec::new(),
            outcome: Vec::new(),
            delay: Duration::ZERO,
            exact_limit: 32,
            exact: false,
            max_events: 1_024,
        }
    }

    /// Makes the window exact, keeping at most `max_events` events per key.
    pub fn exact(mut self, max_events: u32) -> Self {
        self.exact = true;
        self.max_events = max_events;
        self
    }

    /// Sets `of`.
    pub fn of(mut self, of: &str) -> Self {
        self.of = Some(of.to_owned());
        self
    }
    /// Sets the window and its bucket count.
    pub fn window(mut self, w: Duration, buckets: u32) -> Self {
        self.window = w;
        self.buckets = buckets;
        self
    }
    /// Sets whether the current transaction counts.
    pub fn current(mut self, c: Current) -> Self {
        self.current = c;
        self
    }
    /// Adds a filter.
    pub fn filter(mut self, f: Filter) -> Self {
        self.filters.push(f);
        self
    }
    /// Sets the label delay.
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }
    /// Sets the outcome filter.
    pub fn outcome(mut self, actions: &[Action]) -> Self {
        self.outcome = actions.to_vec();
        self
    }
}

/// Rows one sequence may keep per key (`length`), at most.
pub const MAX_SEQUENCE_LEN: u32 = 256;
/// Values one sequence row may hold (`fields`), at most.
pub const MAX_SEQUENCE_FIELDS: usize = 64;

/// One value of a sequence row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SeqField {
    /// A schema field as the model sees it: a numeric value, a categorical field's
    /// category id (an entity-state feature is a numeric field like any other).
    Field(String),
    /// `dt`: seconds since the previous event of the key's sequence (0 for its first).
    Dt,
    /// `age`: seconds from the event to the read (the key's latest event time).
    Age,
}

impl SeqField {
    /// Parses `dt`, `age` or a field name.
    pub fn parse(s: &str) -> Self {
        match s {
            "dt" => SeqField::Dt,
            "age" => SeqField::Age,
            f => SeqField::Field(f.to_owned()),
        }
    }
}

/// A sequence for sequence models (`[[state.sequences]]`): the key's last `length`
/// events (by event time, ties in arrival order), each a row of `fields`, handed to
/// scorers as [`crate::seq::Sequence`] (`[length, fields]` and a mask).
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceDef {
    /// Its name: what a scorer's input names (`[a-z0-9_]`).
    pub name: String,
    /// Whose events.
    pub key: KeySource,
    /// `N`: events kept per key (1..=[`MAX_SEQUENCE_LEN`]).
    pub length: u32,
    /// The values of a row, in order (1..=[`MAX_SEQUENCE_FIELDS`]).
    pub fields: Vec<SeqField>,
    /// Whether the transaction being decided is the sequence's last event
    /// (`Include`, the default for sequences: what sequence models are trained on) or
    /// the sequence is the history before it.
    pub current: Current,
    /// A missing value (a field the transaction lacks) in a row: this value (default 0;
    /// a model's input seldom takes NaN).
    pub missing: f32,
    /// All must pass for an event to enter the sequence.
    pub filters: Vec<Filter>,
}

impl SequenceDef {
    /// A sequence of the last `length` events of `key` with `fields`, the current
    /// transaction included.
    pub fn new(name: &str, key: KeySource, length: u32, fields: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            key,
            length,
            fields: fields.iter().map(|f| SeqField::parse(f)).collect(),
            current: Current::Include,
            missing: 0.0,
            filters: Vec::new(),
        }
    }
}

/// A named block/allow list keyed by one key source; rules read it as
/// `device in list.blocked_devices` (the schema field `list.<name>.<key>`, 1 or 0).
#[derive(Debug, Clone, PartialEq)]
pub struct ListDef {
    /// The list's name (`[a-z0-9_]`).
    pub name: String,
    /// What its entries are.
    pub key: KeySource,
    /// A file loaded at start and by `reload_lists` (one entry per line:
    /// `value[,expires_at_ms]`; `#` comments).
    pub file: Option<PathBuf>,
}

impl ListDef {
    /// The schema field a list fills: `list.<name>.<key>`.
    pub fn field_name(&self) -> String {
        format!("list.{}.{}", self.name, self.key.name())
    }
}

/// Everything entity state does (`[state]` in `risk.toml`).
#[derive(Debug, Clone, PartialEq)]
pub struct StateConfig {
    /// The features.
    pub features: Vec<FeatureDef>,
    /// The lists.
    pub lists: Vec<ListDef>,
    /// Sequences for sequence models (in process only).
    pub sequences: Vec<SequenceDef>,
    /// Keys kept per key source (idle keys are evicted first: CLOCK, a reference bit
    /// per key; memory grows with the keys held, up to this bound).
    pub max_keys: usize,
    /// How far ahead of the clock an event time may be (later times are clamped).
    pub max_future: Duration,
    /// How late (behind the key's latest event) an event still enters its own bucket;
    /// later ones count at the key's latest time.
    pub max_lateness: Duration,
    /// Transactions remembered for [`report_label`](crate::Engine::report_label).
    pub max_pending_labels: usize,
    /// Snapshot file: restored at build when present, written by `snapshot_state` and
    /// at shutdown.
    pub snapshot: Option<PathBuf>,
    /// Where runtime list changes are journalled (`<dir>/<list>.journal`); none: lists
    /// changed at run time are not persisted.
    pub dir: Option<PathBuf>,
    /// Keep the features on Redis (`[state.redis]`, feature `redis`) instead of in process.
    pub redis: Option<RedisConfig>,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            features: Vec::new(),
            lists: Vec::new(),
            sequences: Vec::new(),
            max_keys: 1_000_000,
            max_future: Duration::from_secs(300),
            max_lateness: Duration::from_secs(60),
            max_pending_labels: 1_000_000,
            snapshot: None,
            dir: None,
            redis: None,
        }
    }
}

impl StateConfig {
    /// The numeric schema fields this configuration fills, in order: features, then
    /// list memberships.
    pub fn field_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.features.iter().map(|f| f.name.clone()).collect();
        v.extend(self.lists.iter().map(ListDef::field_name));
        v
    }

    /// Adds every field this configuration fills to a schema builder (as numeric).
    pub fn extend_schema(
        &self,
        mut b: crate::schema::SchemaBuilder,
    ) -> crate::schema::SchemaBuilder {
        for n in self.field_names() {
            b = b.numeric(&n);
        }
        b
    }
}
