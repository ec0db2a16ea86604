//! Test support for rxu's test suites, in one place.
//!
//! - [`bins`]: `rxud`, `rxu` and the provider library, built by cargo with
//!   the running test's profile (a test never runs a stale binary, and
//!   never passes because one is missing);
//! - [`runtime`]: this test process's runtime directory and scratch
//!   directories;
//! - [`daemon`]: an `rxud` started directly (no root needed), shut down
//!   and reaped on drop;
//! - [`sock`]: socket pairs and connections to a daemon's control socket;
//! - [`verbs`]: two connected QPs through the client library, and polling
//!   helpers;
//! - [`process`]: child processes whose output is read line by line;
//! - [`tools`]: unmodified verbs programs on a device brought up with
//!   `rxu up` (root);
//! - [`surface`]: the verbs surface dump of `tests/c/verbs_surface`
//!   compared with kernel rxe's, under the table of documented differences;
//! - [`hostile`]: what a hostile-client test measures: a bystander
//!   ping-pong that keeps completing, the daemon's fd count and RSS;
//! - [`skip`]: the one way a test says it cannot run on this machine.
//!
//! Every wait is bounded, every child is killed when its handle drops.

pub mod bins;
pub mod daemon;
pub mod fuse;
pub mod hostile;
pub mod process;
pub mod runtime;
pub mod skip;
pub mod sock;
pub mod surface;
pub mod tools;
pub mod verbs;

use std::sync::{Mutex, MutexGuard};

pub use daemon::Daemon;
pub use runtime::runtime_dir;
pub use skip::{have, is_root, skip};
pub use sock::seqpacket_pair;

/// One test at a time within a test executable, for tests that run busy
/// processes (the machine may have two cores, and timing assertions need
/// them).
pub fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|p| p.into_inner())
}
