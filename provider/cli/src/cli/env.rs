//! The shell lines a verbs program's environment needs to see rxu devices
//! (printed by `rxu up` and `rxu env`, for `eval "$(rxu up ...)"`):
//!
//! - `SYSFS_PATH`: the device tree (libibverbs reads sysfs from there);
//! - `RXU_RUNTIME_DIR`: where the daemons' sockets are, when the client
//!   would not find it by default (see [`needs_runtime_dir`]);
//! - `RDMAV_DRIVERS`: the provider library, when it is not installed in
//!   /etc/libibverbs.d (libibverbs dlopens `<value>-rdmav<N>.so`, N its
//!   private provider ABI; scripts/build-provider makes every name);
//! - `LD_PRELOAD`: the ucma emulator `librxu-ucma.so` (rdma_cm programs
//!   run with the system's librdmacm on it), after any preloads already
//!   set (librspreload's wrappers must come first).

use std::path::{Path, PathBuf};

use rxu_abi::paths;

/// The provider library under its first name (private ABI 34); the names
/// for the other ABIs are symlinks beside it (docs/provider-abi.md).
pub const PROVIDER_FILE: &str = "librxu-rdmav34.so";
/// The in-process ucma emulator, built beside the provider.
pub const UCMA_FILE: &str = "librxu-ucma.so";
/// Installed providers are listed here; ours then needs no RDMAV_DRIVERS.
pub const INSTALLED_DRIVER_FILE: &str = "/etc/libibverbs.d/rxu.driver";

/// `export NAME=value` lines, in a fixed order.
pub fn export_lines() -> Vec<String> {
    vars()
        .into_iter()
        .map(|(k, v)| format!("export {k}={}", shell_quote(&v)))
        .collect()
}

/// The variables and their values, in a fixed order.
pub fn vars() -> Vec<(&'static str, String)> {
    let mut vars = vec![(
        "SYSFS_PATH",
        paths::sysfs_root().to_string_lossy().into_owned(),
    )];
    if needs_runtime_dir() {
        vars.push((
            "RXU_RUNTIME_DIR",
            paths::runtime_dir().to_string_lossy().into_owned(),
        ));
    }
    if !Path::new(INSTALLED_DRIVER_FILE).exists() {
        if let Some(prefix) = provider_prefix() {
            vars.push(("RDMAV_DRIVERS", prefix.to_string_lossy().into_owned()));
        }
    }
    if let Some(ucma) = ucma_library() {
        let existing = std::env::var("LD_PRELOAD").ok();
        vars.push(("LD_PRELOAD", preload_value(existing.as_deref(), &ucma)));
    }
    vars
}

/// Whether clients must be told the runtime directory: when it was chosen
/// with RXU_RUNTIME_DIR, or when rxu runs under sudo (root's default,
/// /run/rxu, is not the default of the user whose shell evals the lines).
pub fn needs_runtime_dir() -> bool {
    let rt = paths::runtime_dir();
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    rt != default_runtime_dir() || (root && std::env::var_os("SUDO_UID").is_some())
}

/// What `paths::runtime_dir` picks without RXU_RUNTIME_DIR.
fn default_runtime_dir() -> PathBuf {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        return PathBuf::from("/run/rxu");
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR") {
        return PathBuf::from(d).join("rxu");
    }
    PathBuf::from(format!("/tmp/rxu-{uid}"))
}

/// `<dir>/librxu` for the first `<dir>/librxu-rdmav34.so` found next to
/// this executable or in a `target/{release,debug}` of one of its parent
/// directories (a source checkout).
pub fn provider_prefix() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let exe = exe.canonicalize().unwrap_or(exe);
    candidate_dirs(&exe)
        .into_iter()
        .find(|d| d.join(PROVIDER_FILE).is_file())
        .map(|d| d.join("librxu"))
}

/// The first `librxu-ucma.so` found where [`provider_prefix`] looks, or
/// where the Debian package installs it beside `/usr/bin/rxu`
/// (`/usr/lib/<multiarch>/rxu/`).
pub fn ucma_library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let exe = exe.canonicalize().unwrap_or(exe);
    candidate_dirs(&exe)
        .into_iter()
        .chain(installed_lib_dirs(&exe))
        .map(|d| d.join(UCMA_FILE))
        .find(|p| p.is_file())
}

/// `<prefix>/lib/<any>/rxu` for an executable in `<prefix>/bin`.
fn installed_lib_dirs(exe: &Path) -> Vec<PathBuf> {
    let Some(lib) = exe.parent().and_then(Path::parent).map(|p| p.join("lib")) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&lib) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("rxu"))
        .filter(|d| d.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// `LD_PRELOAD` with `ours` appended to the entries already there (space
/// or colon separated), once.
pub fn preload_value(existing: Option<&str>, ours: &Path) -> String {
    let ours = ours.to_string_lossy();
    let kept: Vec<&str> = existing
        .unwrap_or("")
        .split([' ', ':'])
        .filter(|e| !e.is_empty() && *e != ours)
        .collect();
    let mut v = kept.join(":");
    if !v.is_empty() {
        v.push(':');
    }
    v.push_str(&ours);
    v
}

fn candidate_dirs(exe: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let Some(bin_dir) = exe.parent() else {
        return dirs;
    };
    dirs.push(bin_dir.to_path_buf());
    for anc in bin_dir.ancestors() {
        for profile in ["release", "debug"] {
            let d = anc.join("target").join(profile);
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    dirs
}

/// Quotes for a POSIX shell when needed: plain paths stay readable.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:,@%=".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("/run/rxu/sysfs"), "/run/rxu/sysfs");
        assert_eq!(shell_quote("/a b"), "'/a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn ucma_preload_goes_last_once() {
        let ours = Path::new("/t/librxu-ucma.so");
        assert_eq!(preload_value(None, ours), "/t/librxu-ucma.so");
        assert_eq!(preload_value(Some(""), ours), "/t/librxu-ucma.so");
        assert_eq!(
            preload_value(Some("/r/librspreload.so"), ours),
            "/r/librspreload.so:/t/librxu-ucma.so"
        );
        assert_eq!(
            preload_value(Some("/t/librxu-ucma.so /a.so"), ours),
            "/a.so:/t/librxu-ucma.so"
        );
    }

    #[test]
    fn installed_ucma_dir_is_found_beside_bin() {
        let root = std::env::temp_dir().join(format!("rxu-env-test-{}", std::process::id()));
        let lib = root.join("lib/x86_64-linux-gnu/rxu");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::create_dir_all(root.join("lib/other")).unwrap();
        let dirs = installed_lib_dirs(&root.join("bin/rxu"));
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(dirs, vec![lib]);
        assert!(installed_lib_dirs(Path::new("/rxu")).is_empty());
    }

    #[test]
    fn provider_search_order() {
        let d = candidate_dirs(Path::new("/w/target/debug/deps/rxu"));
        assert_eq!(d[0], Path::new("/w/target/debug/deps"));
        assert!(d.contains(&PathBuf::from("/w/target/release")));
        assert!(d.contains(&PathBuf::from("/w/target/debug")));
        let rel = d.iter().position(|p| p == Path::new("/w/target/release"));
        let dbg = d.iter().position(|p| p == Path::new("/w/target/debug"));
        assert!(rel < dbg, "release before debug");
    }
}
