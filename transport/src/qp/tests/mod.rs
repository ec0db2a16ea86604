//! Two QPs back to back in memory: every packet goes through
//! `poll_transmit` -> bytes -> `Packet::parse` -> `handle_packet`, with a
//! fake clock and seeded loss, duplication and reordering.

mod harness;

mod bench;
mod counters;
mod credits;
mod errors;
mod mw;
mod owner_gone;
mod prop;
mod rc_basic;
mod rc_recovery;
mod robustness;
mod uc_ud;
