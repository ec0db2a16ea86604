//! In-process tests of the daemon's device: requests as values, the
//! client side of the rings mapped in this same process, and this
//! process's own /proc/self/mem as the client memory grant. Each test
//! binds its engine to its own 127.0.77.x address.
//!
//! `harness` holds the shared helpers, `spec` the work requests as values
//! (also used by `wqe`'s tests); one file per topic.

mod harness;
pub(super) mod spec;

mod cm;
mod control;
mod cq;
mod datapath;
mod lifecycle;
mod mcast;
mod parked;
mod port;
mod quota;
mod share;
mod srq;
mod xrc;
