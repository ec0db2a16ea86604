//! A ring shared with a real second process: this test binary re-runs itself
//! as the child (selected by an environment variable), inheriting the ring's
//! memfd and the doorbell eventfd, as the daemon and a client will after
//! SCM_RIGHTS.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::Command;
use std::time::Duration;

use rxu_abi::ring::{Doorbell, Ring, RingError};

const ENV: &str = "RXU_RING_CHILD";
const ITEMS: u64 = 100_000;

/// A duplicate of `fd` that survives exec (no CLOEXEC).
fn inheritable(fd: &impl AsRawFd) -> OwnedFd {
    // SAFETY: dup of a descriptor we hold open; the new fd is ours alone.
    let raw = unsafe { libc::dup(fd.as_raw_fd()) };
    assert!(raw >= 0, "dup: {}", std::io::Error::last_os_error());
    // SAFETY: `raw` was just returned by dup and is owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(raw) }
}

fn spawn_child(mode: &str, ring: &OwnedFd, bell: &Doorbell) -> std::process::Child {
    let (r, b) = (inheritable(ring), inheritable(bell));
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_producer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV, format!("{mode},{},{}", r.as_raw_fd(), b.as_raw_fd()))
        .spawn()
        .unwrap();
    // Our copies of the inherited fds close here; the child has its own.
    drop((r, b));
    child
}

/// The child's side. A no-op when run as an ordinary test.
#[test]
fn child_producer() {
    let Ok(spec) = std::env::var(ENV) else {
        return;
    };
    let mut parts = spec.split(',');
    let mode = parts.next().unwrap().to_owned();
    let mut fd = || -> OwnedFd {
        let raw: RawFd = parts.next().unwrap().parse().unwrap();
        // SAFETY: the parent passed us this inherited descriptor for our
        // exclusive use; nothing else in this process refers to it.
        unsafe { OwnedFd::from_raw_fd(raw) }
    };
    let (ring_fd, bell_fd) = (fd(), fd());
    let mut p = Ring::attach(&ring_fd).unwrap().into_producer();
    let bell = Doorbell::from_fd(bell_fd).unwrap();
    match mode.as_str() {
        "honest" => {
            for seq in 0..ITEMS {
                while !p.try_push(&seq.to_le_bytes()).unwrap() {
                    std::thread::yield_now();
                }
                p.notify(&bell).unwrap();
            }
        }
        "hostile" => {
            // Publish 3 real entries, then claim the whole ring and more.
            for seq in 0..3u64 {
                assert!(p.try_push(&seq.to_le_bytes()).unwrap());
            }
            let file = std::fs::File::from(ring_fd);
            let bogus = 3u32 + 64 + 1;
            std::os::unix::fs::FileExt::write_all_at(
                &file,
                &bogus.to_ne_bytes(),
                rxu_abi::ring::layout::PROD_OFFSET as u64,
            )
            .unwrap();
            bell.ring().unwrap();
        }
        other => panic!("unknown child mode {other}"),
    }
}

#[test]
fn ring_shared_with_a_child_process() {
    // Honest child: everything arrives, in order.
    let (ring, fd) = Ring::create("rxu-xproc", 8, 64).unwrap();
    let mut c = ring.into_consumer();
    let bell = Doorbell::new().unwrap();
    let mut child = spawn_child("honest", &fd, &bell);
    let mut out = [0u8; 8];
    for seq in 0..ITEMS {
        while !c.try_pop(&mut out).unwrap() {
            c.wait(&bell, Some(Duration::from_secs(10))).unwrap();
        }
        assert_eq!(u64::from_le_bytes(out), seq);
    }
    assert!(child.wait().unwrap().success());
    assert!(c.is_empty().unwrap());

    // Hostile child: the real entries are readable, the forged index is an
    // error, and nothing beyond it is read.
    let (ring, fd) = Ring::create("rxu-xproc-bad", 8, 64).unwrap();
    let mut c = ring.into_consumer();
    let mut child = spawn_child("hostile", &fd, &bell);
    assert!(child.wait().unwrap().success());
    match c.try_pop(&mut out) {
        Err(RingError::Corrupt { prod, cons, slots }) => {
            assert_eq!((prod, cons, slots), (68, 0, 64));
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}
