//! The watchdog: a thread beside the loop that looks at the watched slots
//! (`mem/watch.rs`). A syscall on a client's memory or fd that has been
//! waiting (the thread asleep in the kernel, not merely preempted) for
//! [`DEADLINE`] is the one thing that can stop rxud serving everyone: a
//! FUSE server that never answers. The watchdog finds the FUSE connection
//! it waits on and, if the client's uid owns that connection, aborts it,
//! which ends the syscall with an error; the loop then closes that
//! client's session (`Daemon::fail_overdue`). A wait it cannot end (no
//! FUSE, or another user's) fails the client once it passes
//! [`HARD_DEADLINE`] and returns.
//!
//! It sleeps [`TICK`] between looks (50 short wake-ups a second), and
//! wakes at the deadline of a syscall it saw waiting.

use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::mem::watch::{Busy, Slot, CLOSING, NO_CONN};

use super::fuse;
use super::log::warning;

/// How often the slots are looked at.
pub const TICK: Duration = Duration::from_millis(20);
/// How long one syscall may be seen waiting on one client before its
/// FUSE connection is aborted: a bystander waits at most TICK + DEADLINE
/// and the abort.
pub const DEADLINE: Duration = Duration::from_millis(25);
/// A wait the watchdog cannot end fails its client past this.
pub const HARD_DEADLINE: Duration = Duration::from_secs(1);

