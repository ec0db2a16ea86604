//! The client library: the Rust API that mirrors verbs, used by Rust
//! programs directly and by the C provider underneath libibverbs.
//!
//! Control operations (create, modify, destroy) are request/response
//! exchanges with the device's `rxud` over its control socket
//! ([`rxu_abi::proto`]). The data path never makes a system call while the
//! daemon is awake: posts write slots into shared-memory rings and publish
//! them; polls read CQEs from rings; arming a CQ stores a word. A doorbell
//! is rung only when the daemon has said it sleeps.
//!
//! Shaped for a C ABI on top: objects are owned values addressed by their
//! daemon handles, no generic parameters on hot paths, `user_handle`s
//! passed through for events, every error has an errno
//! ([`Error::errno`]), posts report the failing WR's index like `bad_wr`,
//! and [`SqGuard`]/[`RqGuard`] let a caller post a linked list under one
//! lock.
//!
//! Lifetimes: every object holds the [`Context`]; MRs, QPs and SRQs hold
//! their PD, QPs their CQs and SRQ, so dropping in any order releases the
//! daemon objects in a valid one. Drop ignores errors; the explicit
//! `destroy`/`dealloc`/`dereg` report them and hand the object back.

mod ah;
mod channel;
mod connect;
mod context;
mod cq;
mod error;
mod event;
mod mr;
mod mw;
mod pd;
mod placement;
mod qp;
mod queue;
mod shadow;
mod sock;
mod srq;
mod watch;
mod wc;
mod wr;

pub use ah::Ah;
pub use channel::{CompChannel, CQ_EVENT_LEN};
pub use connect::{ConnectOpts, QpEndpoint};
pub use context::{Context, DeviceStats, DeviceStatus};
pub use cq::{Cq, CqOptions, ARM_NEXT, ARM_SOLICITED};
pub use error::{Error, PostError, Result};
pub use event::{event_type, AsyncEvent, ASYNC_EVENT_LEN};
pub use mr::{reg_mr, reg_mr_iova, Mr, MrBuf};
pub use mw::{Mw, MwBind, MwType};
pub use pd::Pd;
pub use placement::{Alloc, RingAlloc, RingKind};
pub use qp::{Qp, QpInit};
pub use queue::{RqGuard, SqGuard};
pub use srq::{srq_attr_mask, Srq, SrqAttr};
pub use wc::Wc;
pub use wr::{RecvWr, SendWr, Sge, UdDest};

// What callers need alongside, from their home modules.
pub use rxu_abi::proto::{AhAttr, DeviceAttr, PortAttr, QpAttr, QpCap, QpType};
pub use transport::qp::{access, send_flags, wc_flags, QpState, WcOpcode, WcStatus};
pub use transport::verbs::qp_attr_mask;
pub use transport::verbs::{wr_flags, WrOpcode};
