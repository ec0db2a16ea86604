//! rxu's connection manager (the kernel's `ib_cm` + `rdma_cm`, without a kernel).
//!
//! - [`wire`]: the CM MADs as they travel in UD SEND_ONLY packets to QP1
//!   (Q_Key 0x80010000): MAD header, REQ / REP / RTU / REJ / MRA / DREQ /
//!   DREP / SIDR_REQ / SIDR_REP, the rdma_cm IP header carried in private
//!   data, service IDs. Parse never panics; emit always writes 256 bytes.
//! - [`engine`]: the sans-IO CM: ids, port spaces, listeners, connections,
//!   retransmissions, TimeWait. Driven by commands, MADs and timers; it
//!   hands out MADs to send and events for their owners.
#![forbid(unsafe_code)]

pub mod engine;
pub mod wire;
