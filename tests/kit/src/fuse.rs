//! A FUSE file system that never answers: the attacker's tool of issue 19
//! finding 2. One file, `stuck`, that can be looked up, opened and mapped,
//! but whose READ (and FLUSH, sent by every close) requests are kept
//! forever. Memory mapped from it blocks whoever touches it; a close of
//! one of its fds blocks the closer.
//!
//! Mounted with mount(2) on /dev/fuse (root: the tests run as root), the
//! server a thread of the test that speaks just enough of the FUSE
//! protocol (`linux/fuse.h`). Dropping it aborts the connection (every
//! waiter gets an error) and unmounts.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

const LOOKUP: u32 = 1;
const FORGET: u32 = 2;
const GETATTR: u32 = 3;
const OPEN: u32 = 14;
const READ: u32 = 15;
const RELEASE: u32 = 18;
const FLUSH: u32 = 25;
const INIT: u32 = 26;
const INTERRUPT: u32 = 36;
const DESTROY: u32 = 38;
const BATCH_FORGET: u32 = 42;

const ROOT: u64 = 1;
const FILE: u64 = 2;
/// The file's name and size.
pub const NAME: &str = "stuck";
pub const SIZE: u64 = 1 << 20;

/// A mounted never-answering file system.
pub struct StuckFuse {
    pub dir: PathBuf,
    /// READ requests the kernel sent (kept, unanswered).
    pub reads: Arc<AtomicU32>,
    /// FLUSH requests (kept, unanswered).
    pub flushes: Arc<AtomicU32>,
    /// The kernel ended the connection (the server's read failed).
    ended: Arc<std::sync::atomic::AtomicBool>,
    conn: u64,
    thread: Option<JoinHandle<()>>,
    /// Files of it held open: closing one sends a FLUSH that is never
    /// answered, so they are closed after the abort.
    open: std::sync::Mutex<Vec<File>>,
}

