//! The rxu rdma-core provider: the shared object libibverbs loads
//! (`librxu-rdmav34.so`, provider ABI `IBVERBS_PRIVATE_34`, rdma-core
//! 39..56) to drive rxu devices through the client library
//! (`rxu_client`). All of the project's `unsafe` that touches C
//! lives in this crate.
//!
//! - [`abi`]: the C layouts, checked at compile time, against the
//!   installed headers (test) and against the running library.
//! - [`version`]: which libibverbs is loaded; resolves its private entry
//!   points by version node; refuses unknown layouts.
//! - [`register`]: the ELF constructor, device ops and matching.
//! - [`context`]: open/close (one rxud connection per context).
//! - [`ops`]: the verbs ops table and every op.
//! - [`channel`], [`events`]: completion channels and event bookkeeping.

mod abi;
mod channel;
mod context;
mod events;
mod guard;
mod log;
mod ops;
mod register;
mod version;
