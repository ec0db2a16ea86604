//! rxu transport: everything about RoCEv2 packets and the IB transport
//! protocol, and the libibverbs vocabulary every rxu crate shares; nothing
//! about shared memory or the verbs API itself.
//!
//! - [`wire`]: typed views over packet bytes (parse/emit), opcode table, ICRC.
//! - [`psn`]: 24-bit packet sequence number arithmetic.
//! - [`qp`]: sans-IO queue pair state machines (requester, responder,
//!   completer) for RC, UC and UD.
//! - [`verbs`]: the libibverbs vocabulary shared by every crate: flags,
//!   event types, QP type/state, MTU, SGE, completion codes, and the
//!   work-request opcode table.
//! - [`engine`]: the sans-IO endpoint (QP table, demux, timers) and the UDP
//!   driver that owns the sockets, plus a seeded fault injector for tests.

pub mod engine;
pub mod psn;
pub mod qp;
pub mod verbs;
pub mod wire;

pub use psn::Psn;
