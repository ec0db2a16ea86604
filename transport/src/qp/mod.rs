//! Queue pairs as sans-IO state machines, split as the kernel's rxe splits
//! them: the requester turns send WQEs into request packets, the responder
//! executes incoming requests and produces ACKs / READ responses, the
//! completer matches responses to WQEs and produces send completions.
//!
//! Inputs: [`Qp::post_send`], [`Qp::post_recv`], [`Qp::handle_packet`],
//! [`Qp::handle_timeout`]. Outputs: [`Qp::poll_transmit`] (packet bytes,
//! BTH..pad with room for the ICRC), [`Qp::poll_completion`],
//! [`Qp::poll_timeout`]. Memory is reached only through [`Memory`].

#![forbid(unsafe_code)]

mod mem_error;
pub mod memory;
pub mod types;

pub use memory::{AtomicOp, BufferMemory, MemError, Memory};
pub use types::*;
pub mod window;
pub use window::{MwBind, MwType};
pub mod queue_pair;
pub use queue_pair::*;

mod completer;
mod error;
pub mod grh;
mod requester;
mod resources;
mod resp_state;
mod resp_ud;
mod responder;
mod responses;
mod send_queue;
mod sgl;
pub mod timers;
mod tuning;
mod ud_dedup;
pub mod udp_sport;

pub use send_queue::MAX_MSG_SIZE;
pub use tuning::QpTuning;

#[cfg(test)]
mod tests;