pub struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    pub fn start(slots: Vec<(&'static str, Arc<Slot>)>) -> std::io::Result<Watchdog> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("rxud-watchdog".into())
            .spawn(move || watch(&slots, &flag))?;
        Ok(Watchdog {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Per slot: the syscall seen waiting, since when, and what was done.
struct Seen {
    seq: u64,
    since: Instant,
    /// Its FUSE connection was aborted (or it was failed past the hard
    /// deadline): nothing more to do.
    done: bool,
    /// The abort was tried and could not be done (said once).
    tried: bool,
}

/// Asks for the lowest real-time priority (root may; otherwise nothing
/// changes): on two cores shared with busy-polling clients a normal
/// thread may wait tens of ms for a CPU, and this one only ever sleeps or
/// runs for microseconds.
fn realtime() {
    let p = libc::sched_param { sched_priority: 1 };
    // SAFETY: pid 0 is the calling thread; p is a valid sched_param.
    let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
}

fn watch(slots: &[(&'static str, Arc<Slot>)], stop: &AtomicBool) {
    realtime();
    // Capabilities are per thread: this one keeps only what it uses.
    let _ = super::privs::drop_to(super::privs::watchdog_needs());
    let mut seen: Vec<Option<Seen>> = slots.iter().map(|_| None).collect();
    let mut nap = TICK;
    while !stop.load(Ordering::Acquire) {
        std::thread::park_timeout(nap);
        nap = TICK;
        let now = Instant::now();
        for ((what, slot), seen) in slots.iter().zip(seen.iter_mut()) {
            let Some(b) = slot.busy() else {
                *seen = None;
                continue;
            };
            // Runnable (preempted on these two busy cores) is not waiting.
            if !asleep(slot.tid()) {
                if seen.as_ref().is_some_and(|s| s.seq != b.seq) {
                    *seen = None;
                }
                continue;
            }
            let s = match seen {
                Some(s) if s.seq == b.seq => s,
                _ => seen.insert(Seen {
                    seq: b.seq,
                    since: now,
                    done: false,
                    tried: false,
                }),
            };
            let waited = now.saturating_duration_since(s.since);
            if s.done {
                continue;
            }
            if waited < DEADLINE {
                nap = nap.min(DEADLINE - waited);
                continue;
            }
            let waited = waited + TICK;
            if !s.tried {
                s.tried = true;
                if unblock(what, slot, &b, waited) {
                    s.done = true;
                    continue;
                }
            }
            if waited >= HARD_DEADLINE {
                s.done = true;
                slot.mark_overdue(b.seq);
                warning!(
                    "{what}: a syscall on a client's memory or file has waited {} ms; the client is failed when it returns",
                    waited.as_millis()
                );
            }
        }
    }
}

/// Whether thread `tid` of this process sleeps in the kernel (state S or
/// D in its stat), as a syscall waiting on a FUSE server does.
fn asleep(tid: i32) -> bool {
    if tid <= 0 {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
        return false;
    };
    // "tid (comm) S ...": the state follows the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_ascii_whitespace().next())
        .is_some_and(|st| st == "S" || st == "D")
}

/// How long the watchdog reads a client's maps before it falls back to
/// the uid's busy FUSE connections.
const MAPS_LIMIT: Duration = Duration::from_millis(50);

/// Ends the wait of syscall `b` if it is on a FUSE connection of the
/// client's own (whether it did); says what happened either way.
fn unblock(what: &str, slot: &Slot, b: &Busy, waited: Duration) -> bool {
    let (client, conns, uid) = if b.addr == CLOSING {
        let conns = if b.conn == NO_CONN {
            vec![]
        } else {
            vec![b.conn]
        };
        (format!("a file uid {} passed", b.uid), conns, Some(b.uid))
    } else {
        let pid = mem_pid(b.fd);
        let uid = pid.and_then(|p| {
            std::fs::metadata(format!("/proc/{p}"))
                .ok()
                .map(|m| m.uid())
        });
        let conns = match (pid, uid) {
            // Address 0 is the read of the maps itself (`mapcheck`).
            (Some(_), Some(u)) if b.addr == 0 => fuse::busy_conns_of(u),
            (Some(p), Some(u)) => match fuse::conn_at_within(p, b.addr, MAPS_LIMIT) {
                Some(found) => found.into_iter().collect(),
                // The maps wait too: whatever of the uid's is waiting.
                None => fuse::busy_conns_of(u),
            },
            _ => vec![],
        };
        let who = match (pid, uid) {
            (Some(p), Some(u)) => format!("the memory of pid {p} (uid {u}) at {:#x}", b.addr),
            _ => format!("a client's memory at {:#x}", b.addr),
        };
        (who, conns, uid)
    };
    let mut outcome = Vec::new();
    let mut done = false;
    match uid {
        _ if conns.is_empty() => outcome.push("not on a FUSE connection rxud can end".to_owned()),
        None => outcome.push("on FUSE, but the client's uid is unknown".to_owned()),
        Some(u) => {
            for c in conns {
                // Marked before the abort: the syscall returns the moment
                // it lands, and must find itself overdue.
                match fuse::owned_by(c, u).and_then(|()| {
                    slot.mark_overdue(b.seq);
                    fuse::abort(c)
                }) {
                    Ok(()) => {
                        done = true;
                        outcome.push(format!("aborted its FUSE connection {c}"));
                    }
                    Err(e) => outcome.push(format!("cannot end the wait: {e}")),
                }
            }
        }
    }
    let tail = if done { "; the client is failed" } else { "" };
    warning!(
        "{what}: a syscall on {client} has blocked rxud for {} ms: {}{tail}",
        waited.as_millis(),
        outcome.join("; ")
    );
    done
}

/// The pid whose `/proc/<pid>/mem` our `fd` is.
fn mem_pid(fd: i32) -> Option<u32> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    let s = link.to_str()?;
    s.strip_prefix("/proc/")?.strip_suffix("/mem")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::watch;

    #[test]
    fn a_syscall_past_the_deadline_is_marked_overdue() {
        let slot = Arc::new(Slot::default());
        let dog = Watchdog::start(vec![("test", Arc::clone(&slot))]).unwrap();
        watch::install(Arc::clone(&slot));
        let f = std::fs::File::open("/proc/self/mem").unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        // Not on FUSE: nothing to abort, so failed past the hard deadline.
        let (_, late) = watch::memory(fd, 0x10, || std::thread::sleep(DEADLINE * 4));
        assert!(!late, "a 100 ms wait it could not end failed the client");
        let (_, late) = watch::memory(fd, 0x10, || std::thread::sleep(HARD_DEADLINE + TICK * 3));
        assert!(late, "a wait past the hard deadline was not seen");
        assert_eq!(slot.take_failed(), vec![fd]);
        let (_, late) = watch::memory(fd, 0x10, || std::thread::sleep(Duration::from_millis(1)));
        assert!(!late);
        drop(dog);
    }

    #[test]
    fn a_sleeping_thread_is_asleep_and_a_spinning_one_is_not() {
        // SAFETY: gettid has no preconditions.
        let me = unsafe { libc::gettid() };
        assert!(!asleep(me), "this thread runs while it reads its stat");
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // SAFETY: as above.
            tx.send(unsafe { libc::gettid() }).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let tid = rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(asleep(tid));
        t.join().unwrap();
    }

    #[test]
    fn the_mem_fd_names_its_process() {
        let f = std::fs::File::open(format!("/proc/{}/mem", std::process::id())).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        assert_eq!(mem_pid(fd), Some(std::process::id()));
    }
}
