//! When a test cannot run on this machine (not root, a tool not
//! installed), it says so through [`skip`] and returns. A skip is never
//! for something the build can provide (see [`crate::bins`]).
//!
//! With `RXU_TESTS_NO_SKIP=1` in the environment a skip fails the test
//! instead: on a machine that is meant to run everything, nothing may pass
//! without running.

/// Reports that the current test does not run here, and why; the caller
/// returns right after. Panics instead under `RXU_TESTS_NO_SKIP=1`.
pub fn skip(reason: &str) {
    let t = std::thread::current();
    let test = t.name().unwrap_or("?");
    if std::env::var_os("RXU_TESTS_NO_SKIP").is_some_and(|v| v == "1") {
        panic!("{test} cannot run here ({reason}) and RXU_TESTS_NO_SKIP=1");
    }
    eprintln!("SKIPPED {test}: {reason}");
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Whether `tool` is on PATH.
pub fn have(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}
