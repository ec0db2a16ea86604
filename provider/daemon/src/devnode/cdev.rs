//! `/dev/infiniband/uverbsN`: libibverbs stat()s it while listing devices and
//! opens it O_RDWR in ibv_open_device, handing the fd to the provider as
//! cmd_fd; the provider never issues kernel commands on it (docs/libibverbs-contract.md §1.3,
//! §2.1). Any character device works; /dev/null behaves as the contract
//! needs (ioctl -> ENOTTY).
//!
//! The `dev` file says the numbers of what opening the node gives — for
//! either kind /dev/null's — because libibverbs checks them at open and
//! `ibv_import_device` matches an fd's numbers against them (with `0:0`
//! the import finds no device: ENODEV). Every rxu device thus has the same
//! numbers; the provider tells them apart by asking the daemons.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// What to put at `/dev/infiniband/uverbsN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CdevKind {
    /// A symlink to /dev/null, with `dev` = /dev/null's numbers. The
    /// contract's recommendation: needs no CAP_MKNOD and works in
    /// containers whose device cgroup allows /dev/null.
    NullSymlink,
    /// A character device node made with mknod, with its `major:minor`
    /// written to `dev` so libibverbs checks the node it opened.
    CharDevice { major: u32, minor: u32 },
}

impl CdevKind {
    /// A character device with /dev/null's numbers (1:3 on Linux).
    pub fn null_char_device() -> io::Result<CdevKind> {
        let (major, minor) = null_numbers()?;
        Ok(CdevKind::CharDevice { major, minor })
    }

    /// Contents of `class/infiniband_verbs/uverbsN/dev`: the numbers of
    /// the device the node opens (`0:0`, no check at open and no import,
    /// only if /dev/null cannot be stat()ed).
    pub fn dev_file(self) -> String {
        let (major, minor) = match self {
            CdevKind::NullSymlink => null_numbers().unwrap_or((0, 0)),
            CdevKind::CharDevice { major, minor } => (major, minor),
        };
        format!("{major}:{minor}")
    }

    /// Whether what sits at `path` is a node of this kind (so a leftover from
    /// an earlier run, or another tree's identical node, can be reused).
    fn matches(self, path: &Path) -> io::Result<bool> {
        let meta = fs::symlink_metadata(path)?;
        Ok(match self {
            CdevKind::NullSymlink => {
                meta.file_type().is_symlink() && fs::read_link(path)? == Path::new("/dev/null")
            }
            CdevKind::CharDevice { major, minor } => {
                meta.file_type().is_char_device() && meta.rdev() == libc::makedev(major, minor)
            }
        })
    }
}

/// Creates the node at `path` (its directory must exist). An identical node
/// already there is accepted; anything else there is an error.
pub fn create(path: &Path, kind: CdevKind) -> io::Result<()> {
    let made = match kind {
        CdevKind::NullSymlink => std::os::unix::fs::symlink("/dev/null", path),
        CdevKind::CharDevice { major, minor } => mknod(path, major, minor),
    };
    match made {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if kind.matches(path)? {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a {kind:?} node", path.display()),
                ))
            }
        }
        Err(e) => Err(e),
    }
}

fn mknod(path: &Path, major: u32, minor: u32) -> io::Result<()> {
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    let dev = libc::makedev(major, minor);
    // SAFETY: `cpath` is a valid NUL-terminated path for the duration of the
    // call; mode and dev are plain integers.
    if unsafe { libc::mknod(cpath.as_ptr(), libc::S_IFCHR | 0o666, dev) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // Clients of any user open it O_RDWR, whatever our umask was.
    fs::set_permissions(path, fs::Permissions::from_mode(0o666))
}

/// Removes the node if it is the `kind` of node we make; leaves anything
/// else (a real uverbs device, a file) alone and says so.
pub fn remove(path: &Path, kind: CdevKind) -> io::Result<()> {
    match kind.matches(path) {
        Ok(true) => fs::remove_file(path),
        Ok(false) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not the {kind:?} node rxu made", path.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// /dev/null's device numbers.
fn null_numbers() -> io::Result<(u32, u32)> {
    let rdev = fs::metadata("/dev/null")?.rdev();
    Ok((libc::major(rdev), libc::minor(rdev)))
}

/// The kind of the node at `node` whose `uverbsN/dev` says `dev`: the
/// numbers alone do not tell a symlink to /dev/null from a node made
/// with its numbers, the node does (`0:0`: a tree of an older rxu).
pub fn parse_dev_file(dev: &str, node: &Path) -> Option<CdevKind> {
    let (major, minor) = dev.trim_end().split_once(':')?;
    let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
    let symlink = CdevKind::NullSymlink.matches(node).unwrap_or(false);
    let null = null_numbers().ok();
    Some(
        if (major, minor) == (0, 0) || (symlink && null == Some((major, minor))) {
            CdevKind::NullSymlink
        } else {
            CdevKind::CharDevice { major, minor }
        },
    )
}
