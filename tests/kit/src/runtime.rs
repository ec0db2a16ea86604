//! Runtime directories: where daemons put their sockets, pid files and
//! device trees. The client library finds a daemon through
//! `RXU_RUNTIME_DIR`, which is process-wide: every daemon a test process
//! talks to through the client library lives in [`runtime_dir`].

use std::path::PathBuf;
use std::sync::OnceLock;

/// A fresh, empty directory `rxu-<tag>-<pid>` under the system temp dir
/// (short paths: socket paths are limited to 108 bytes and libibverbs
/// builds sysfs paths in 256-byte buffers).
pub fn scratch_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rxu-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("creating {}: {e}", d.display()));
    d
}

/// This test process's runtime directory, made once and exported as
/// `RXU_RUNTIME_DIR` before any daemon starts or client connects. It lives
/// in target/tmp (cargo's `CARGO_TARGET_TMPDIR`), where what a failed test
/// leaves (daemon logs) stays next to the build, not in the system temp
/// dir.
pub fn runtime_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target = crate::bins::profile_dir()
            .parent()
            .expect("target/<profile> has a parent")
            .join("tmp");
        let d = target.join(format!("rxu-rt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("creating {}: {e}", d.display()));
        std::env::set_var("RXU_RUNTIME_DIR", &d);
        d
    })
}
