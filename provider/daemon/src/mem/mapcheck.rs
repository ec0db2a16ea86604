//! Is `[addr, addr + len)` really mapped in the client?
//!
//! Two ways, both through the client's own `/proc/<pid>/mem` descriptor:
//!
//! 1. `/proc/<pid>/maps` of the process the descriptor belongs to: the
//!    range must be covered by adjacent mappings, all readable, and all
//!    writable when the access flags write (as `ibv_reg_mr` pins pages for
//!    write). Cost grows with the number of mappings, not with `len`, and
//!    it catches read-only memory registered for write — which pwrite on
//!    `/proc/pid/mem` (FOLL_FORCE) would otherwise silently copy-on-write.
//!    The pid comes from the descriptor's own link (`/proc/<pid>/mem`), not
//!    from the client's word, and is accepted only if `/proc/<pid>/mem` is
//!    the very inode the descriptor holds (checked before and after
//!    reading, so a pid reused in between is caught).
//! 2. Where that link cannot be tied to the descriptor (another procfs
//!    mount or pid namespace, maps unreadable or unparsable): read one byte
//!    of every page through the descriptor. Exact for "mapped", blind to
//!    write permission, one pread per page.
//!
//! Either way the first and last byte are read through the descriptor, so
//! a registration never succeeds on a descriptor that cannot reach the
//! range. The check is advisory for safety: every later access goes
//! through the descriptor and fails cleanly if the mapping went away.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// How to find a client's mappings.
#[derive(Debug, Default)]
pub(crate) struct MapSource {
    /// `/proc/<pid>` (or `/proc/<pid>/task/<tid>`) of the descriptor.
    dir: Option<PathBuf>,
}

impl MapSource {
    /// Works out where `mem`'s mappings can be read, if anywhere.
    pub(crate) fn for_mem(mem: &File) -> MapSource {
        let dir = std::fs::read_link(format!("/proc/self/fd/{}", mem.as_raw_fd()))
            .ok()
            .and_then(|link| proc_dir_of_link(&link))
            .filter(|dir| same_inode(mem, dir));
        MapSource { dir }
    }

    /// Whether the maps file was found (else pages are probed).
    #[cfg(test)]
    pub(crate) fn has_maps(&self) -> bool {
        self.dir.is_some()
    }

    /// The text of the maps file, if it certainly belongs to `mem`.
    fn maps(&self, mem: &File) -> Option<String> {
        let dir = self.dir.as_ref()?;
        // Watched like any access: the read takes the client's mmap lock.
        let (text, late) = super::watch::memory(mem.as_raw_fd(), 0, || {
            std::fs::read_to_string(dir.join("maps"))
        });
        if late {
            return None;
        }
        same_inode(mem, dir).then_some(text.ok()?)
    }
}

/// `/proc/123/mem` -> `/proc/123`; anything else -> None.
fn proc_dir_of_link(link: &Path) -> Option<PathBuf> {
    let s = link.to_str()?;
    let dir = s.strip_suffix("/mem")?;
    let rest = dir.strip_prefix("/proc/")?;
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let ok = match rest.split_once("/task/") {
        Some((pid, tid)) => digits(pid) && digits(tid),
        None => digits(rest),
    };
    ok.then(|| PathBuf::from(dir))
}

