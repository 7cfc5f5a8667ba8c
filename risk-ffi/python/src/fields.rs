//! The transaction fields a mapping key or a column names (every other name is a schema
//! feature, or `text`): one table for `decide`'s mappings and `decide_batch`'s columns.

/// A transaction field, by the name a key or a column gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Id,
    Entity,
    /// `timestamp_ms` or `time`.
    Time,
    Amount,
    Currency,
    Mcc,
    Country,
    Channel,
    Device,
    Merchant,
    Ip,
    Email,
}

/// The names, in `risk.TXN_FIELDS`'s order.
pub const TXN_FIELDS: [&str; 13] = [
    "id",
    "entity",
    "timestamp_ms",
    "time",
    "amount",
    "currency",
    "mcc",
    "country",
    "channel",
    "device",
    "merchant",
    "ip",
    "email",
];

impl Field {
    /// The field `name` names, if any.
    pub fn parse(name: &str) -> Option<Field> {
        Some(match name {
            "id" => Field::Id,
            "entity" => Field::Entity,
            "timestamp_ms" | "time" => Field::Time,
            "amount" => Field::Amount,
            "currency" => Field::Currency,
            "mcc" => Field::Mcc,
            "country" => Field::Country,
            "channel" => Field::Channel,
            "device" => Field::Device,
            "merchant" => Field::Merchant,
            "ip" => Field::Ip,
            "email" => Field::Email,
            _ => return None,
        })
    }
}
