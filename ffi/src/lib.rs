//! The rxu rdma-core provider: the shared object libibverbs loads
//! (one file installed as `librxu-rdmav{34,57,59,64,65}.so`, for every
//! provider ABI of rdma-core 34..65; docs/provider-abi.md) to drive rxu
//! devices through the client library (`rxu_client`). All of the project's `unsafe` that touches C
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
//! - [`version`]: which libibverbs is loaded and its layouts; builds that
//!   release's ops table; resolves its private entry points by version
//!   node; refuses unknown layouts.
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