impl StuckFuse {
    /// Mounts it on `dir` (made if missing), owned by uid 0. Errors when
    /// the kernel has no FUSE (no /dev/fuse).
    pub fn mount(dir: &Path) -> std::io::Result<StuckFuse> {
        std::fs::create_dir_all(dir)?;
        control_fs()?;
        let dev = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")?;
        let opts = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
            dev.as_raw_fd()
        );
        let c = |s: &str| std::ffi::CString::new(s).expect("no NUL");
        let (src, target, fstype, data) = (
            c("rxu-stuck"),
            c(dir.to_str().expect("utf-8 path")),
            c("fuse.rxu-stuck"),
            c(&opts),
        );
        // SAFETY: every pointer is a valid NUL-terminated string that
        // outlives the call; mount only reads them.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let reads = Arc::new(AtomicU32::new(0));
        let flushes = Arc::new(AtomicU32::new(0));
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (r2, f2, e2) = (Arc::clone(&reads), Arc::clone(&flushes), Arc::clone(&ended));
        let thread = std::thread::Builder::new()
            .name("stuck-fuse".into())
            .spawn(move || {
                serve(dev, &r2, &f2);
                e2.store(true, Ordering::Release);
            })?;
        let mut me = StuckFuse {
            dir: dir.to_owned(),
            reads,
            flushes,
            ended,
            conn: 0,
            thread: Some(thread),
            open: std::sync::Mutex::new(Vec::new()),
        };
        // The root's stat is answered by the server (GETATTR).
        let st = std::fs::metadata(dir)?;
        let (major, minor) = (libc::major(st.dev()), libc::minor(st.dev()));
        me.conn = (u64::from(major) << 20) | u64::from(minor);
        Ok(me)
    }

    /// Opens the stuck file read-write; the fd stays open until the file
    /// system is dropped (a close would block on FLUSH).
    pub fn open(&self) -> std::io::Result<std::os::fd::RawFd> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.file())?;
        let fd = f.as_raw_fd();
        self.open.lock().unwrap_or_else(|p| p.into_inner()).push(f);
        Ok(fd)
    }

    /// Maps `len` bytes of the stuck file shared, at `at` (MAP_FIXED) if
    /// given; returns the address. Touching it blocks (READ).
    pub fn map(&self, at: Option<*mut u8>, len: usize) -> std::io::Result<*mut u8> {
        let fd = self.open()?;
        let flags = libc::MAP_SHARED | at.map_or(0, |_| libc::MAP_FIXED);
        // SAFETY: maps a file open in this process; `at`, if given, is a
        // range the caller owns and gives up to this mapping.
        let p = unsafe {
            libc::mmap(
                at.map_or(std::ptr::null_mut(), |p| p.cast()),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(p.cast())
    }

    pub fn file(&self) -> PathBuf {
        self.dir.join(NAME)
    }

    /// Its connection's number under /sys/fs/fuse/connections.
    pub fn conn(&self) -> u64 {
        self.conn
    }

    /// Whether the connection was aborted (by rxud's watchdog).
    pub fn aborted(&self) -> bool {
        // The server's read of /dev/fuse fails once the connection ends.
        self.ended.load(Ordering::Acquire)
    }
}

impl Drop for StuckFuse {
    fn drop(&mut self) {
        // Ends every wait (ours included), then unmounts.
        let abort = format!("/sys/fs/fuse/connections/{}/abort", self.conn);
        let _ = std::fs::write(abort, b"1");
        self.open.lock().unwrap_or_else(|p| p.into_inner()).clear();
        if let Ok(p) = std::ffi::CString::new(self.dir.to_str().unwrap_or("")) {
            // SAFETY: p is a valid NUL-terminated path for the call.
            unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) };
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The FUSE control file system, mounted if it is not (its `abort` is
/// how the test, and rxud, end a wait on this server).
fn control_fs() -> std::io::Result<()> {
    const AT: &str = "/sys/fs/fuse/connections";
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")?
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(AT));
    if mounted {
        return Ok(());
    }
    // SAFETY: constant NUL-terminated strings; mount only reads them.
    let r = unsafe {
        libc::mount(
            c"fusectl".as_ptr(),
            c"/sys/fs/fuse/connections".as_ptr(),
            c"fusectl".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// struct fuse_attr (88 bytes) of node `ino`.
fn attr(ino: u64) -> Vec<u8> {
    let (size, mode, nlink) = if ino == ROOT {
        (0u64, 0o040755u32, 2u32)
    } else {
        (SIZE, 0o100666, 1)
    };
    let mut a = Vec::with_capacity(88);
    for v in [ino, size, size.div_ceil(512), 0, 0, 0] {
        a.extend_from_slice(&v.to_ne_bytes());
    }
    for v in [0u32, 0, 0, mode, nlink, 0, 0, 0, 4096, 0] {
        a.extend_from_slice(&v.to_ne_bytes());
    }
    a
}

/// Serves until the connection goes (abort or unmount).
fn serve(dev: File, reads: &AtomicU32, flushes: &AtomicU32) {
    let mut dev = dev;
    let mut buf = vec![0u8; 1 << 20 | 4096];
    // Requests kept unanswered, so the kernel keeps waiting.
    let mut kept = Vec::new();
    loop {
        let n = match dev.read(&mut buf) {
            Ok(n) if n >= 40 => n,
            Ok(_) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(_) => return,
        };
        let req = &buf[..n];
        let (opcode, unique, node) = (u32_at(req, 4), u64_at(req, 8), u64_at(req, 16));
        let body = &req[40..];
        let reply: Option<Result<Vec<u8>, i32>> = match opcode {
            INIT => {
                let mut o = Vec::with_capacity(64);
                for v in [7u32, 31, 128 * 1024, 0] {
                    o.extend_from_slice(&v.to_ne_bytes());
                }
                o.extend_from_slice(&16u16.to_ne_bytes());
                o.extend_from_slice(&12u16.to_ne_bytes());
                o.extend_from_slice(&(128u32 * 1024).to_ne_bytes());
                o.extend_from_slice(&1u32.to_ne_bytes());
                o.resize(64, 0);
                Some(Ok(o))
            }
            LOOKUP => {
                let name = body.split(|&b| b == 0).next().unwrap_or(&[]);
                if node == ROOT && name == NAME.as_bytes() {
                    let mut o = Vec::with_capacity(128);
                    // nodeid, generation, entry and attr validity: an hour.
                    for v in [FILE, 1, 3600, 3600] {
                        o.extend_from_slice(&v.to_ne_bytes());
                    }
                    o.extend_from_slice(&[0u8; 8]);
                    o.extend_from_slice(&attr(FILE));
                    Some(Ok(o))
                } else {
                    Some(Err(libc::ENOENT))
                }
            }
            GETATTR => {
                let mut o = Vec::with_capacity(104);
                o.extend_from_slice(&3600u64.to_ne_bytes());
                o.extend_from_slice(&[0u8; 8]);
                o.extend_from_slice(&attr(node));
                Some(Ok(o))
            }
            OPEN => Some(Ok(vec![0u8; 16])),
            READ => {
                reads.fetch_add(1, Ordering::Relaxed);
                kept.push(unique);
                None
            }
            FLUSH => {
                flushes.fetch_add(1, Ordering::Relaxed);
                kept.push(unique);
                None
            }
            RELEASE => Some(Ok(Vec::new())),
            FORGET | BATCH_FORGET | INTERRUPT => None,
            DESTROY => return,
            _ => Some(Err(libc::ENOSYS)),
        };
        let Some(reply) = reply else { continue };
        let (error, body) = match reply {
            Ok(b) => (0i32, b),
            Err(e) => (-e, Vec::new()),
        };
        let mut out = Vec::with_capacity(16 + body.len());
        out.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        out.extend_from_slice(&error.to_ne_bytes());
        out.extend_from_slice(&unique.to_ne_bytes());
        out.extend_from_slice(&body);
        if dev.write_all(&out).is_err() {
            // ENOENT: the request was interrupted; anything else: gone.
            continue;
        }
    }
}
