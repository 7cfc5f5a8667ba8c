//! Integration tests of the engine: deterministic (injected clock, scripted scorers).

mod audit;
mod common;
mod config;
mod deploy;
mod drill;
mod engine;
mod gray;
mod gray_budget;
mod health;
mod layering;
mod monitor;
mod privacy;
mod prom;
mod reliability;
mod state;