fn same_inode(mem: &File, dir: &Path) -> bool {
    match (mem.metadata(), std::fs::metadata(dir.join("mem"))) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Why a range is not registrable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapError {
    /// Some byte is not mapped (or not reachable through the descriptor).
    Unmapped,
    /// Mapped, but without the permission the access flags need.
    Permission,
}

/// Checks `[addr, addr + len)` (len > 0, no wrap) is mapped in the client,
/// and writable if `writable`.
pub(crate) fn check_mapped(
    mem: &File,
    src: &MapSource,
    addr: u64,
    len: u64,
    writable: bool,
) -> Result<(), MapError> {
    let last = addr.checked_add(len - 1).ok_or(MapError::Unmapped)?;
    probe(mem, addr)?;
    probe(mem, last)?;
    match src
        .maps(mem)
        .and_then(|t| covered(&t, addr, last, writable))
    {
        Some(r) => r,
        None => probe_pages(mem, addr, last),
    }
}

/// Reads the byte at `at` through the descriptor.
fn probe(mem: &File, at: u64) -> Result<(), MapError> {
    let mut b = [0u8; 1];
    match super::watch::memory(mem.as_raw_fd(), at, || mem.read_at(&mut b, at)) {
        (Ok(1), false) => Ok(()),
        _ => Err(MapError::Unmapped),
    }
}

/// Pages [`probe_pages`] reads at most for one registration: one pread
/// each, on the loop thread that serves every client. Past that the
/// check stops (it is advisory: the first and last byte were read, and
/// every later access fails cleanly on a hole).
const MAX_PROBES: u32 = 1024;

/// One byte of every page of `[addr, last]` (at most [`MAX_PROBES`]).
fn probe_pages(mem: &File, addr: u64, last: u64) -> Result<(), MapError> {
    let page = page_size();
    let mut at = addr - addr % page;
    for _ in 0..MAX_PROBES {
        if at > last {
            break;
        }
        probe(mem, at.max(addr))?;
        match at.checked_add(page) {
            Some(n) => at = n,
            None => break,
        }
    }
    Ok(())
}

fn page_size() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// Whether maps text covers `[addr, last]` with adjacent mappings that are
/// readable (and writable if `writable`). `None` if a line does not parse.
pub(crate) fn covered(
    maps: &str,
    addr: u64,
    last: u64,
    writable: bool,
) -> Option<Result<(), MapError>> {
    // `cur` is the first byte not yet known to be covered.
    let mut cur = addr;
    for line in maps.lines() {
        let (start, end, r, w) = parse_line(line)?;
        if end <= cur {
            continue;
        }
        if start > cur {
            return Some(Err(MapError::Unmapped));
        }
        if !r || (writable && !w) {
            return Some(Err(MapError::Permission));
        }
        if end > last {
            return Some(Ok(()));
        }
        cur = end;
    }
    Some(Err(MapError::Unmapped))
}

/// `start-end perms ...` -> (start, end, readable, writable).
fn parse_line(line: &str) -> Option<(u64, u64, bool, bool)> {
    let mut f = line.split_ascii_whitespace();
    let (s, e) = f.next()?.split_once('-')?;
    let perms = f.next()?.as_bytes();
    let start = u64::from_str_radix(s, 16).ok()?;
    let end = u64::from_str_radix(e, 16).ok()?;
    if end < start || perms.len() < 2 {
        return None;
    }
    Some((start, end, perms[0] == b'r', perms[1] == b'w'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/dbus-daemon
00651000-00652000 r--p 00051000 08:02 173521      /usr/bin/dbus-daemon
00652000-00655000 rw-p 00052000 08:02 173521      /usr/bin/dbus-daemon
00e03000-00e24000 rw-p 00000000 00:00 0           [heap]
7f0000000000-7f0000001000 ---p 00000000 00:00 0
7f0000001000-7f0000002000 rw-p 00000000 00:00 0
";

    #[test]
    fn coverage() {
        use MapError::*;
        // Inside one mapping, across adjacent ones, exactly to the end.
        assert_eq!(covered(MAPS, 0x400000, 0x400fff, false), Some(Ok(())));
        assert_eq!(covered(MAPS, 0x651000, 0x654fff, false), Some(Ok(())));
        assert_eq!(covered(MAPS, 0x652000, 0x654fff, true), Some(Ok(())));
        assert_eq!(
            covered(MAPS, 0x651000, 0x654fff, true),
            Some(Err(Permission))
        );
        // Gaps, past the end, in front of everything, PROT_NONE.
        assert_eq!(
            covered(MAPS, 0x451000, 0x651fff, false),
            Some(Err(Unmapped))
        );
        assert_eq!(
            covered(MAPS, 0x654000, 0xe03000, false),
            Some(Err(Unmapped))
        );
        assert_eq!(
            covered(MAPS, 0xe23000, 0xe24000, false),
            Some(Err(Unmapped))
        );
        assert_eq!(covered(MAPS, 0x1000, 0x1000, false), Some(Err(Unmapped)));
        let none = 0x7f00_0000_0000;
        assert_eq!(covered(MAPS, none, none, false), Some(Err(Permission)));
        assert_eq!(
            covered(MAPS, none + 0x1000, none + 0x1fff, true),
            Some(Ok(()))
        );
        assert_eq!(
            covered(MAPS, none + 0x2000, none + 0x2000, false),
            Some(Err(Unmapped))
        );
        assert_eq!(covered("garbage\n", 1, 2, false), None);
        assert_eq!(covered("", 1, 2, false), Some(Err(Unmapped)));
    }

    #[test]
    fn proc_links() {
        let p = |s: &str| proc_dir_of_link(Path::new(s));
        assert_eq!(p("/proc/123/mem"), Some(PathBuf::from("/proc/123")));
        assert_eq!(
            p("/proc/1/task/7/mem"),
            Some(PathBuf::from("/proc/1/task/7"))
        );
        assert_eq!(p("/proc/self/mem"), None);
        assert_eq!(p("/proc/12/maps"), None);
        assert_eq!(p("/proc//mem"), None);
        // A path string only (nothing is opened): a "proc" that is not at
        // the root is refused.
        assert_eq!(p("proc/1/mem"), None);
        assert_eq!(p("/proc/1/../2/mem"), None);
    }

    #[test]
    fn own_mem_is_tied_to_its_maps() {
        let mem = File::options()
            .read(true)
            .write(true)
            .open("/proc/self/mem")
            .unwrap();
        let src = MapSource::for_mem(&mem);
        assert!(src.maps(&mem).is_some(), "{src:?}");
        // Another process's mem is never taken for ours.
        let other = MapSource {
            dir: Some(PathBuf::from("/proc/1")),
        };
        assert!(other.maps(&mem).is_none());
    }
}
