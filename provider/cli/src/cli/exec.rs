//! `rxu exec -- CMD` and `rxu shell`: run a command where `/sys` shows
//! rxu's devices as a kernel's would be shown, for tools that read
//! `/sys/class/infiniband` directly instead of through libibverbs
//! (ibdev2netdev, the pyverbs suite's rdma_cm tests, device managers).
//!
//! The command gets a private mount namespace in which each class of
//! rxu's tree (`<SYSFS_PATH>/class/{infiniband,infiniband_verbs,misc}`)
//! is merged into `/sys/class/<class>`:
//!
//! - a class the kernel lacks (no RDMA in the kernel: no
//!   `/sys/class/infiniband`) cannot be made in sysfs, so `/sys/class`
//!   itself becomes a tmpfs holding each of its entries bound back in
//!   place (their relative symlinks still resolve) plus the new class;
//! - a class the kernel has (`misc`, or `infiniband` with real HCAs)
//!   becomes a tmpfs with the kernel's entries (the same symlinks, files
//!   and directories bound back) beside rxu's, so real devices stay
//!   visible. A name both have keeps the kernel's.
//!
//! The command then runs with rxu's provider and ucma emulator in its
//! environment and without `SYSFS_PATH`: libibverbs reads `/sys`, where
//! both kinds of device now are. Root gets the namespace directly; other
//! users get it inside a user namespace that maps them to themselves
//! (mounts made before the exec; the command runs with the user's own
//! ids and no capabilities), where the kernel allows unprivileged user
//! namespaces.

use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rxu_abi::paths;

use super::{env, CliError, Result};

/// Where the kernel's classes are.
const SYS_CLASS: &str = "/sys/class";

/// Replaces this process with `argv` in the merged view (returns only on
/// failure).
pub fn exec(argv: &[OsString]) -> Result<std::convert::Infallible> {
    let Some(prog) = argv.first() else {
        return Err(CliError::Usage(
            "rxu exec: nothing to run (rxu exec -- CMD [ARGS...])".into(),
        ));
    };
    let ours = paths::sysfs_root().join("class");
    if !ours.join("infiniband").is_dir() {
        return Err(CliError::Usage(format!(
            "rxu exec: no rxu device is up (no {}); `rxu up --netdev IFNAME` first",
            ours.join("infiniband").display()
        )));
    }
    let vars = env::vars();
    enter_namespace()?;
    merge_classes(&ours, Path::new(SYS_CLASS))?;
    std::env::remove_var("SYSFS_PATH");
    for (k, v) in vars {
        if k != "SYSFS_PATH" {
            std::env::set_var(k, v);
        }
    }
    let err = exec_argv(prog, argv);
    Err(CliError::Io {
        what: format!("running {}", prog.to_string_lossy()),
        source: err,
    })
}

/// The shell `rxu shell` runs: $SHELL, else /bin/sh.
pub fn shell_argv() -> Vec<OsString> {
    let sh = std::env::var_os("SHELL")
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "/bin/sh".into());
    vec![sh]
}

/// A private mount namespace, through a user namespace for non-root.
fn enter_namespace() -> Result<()> {
    if super::is_root() {
        // SAFETY: unshare has no memory preconditions; the tool is
        // single-threaded here (CLONE_NEWNS needs an unshared fs struct).
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            return Err(CliError::io("unshare(CLONE_NEWNS)")(
                std::io::Error::last_os_error(),
            ));
        }
    } else {
        // SAFETY: as above.
        let uid = unsafe { libc::getuid() };
        // SAFETY: as above.
        let gid = unsafe { libc::getgid() };
        // SAFETY: as above; CLONE_NEWUSER needs a single-threaded caller.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(CliError::Usage(format!(
                "rxu exec: cannot make a user namespace ({e}); this kernel or its \
                 security policy forbids unprivileged user namespaces \
                 (kernel.unprivileged_userns_clone, AppArmor's \
                 restrict_unprivileged_userns): run it as root"
            )));
        }
        // Map the user to itself: the command keeps its ids.
        let w = |p: &str, s: String| fs::write(p, s).map_err(CliError::io(format!("writing {p}")));
        w("/proc/self/setgroups", "deny".into())?;
        w("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        w("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    // Nothing mounted here reaches the rest of the system.
    mount(None, Path::new("/"), None, libc::MS_REC | libc::MS_PRIVATE)
}

