//! The audit trail: records, the segment log, reading back, replay.

mod proto;
