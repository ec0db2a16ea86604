//! The binaries tests run: `rxud`, `rxu` and the provider library
//! (`librxu.so`), built with the profile of the running test.
//!
//! Cargo passes `CARGO_BIN_EXE_<name>` only to the integration tests of the
//! package that owns the binary, and `cargo test -p X` builds no other
//! package's binaries. So the first call runs one `cargo build` for all of
//! them (always the same command: whichever test runs second finds nothing
//! to do; cargo does not hold its build lock while tests run). A failed
//! build fails the test with cargo's output; a test never skips because a
//! binary is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// target/<profile> of this test executable (target/<profile>/deps/x).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable in target/<profile>/deps")
        .to_owned()
}

/// target/<profile>, with rxu, rxud and the provider built and up to date.
/// Panics with cargo's output when the build fails.
pub fn built() -> &'static Path {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let r = DIR.get_or_init(|| {
        let dir = profile_dir();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
            "build", "-q", "-p", "rxud", "-p", "rxu-cli", "-p", "ffi", "-p", "rxu-ucma", "--bins",
            "--lib",
        ]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let out = cmd.output().map_err(|e| format!("running cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo build of rxud, rxu and the provider failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        for f in ["rxu", "rxud", "librxu.so", "librxu_ucma.so"] {
            if !dir.join(f).is_file() {
                return Err(format!("{} missing after the build", dir.join(f).display()));
            }
        }
        Ok(dir)
    });
    match r {
        Ok(d) => d,
        Err(e) => panic!("{e}"),
    }
}

/// The `rxud` daemon.
pub fn rxud() -> PathBuf {
    built().join("rxud")
}

/// The `rxu` tool (`rxu up` starts the `rxud` beside it).
pub fn rxu() -> PathBuf {
    built().join("rxu")
}

/// The provider library, as cargo names it (`librxu.so`); libibverbs
/// loads it as `librxu-rdmav<N>.so` (see [`install_provider`]).
pub fn provider_lib() -> PathBuf {
    built().join("librxu.so")
}

/// The private provider ABIs the one provider file serves
/// (`ffi/provider-abis`; docs/provider-abi.md).
pub fn provider_abis() -> Vec<u32> {
    include_str!("../../../ffi/provider-abis")
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect()
}

/// A private copy of the provider in `dir` under every name libibverbs
/// looks for with `RDMAV_DRIVERS=<dir>/librxu`: `librxu-rdmav34.so`, and
/// symlinks to it for the other ABIs. A copy, so that a rebuild does not
/// swap the file under a running program.
pub fn install_provider(dir: &Path) -> std::io::Result<()> {
    std::fs::copy(provider_lib(), dir.join("librxu-rdmav34.so"))?;
    for n in provider_abis().into_iter().filter(|&n| n != 34) {
        let link = dir.join(format!("librxu-rdmav{n}.so"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("librxu-rdmav34.so", link)?;
    }
    Ok(())
}

/// The ucma emulator (`librxu_ucma.so`) an rdma_cm program preloads.
pub fn ucma_lib() -> PathBuf {
    built().join("librxu_ucma.so")
}
