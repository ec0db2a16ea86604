//! Every syscall that may wait on a client — a read or write of its
//! memory, the close of a file it passed — runs inside a watched slot, so
//! a watchdog thread (`daemon/watchdog.rs`) sees one that does not come
//! back. Memory backed by a FUSE file whose server never answers blocks
//! the syscall in the kernel; nothing in rxud's one loop thread can
//! interrupt it, but the watchdog can end the wait from outside (by
//! aborting that FUSE connection) and the loop then fails the client.
//!
//! Cost on the data path: two relaxed atomic stores and a thread-local
//! lookup per syscall; no clock is read (the watchdog times the slot by
//! its sequence number staying the same across its ticks).

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// `addr` of a slot whose syscall is a close, not a memory access.
pub const CLOSING: u64 = u64::MAX;
/// `conn` when the FUSE connection is not known in advance.
pub const NO_CONN: u64 = u64::MAX;

/// One thread's watched syscall.
#[derive(Debug)]
pub struct Slot {
    /// The thread the slot is installed on (its tid), 0 before.
    tid: AtomicI32,
    /// Bumped when a syscall starts.
    seq: AtomicU64,
    busy: AtomicBool,
    /// The fd the syscall is on (the client's /proc/<pid>/mem, or the fd
    /// being closed).
    fd: AtomicI32,
    /// The client address it touches, or [`CLOSING`].
    addr: AtomicU64,
    /// For a close: the file's FUSE connection and its sender's uid.
    conn: AtomicU64,
    uid: AtomicU32,
    /// Set by the watchdog when the current syscall passed its deadline.
    overdue: AtomicBool,
    /// Memory fds whose access passed its deadline: the loop fails their
    /// clients ([`Slot::take_failed`]).
    failed: Mutex<Vec<i32>>,
    has_failed: AtomicBool,
}

/// What the watchdog reads of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Busy {
    pub seq: u64,
    pub fd: i32,
    pub addr: u64,
    pub conn: u64,
    pub uid: u32,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            tid: AtomicI32::new(0),
            seq: AtomicU64::new(0),
            busy: AtomicBool::new(false),
            fd: AtomicI32::new(-1),
            addr: AtomicU64::new(0),
            conn: AtomicU64::new(NO_CONN),
            uid: AtomicU32::new(0),
            overdue: AtomicBool::new(false),
            failed: Mutex::new(Vec::new()),
            has_failed: AtomicBool::new(false),
        }
    }
}

impl Slot {
    /// The tid of the thread whose syscalls this slot watches (0: none).
    pub fn tid(&self) -> i32 {
        self.tid.load(Ordering::Relaxed)
    }

    /// The syscall in progress, if any.
    pub fn busy(&self) -> Option<Busy> {
        if !self.busy.load(Ordering::Acquire) {
            return None;
        }
        Some(Busy {
            seq: self.seq.load(Ordering::Acquire),
            fd: self.fd.load(Ordering::Relaxed),
            addr: self.addr.load(Ordering::Relaxed),
            conn: self.conn.load(Ordering::Relaxed),
            uid: self.uid.load(Ordering::Relaxed),
        })
    }

    /// The watchdog's verdict on syscall `seq`: past its deadline.
    pub fn mark_overdue(&self, seq: u64) {
        if self.busy.load(Ordering::Acquire) && self.seq.load(Ordering::Acquire) == seq {
            self.overdue.store(true, Ordering::Release);
        }
    }

    /// Memory fds whose access went overdue since the last call.
    pub fn take_failed(&self) -> Vec<i32> {
        if !self.has_failed.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *self.failed.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn enter(&self, fd: i32, addr: u64, conn: u64, uid: u32) {
        self.fd.store(fd, Ordering::Relaxed);
        self.addr.store(addr, Ordering::Relaxed);
        self.conn.store(conn, Ordering::Relaxed);
        self.uid.store(uid, Ordering::Relaxed);
        self.seq.fetch_add(1, Ordering::AcqRel);
        self.busy.store(true, Ordering::Release);
    }

    /// Ends the syscall; whether it went overdue.
    fn leave(&self) -> bool {
        self.busy.store(false, Ordering::Release);
        let overdue = self.overdue.swap(false, Ordering::AcqRel);
        if overdue && self.addr.load(Ordering::Relaxed) != CLOSING {
            let fd = self.fd.load(Ordering::Relaxed);
            self.failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(fd);
            self.has_failed.store(true, Ordering::Release);
        }
        overdue
    }
}

thread_local! {
    static SLOT: RefCell<Option<Arc<Slot>>> = const { RefCell::new(None) };
}

/// Watches this thread's syscalls through `slot` from now on.
pub fn install(slot: Arc<Slot>) {
    // SAFETY: gettid has no preconditions and cannot fail.
    slot.tid.store(unsafe { libc::gettid() }, Ordering::Relaxed);
    SLOT.with(|s| *s.borrow_mut() = Some(slot));
}

/// Runs `op`, a syscall on client `fd` touching client address `addr`,
/// in this thread's slot (if one is installed). Returns its result and
/// whether it went past its deadline (its client is then failed).
pub fn memory<T>(fd: i32, addr: u64, op: impl FnOnce() -> T) -> (T, bool) {
    watched(fd, addr, NO_CONN, 0, op)
}

/// Runs `op`, the close of `fd` (a file on FUSE connection `conn`, sent
/// by `uid`), in this thread's slot.
pub fn closing<T>(fd: i32, conn: u64, uid: u32, op: impl FnOnce() -> T) -> (T, bool) {
    watched(fd, CLOSING, conn, uid, op)
}

fn watched<T>(fd: i32, addr: u64, conn: u64, uid: u32, op: impl FnOnce() -> T) -> (T, bool) {
    let slot = SLOT.with(|s| s.borrow().clone());
    let Some(slot) = slot else {
        return (op(), false);
    };
    slot.enter(fd, addr, conn, uid);
    let r = op();
    let overdue = slot.leave();
    (r, overdue)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overdue_access_names_its_fd_once() {
        let slot = Arc::new(Slot::default());
        install(Arc::clone(&slot));
        let (v, late) = memory(7, 0x1000, || {
            let b = slot.busy().expect("busy inside the syscall");
            assert_eq!((b.fd, b.addr), (7, 0x1000));
            slot.mark_overdue(b.seq);
            42
        });
        assert_eq!((v, late), (42, true));
        assert!(slot.busy().is_none());
        assert_eq!(slot.take_failed(), vec![7]);
        assert!(slot.take_failed().is_empty());
        // A verdict on an older syscall does not touch the next one.
        let (_, late) = memory(8, 0, || slot.mark_overdue(0));
        assert!(!late);
        // An overdue close fails no client.
        let (_, late) = closing(9, 3, 1000, || {
            let b = slot.busy().unwrap();
            assert_eq!((b.addr, b.conn, b.uid), (CLOSING, 3, 1000));
            slot.mark_overdue(b.seq);
        });
        assert!(late);
        assert!(slot.take_failed().is_empty());
        SLOT.with(|s| *s.borrow_mut() = None);
    }

    #[test]
    fn without_a_slot_the_syscall_just_runs() {
        assert_eq!(memory(1, 2, || 5), (5, false));
    }
}
