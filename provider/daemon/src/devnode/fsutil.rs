//! File-system steps for the tree: atomic file replacement, world-readable
//! modes whatever the umask, and whole-directory publication by rename.

use std::fs::{self, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A hidden sibling name, unique within this process. The leading dot keeps
/// it out of libibverbs' scan of `class/infiniband_verbs`.
pub fn hidden_sibling(path: &Path, tag: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{tag}.{}.{n}", std::process::id()))
}

/// Creates `dir` and missing parents, each readable by every user (clients
/// run as anyone; the tree is usually written by root).
pub fn create_dirs(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => fs::set_permissions(dir, Permissions::from_mode(0o755)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Writes `contents` plus a newline to a new file (libibverbs reads each
/// file with one read() and strips one trailing newline).
pub fn write_new(path: &Path, contents: &str) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    f.set_permissions(Permissions::from_mode(0o644))?;
    f.write_all(contents.as_bytes())?;
    f.write_all(b"\n")
}

/// Replaces `path` atomically: readers see the old or the new contents,
/// never a partial file. The temporary lives in the same directory, so only
/// that directory's mtime changes.
pub fn write_atomic(path: &Path, contents: &str) -> io::Result<()> {
    let tmp = hidden_sibling(path, "tmp");
    let result = write_new(&tmp, contents).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Like `write_atomic`, but leaves the file alone if it already holds
/// exactly this content (no needless directory mtime churn).
pub fn write_if_changed(path: &Path, contents: &str) -> io::Result<()> {
    match fs::read_to_string(path) {
        Ok(old) if old.strip_suffix('\n') == Some(contents) => Ok(()),
        _ => write_atomic(path, contents),
    }
}

/// Removes `path` if present.
pub fn remove_file_if_present(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes a directory tree in one visible step: rename it to a hidden
/// name, then delete. Absent is fine.
pub fn remove_tree(dir: &Path) -> io::Result<()> {
    let dead = hidden_sibling(dir, "dead");
    match fs::rename(dir, &dead) {
        Ok(()) => fs::remove_dir_all(&dead),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// A directory built under a hidden name and published with one rename, so
/// a concurrent reader sees nothing or everything. Removed if dropped
/// unpublished.
pub struct Staging {
    tmp: PathBuf,
    dest: PathBuf,
    published: bool,
}

impl Staging {
    pub fn new(dest: &Path) -> io::Result<Self> {
        let tmp = hidden_sibling(dest, "new");
        fs::create_dir(&tmp)?;
        fs::set_permissions(&tmp, Permissions::from_mode(0o755))?;
        Ok(Self {
            tmp,
            dest: dest.to_owned(),
            published: false,
        })
    }

    /// Writes `rel` (creating its directories) inside the staging tree.
    pub fn file(&self, rel: &Path, contents: &str) -> io::Result<()> {
        let path = self.tmp.join(rel);
        if let Some(parent) = path.parent() {
            create_dirs(parent)?;
        }
        write_new(&path, contents)
    }

    pub fn dir(&self, rel: &Path) -> io::Result<()> {
        create_dirs(&self.tmp.join(rel))
    }

    /// A symbolic link `rel` (creating its directories) to `target`.
    pub fn symlink(&self, rel: &Path, target: &Path) -> io::Result<()> {
        let path = self.tmp.join(rel);
        if let Some(parent) = path.parent() {
            create_dirs(parent)?;
        }
        std::os::unix::fs::symlink(target, path)
    }

    /// Moves the tree into place. Fails if `dest` exists (rename(2) would
    /// replace an empty directory, so check first; the window is harmless
    /// for a single `rxu up`).
    pub fn publish(mut self) -> io::Result<()> {
        if fs::symlink_metadata(&self.dest).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} already exists", self.dest.display()),
            ));
        }
        fs::rename(&self.tmp, &self.dest)?;
        self.published = true;
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.published {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}
