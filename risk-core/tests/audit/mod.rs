//! The audit trail: records, the segment log, reading back, replay.

mod crash;
mod log;
mod proto;