/// Merges each class directory of `ours` into `sys` (see the module doc).
fn merge_classes(ours: &Path, sys: &Path) -> Result<()> {
    let classes = names(ours)?;
    if classes.iter().any(|c| !sys.join(c).exists()) {
        // sysfs takes no new directories: rebuild /sys/class on a tmpfs.
        overlay_dir(sys, &[])?;
    }
    for class in &classes {
        let target = sys.join(class);
        let src = ours.join(class);
        if target.exists() {
            let kernel = names(&target)?;
            let extra: Vec<_> = names(&src)?
                .into_iter()
                .filter(|n| !kernel.contains(n))
                .map(|n| (n.clone(), src.join(&n)))
                .collect();
            overlay_dir(&target, &extra)?;
        } else {
            fs::create_dir(&target)
                .map_err(CliError::io(format!("creating {}", target.display())))?;
            bind(&src, &target)?;
        }
    }
    Ok(())
}

/// Covers `dir` with a tmpfs that holds what `dir` held (symlinks copied,
/// files and directories bound back) plus `extra` (name, source) bound in.
fn overlay_dir(dir: &Path, extra: &[(OsString, PathBuf)]) -> Result<()> {
    let entries = names(dir)?;
    // The old contents stay reachable through this fd once covered.
    let old: OwnedFd = fs::File::open(dir)
        .map_err(CliError::io(format!("opening {}", dir.display())))?
        .into();
    let old_path = PathBuf::from(format!("/proc/self/fd/{}", old.as_raw_fd()));
    let mut items: Vec<(OsString, PathBuf)> = entries
        .into_iter()
        .map(|n| (n.clone(), old_path.join(&n)))
        .collect();
    items.extend(extra.iter().cloned());
    mount(Some(Path::new("tmpfs")), dir, Some("tmpfs"), 0)?;
    for (name, src) in items {
        let at = dir.join(&name);
        let meta = fs::symlink_metadata(&src)
            .map_err(CliError::io(format!("reading {}", src.display())))?;
        let made = if meta.file_type().is_symlink() {
            let to =
                fs::read_link(&src).map_err(CliError::io(format!("reading {}", src.display())))?;
            std::os::unix::fs::symlink(&to, &at)
        } else if meta.is_dir() {
            fs::create_dir(&at)
        } else {
            fs::File::create(&at).map(drop)
        };
        made.map_err(CliError::io(format!("creating {}", at.display())))?;
        if !meta.file_type().is_symlink() {
            bind(&src, &at)?;
        }
    }
    drop(old);
    Ok(())
}

/// The entry names of a directory, sorted.
fn names(dir: &Path) -> Result<Vec<OsString>> {
    let mut v: Vec<OsString> = fs::read_dir(dir)
        .map_err(CliError::io(format!("listing {}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    v.sort();
    Ok(v)
}

fn bind(src: &Path, at: &Path) -> Result<()> {
    mount(Some(src), at, None, libc::MS_BIND | libc::MS_REC)
}

/// mount(2); a tmpfs gets mode 755 as sysfs directories have.
fn mount(
    src: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
) -> Result<()> {
    let c = |s: &OsStr| {
        CString::new(s.as_bytes()).map_err(|_| CliError::Usage(format!("{s:?}: NUL in path")))
    };
    let src_c = src.map(|s| c(s.as_os_str())).transpose()?;
    let target_c = c(target.as_os_str())?;
    let fs_c = fstype.map(|s| c(OsStr::new(s))).transpose()?;
    let data = if fstype == Some("tmpfs") {
        Some(c(OsStr::new("mode=755"))?)
    } else {
        None
    };
    let ptr = |o: &Option<CString>| o.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is a NUL-terminated string that outlives the
    // call, or null where mount(2) allows it.
    let rc = unsafe {
        libc::mount(
            ptr(&src_c),
            target_c.as_ptr(),
            ptr(&fs_c),
            flags,
            ptr(&data).cast(),
        )
    };
    if rc != 0 {
        return Err(CliError::Io {
            what: format!(
                "mounting {} on {}",
                src.map_or("-".into(), |s| s.display().to_string()),
                target.display()
            ),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

fn exec_argv(prog: &OsStr, argv: &[OsString]) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(prog).args(&argv[1..]).exec()
}
