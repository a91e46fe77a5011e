//! The history checker's tests: a clean history, one negative control per anomaly kind,
//! properties of generated histories, and the JSON lines round trip.

mod build;
mod clean;
mod generate;
mod jsonl;
mod negative_controls;
mod properties;
