//! The rxu rdma-core provider: the shared object libibverbs loads
//! (`librxu-rdmav34.so`, provider ABI `IBVERBS_PRIVATE_34`, rdma-core
//! 39..56) to drive rxu devices through the client library
//! (`rxu_client`). All of the project's `unsafe` that touches C
//! lives in this crate.
//!
//! From the top of the import graph down (no file imports one above it):
//! - [`register`]: the ELF constructor and the tables it registers.
//! - [`device`]: the device ops (match, alloc, uninit).
//! - [`context`]: open (installs the ops table), close, and the
//!   per-context state every op starts from.
//! - [`ops`]: the verbs ops table and every op.
//! - [`objects`]: the provider's objects behind the C verbs objects, and
//!   the casts back from C pointers.
//! - [`channel`], [`events`]: completion channels and event bookkeeping;
//!   [`preload`]: the uverbs emulation of `librxu-ucma.so`, when loaded.
//! - [`version`]: which libibverbs is loaded; resolves its private entry
//!   points by version node; refuses unknown layouts.
//! - [`abi`]: the C layouts, checked at compile time, against the
//!   installed headers (test) and against the running library.
//! - [`guard`], [`log`]: the C return convention, and the log.

mod abi;
mod channel;
mod context;
mod device;
mod events;
mod guard;
mod log;
mod objects;
mod ops;
mod preload;
mod register;
mod version;
