//! The audit trail: records, the segment log, reading back, replay.

mod crash;
#[cfg(feature = "kafka")]
mod kafka;
mod log;
mod proto;
mod replay;
mod tamper;
