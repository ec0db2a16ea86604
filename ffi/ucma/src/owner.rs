//! Which process made the emulation's state. A forked child inherits
//! copies of its fds; closing them there must not end the parent's ids
//! (the kernel's file lives on while the parent holds it), only stop the
//! child taking those numbers for ours.

use std::sync::atomic::{AtomicU32, Ordering};

/// The owner's pid (0: no state made yet).
static OWNER: AtomicU32 = AtomicU32::new(0);

/// Records this process as the owner (the first channel or cmd_fd it
/// makes); later calls change nothing.
pub fn note() {
    let _ = OWNER.compare_exchange(0, std::process::id(), Ordering::AcqRel, Ordering::Acquire);
}

/// Whether this is a forked child of the process that made the state.
pub fn in_forked_child() -> bool {
    let o = OWNER.load(Ordering::Acquire);
    o != 0 && o != std::process::id()
}
