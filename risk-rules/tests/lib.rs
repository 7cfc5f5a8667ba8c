//! Integration tests of the rule language and the rule tier.

mod audit;
mod default_set;
mod explain;
mod fuzz_regressions;
mod golden;
mod history;
mod layering;
mod lint;
mod lists;
mod mixed;
mod programs;
mod property;
mod reload;
mod sets;
