//! DeviceMemory over real process memory: this test process's own
//! (through /proc/self/mem, opened here as a client would), a child's that
//! exits, and unmapped ranges. Test buffers are raw mmaps touched only
//! through volatile accesses, since the kernel writes them behind Rust's
//! back.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use transport::qp::window::Window;
use transport::qp::{AtomicOp, MemError, Memory, MwType};

use super::access::*;
use super::mapcheck::{self, MapError, MapSource};
use super::*;
use rxu_abi::proto::fdpass;

const ALL: u32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC;
const PD: u32 = 7;
const CLIENT: u32 = 1;
const QPN: u32 = 0x42;

fn page() -> usize {
    // SAFETY: sysconf only reads a system constant.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

fn own_mem() -> OwnedFd {
    File::options()
        .read(true)
        .write(true)
        .open("/proc/self/mem")
        .unwrap()
        .into()
}

/// Anonymous pages of this process, touched only with volatile accesses.
struct TestBuf {
    ptr: *mut u8,
    len: usize,
}

impl TestBuf {
    fn new(pages: usize, prot: i32) -> TestBuf {
        let len = pages * page();
        // SAFETY: a fresh private anonymous mapping; no existing memory is
        // affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        TestBuf { ptr: p.cast(), len }
    }
    fn rw(pages: usize) -> TestBuf {
        let b = TestBuf::new(pages, libc::PROT_READ | libc::PROT_WRITE);
        b.fill(|i| (i * 7 + 3) as u8);
        b
    }
    fn addr(&self) -> u64 {
        self.ptr as u64
    }
    fn get(&self, i: usize) -> u8 {
        assert!(i < self.len);
        // SAFETY: i is inside the mapping, which lives as long as self.
        unsafe { self.ptr.add(i).read_volatile() }
    }
    fn set(&self, i: usize, v: u8) {
        assert!(i < self.len);
        // SAFETY: as in get.
        unsafe { self.ptr.add(i).write_volatile(v) }
    }
    fn fill(&self, f: impl Fn(usize) -> u8) {
        for i in 0..self.len {
            self.set(i, f(i));
        }
    }
    fn snapshot(&self) -> Vec<u8> {
        (0..self.len).map(|i| self.get(i)).collect()
    }
    /// Unmaps pages `[first, first + n)`; later accesses must not touch them.
    fn unmap(&self, first: usize, n: usize) {
        // SAFETY: the pages belong to this mapping and no reference into
        // them exists (all accesses are volatile through the raw pointer).
        let r = unsafe { libc::munmap(self.ptr.add(first * page()).cast(), n * page()) };
        assert_eq!(r, 0);
    }
}

impl Drop for TestBuf {
    fn drop(&mut self) {
        // SAFETY: our own mapping (munmap of already unmapped parts is fine).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn device() -> DeviceMemory {
    let mut d = DeviceMemory::new();
    d.add_client(CLIENT, own_mem());
    d
}

#[test]
fn reads_and_writes_own_buffer() {
    let b = TestBuf::rw(2);
    let mut d = device();
    let iova = 0x1000_0000;
    let k = d
        .register(CLIENT, PD, b.addr() + 64, 4096, iova, ALL)
        .unwrap();
    assert_eq!(k.lkey, k.rkey);
    assert_eq!(
        d.mr(k.lkey),
        Some(MrInfo {
            client: CLIENT,
            pd: PD,
            addr: b.addr() + 64,
            len: 4096,
            iova,
            access: ALL,
            valid: true
        })
    );

    let mut got = [0u8; 100];
    d.read_local(PD, k.lkey, b.addr() + 64, &mut got).unwrap();
    assert!(got.iter().enumerate().all(|(i, &v)| v == b.get(64 + i)));
    d.read_remote(PD, QPN, k.rkey, iova + 4000, &mut got[..96])
        .unwrap();
    assert!(got[..96]
        .iter()
        .enumerate()
        .all(|(i, &v)| v == b.get(4064 + i)));

    let before = b.snapshot();
    d.write_local(PD, k.lkey, b.addr() + 100, &[0xaa; 10])
        .unwrap();
    d.write_remote(PD, QPN, k.rkey, iova + 4096 - 5, &[0xbb; 5])
        .unwrap();
    let after = b.snapshot();
    for (i, (&x, &y)) in before.iter().zip(&after).enumerate() {
        let want = match i {
            100..=109 => 0xaa,
            4155..=4159 => 0xbb,
            _ => x,
        };
        assert_eq!(y, want, "byte {i}");
    }
    // Empty accesses at the very end are in bounds and move nothing.
    d.read_remote(PD, QPN, k.rkey, iova + 4096, &mut [])
        .unwrap();
    d.write_local(PD, k.lkey, b.addr() + 64 + 4096, &[])
        .unwrap();
    d.check_remote(PD, QPN, k.rkey, iova, 4096, REMOTE_READ | REMOTE_WRITE)
        .unwrap();
}

#[test]
fn atomics_on_host_order_words() {
    let b = TestBuf::rw(1);
    let mut d = device();
    let k = d.register(CLIENT, PD, b.addr(), 64, 0, ALL).unwrap();
    let word = |i: usize| u64::from_ne_bytes(std::array::from_fn(|j| b.get(i * 8 + j)));
    let w0 = word(0);
    let cas = |compare, swap| AtomicOp::CmpSwap { compare, swap };
    assert_eq!(d.atomic_remote(PD, QPN, k.rkey, 0, cas(w0 ^ 1, 5)), Ok(w0));
    assert_eq!(word(0), w0, "failed compare leaves the word");
    assert_eq!(d.atomic_remote(PD, QPN, k.rkey, 0, cas(w0, 5)), Ok(w0));
    assert_eq!(word(0), 5);
    let add = AtomicOp::FetchAdd { add: u64::MAX };
    assert_eq!(d.atomic_remote(PD, QPN, k.rkey, 0, add), Ok(5));
    assert_eq!(word(0), 4, "adds wrap");
    let w7 = word(7);
    let set = AtomicOp::Write { value: 42 };
    assert_eq!(d.atomic_remote(PD, QPN, k.rkey, 56, set), Ok(w7));
    assert_eq!(word(7), 42);
    assert_eq!(
        d.atomic_remote(PD, QPN, k.rkey, 60, set),
        Err(MemError::Misaligned)
    );
    assert_eq!(
        d.atomic_remote(PD, QPN, k.rkey, 64, set),
        Err(MemError::OutOfBounds)
    );
    // ATOMIC WRITE needs REMOTE_WRITE, the others REMOTE_ATOMIC.
    let w = d
        .register(CLIENT, PD, b.addr(), 64, 0, LOCAL_WRITE | REMOTE_WRITE)
        .unwrap();
    assert_eq!(
        d.atomic_remote(PD, QPN, w.rkey, 8, add),
        Err(MemError::AccessDenied)
    );
    assert!(d.atomic_remote(PD, QPN, w.rkey, 8, set).is_ok());
    let a = d
        .register(CLIENT, PD, b.addr(), 64, 0, LOCAL_WRITE | REMOTE_ATOMIC)
        .unwrap();
    assert_eq!(
        d.atomic_remote(PD, QPN, a.rkey, 8, set),
        Err(MemError::AccessDenied)
    );
    assert!(d.atomic_remote(PD, QPN, a.rkey, 8, add).is_ok());
}

/// One refused access: what it is and the error it must give.
struct Case {
    name: &'static str,
    want: MemError,
    run: fn(&mut DeviceMemory, &Keys) -> Result<(), MemError>,
}

/// Keys of the regions the refusal cases use; the main region is
/// `[base + 100, base + 1100)` at iova `IOVA`.
struct Keys {
    base: u64,
    all: u32,
    read_only: u32,
    no_remote: u32,
    invalidated: u32,
    deregistered: u32,
}

const IOVA: u64 = 0x7000;

fn cases() -> Vec<Case> {
    fn buf(n: usize) -> Vec<u8> {
        vec![0x5a; n]
    }
    vec![
        Case {
            name: "unknown key",
            want: MemError::InvalidKey,
            run: |d, k| d.write_remote(PD, QPN, k.all ^ 0x8000_0001, IOVA, &buf(8)),
        },
        Case {
            name: "key 0",
            want: MemError::InvalidKey,
            run: |d, _| d.write_local(PD, 0, 0, &buf(8)),
        },
        Case {
            name: "other PD, remote",
            want: MemError::WrongPd,
            run: |d, k| d.write_remote(PD + 1, QPN, k.all, IOVA, &buf(8)),
        },
        Case {
            name: "other PD, local",
            want: MemError::WrongPd,
            run: |d, k| d.write_local(PD + 1, k.all, k.base + 100, &buf(8)),
        },
        Case {
            name: "remote, one byte before",
            want: MemError::OutOfBounds,
            run: |d, k| d.write_remote(PD, QPN, k.all, IOVA - 1, &buf(8)),
        },
        Case {
            name: "remote, one byte past the end",
            want: MemError::OutOfBounds,
            run: |d, k| d.write_remote(PD, QPN, k.all, IOVA + 993, &buf(8)),
        },
        Case {
            name: "remote, starts at the end",
            want: MemError::OutOfBounds,
            run: |d, k| d.write_remote(PD, QPN, k.all, IOVA + 1000, &buf(1)),
        },
        Case {
            name: "local, one byte before",
            want: MemError::OutOfBounds,
            run: |d, k| d.write_local(PD, k.all, k.base + 99, &buf(8)),
        },
        Case {
            name: "local, one byte past the end",
            want: MemError::OutOfBounds,
            run: |d, k| d.write_local(PD, k.all, k.base + 1093, &buf(8)),
        },
        Case {
            name: "local address used as va",
            want: MemError::OutOfBounds,
            run: |d, k| d.write_remote(PD, QPN, k.all, k.base + 100, &buf(8)),
        },
        Case {
            name: "va + len wraps around 2^64",
            want: MemError::OutOfBounds,
            run: |d, k| d.write_remote(PD, QPN, k.all, u64::MAX - 3, &buf(8)),
        },
        Case {
            name: "check of 2^64 - 1 bytes",
            want: MemError::OutOfBounds,
            run: |d, k| d.check_remote(PD, QPN, k.all, IOVA + 1, u64::MAX, REMOTE_WRITE),
        },
        Case {
            name: "atomic straddling the end",
            want: MemError::OutOfBounds,
            run: |d, k| {
                d.atomic_remote(PD, QPN, k.all, IOVA + 1000, AtomicOp::Write { value: 1 })
                    .map(|_| ())
            },
        },
        Case {
            name: "remote write without REMOTE_WRITE",
            want: MemError::AccessDenied,
            run: |d, k| d.write_remote(PD, QPN, k.read_only, IOVA, &buf(8)),
        },
        Case {
            name: "local write without LOCAL_WRITE",
            want: MemError::AccessDenied,
            run: |d, k| d.write_local(PD, k.read_only, k.base + 100, &buf(8)),
        },
        Case {
            name: "remote read without REMOTE_READ",
            want: MemError::AccessDenied,
            run: |d, k| d.read_remote(PD, QPN, k.no_remote, IOVA, &mut buf(8)),
        },
        Case {
            name: "atomic without REMOTE_ATOMIC",
            want: MemError::AccessDenied,
            run: |d, k| {
                d.atomic_remote(PD, QPN, k.no_remote, IOVA, AtomicOp::FetchAdd { add: 1 })
                    .map(|_| ())
            },
        },
        Case {
            name: "invalidated, remote",
            want: MemError::InvalidKey,
            run: |d, k| d.write_remote(PD, QPN, k.invalidated, IOVA, &buf(8)),
        },
        Case {
            name: "invalidated, local",
            want: MemError::InvalidKey,
            run: |d, k| d.write_local(PD, k.invalidated, k.base + 100, &buf(8)),
        },
        Case {
            name: "invalidated twice",
            want: MemError::InvalidKey,
            run: |d, k| d.invalidate(PD, QPN, k.invalidated),
        },
        Case {
            name: "deregistered",
            want: MemError::InvalidKey,
            run: |d, k| d.write_remote(PD, QPN, k.deregistered, IOVA, &buf(8)),
        },
    ]
}

#[test]
fn every_check_refuses_before_a_byte_moves() {
    let b = TestBuf::rw(2);
    let mut d = device();
    let base = b.addr();
    let mut reg = |access| {
        d.register(CLIENT, PD, base + 100, 1000, IOVA, access)
            .unwrap()
            .lkey
    };
    let keys = Keys {
        base,
        all: reg(ALL),
        read_only: reg(REMOTE_READ),
        no_remote: reg(LOCAL_WRITE),
        invalidated: reg(ALL),
        deregistered: reg(ALL),
    };
    assert_eq!(
        d.invalidate(PD + 1, QPN, keys.invalidated),
        Err(MemError::WrongPd)
    );
    d.invalidate(PD, QPN, keys.invalidated).unwrap();
    assert!(!d.mr(keys.invalidated).unwrap().valid);
    d.deregister(CLIENT, keys.deregistered).unwrap();

    let before = b.snapshot();
    for c in cases() {
        assert_eq!((c.run)(&mut d, &keys), Err(c.want), "{}", c.name);
        assert!(b.snapshot() == before, "{}: memory changed", c.name);
    }
    // The same writes, in bounds and allowed, touch only the region.
    d.write_remote(PD, QPN, keys.all, IOVA, &[0x5a; 1000])
        .unwrap();
    let after = b.snapshot();
    for (i, (&x, &y)) in before.iter().zip(&after).enumerate() {
        let want = if (100..1100).contains(&i) { 0x5a } else { x };
        assert_eq!(y, want, "byte {i}");
    }
}

#[test]
fn registration_refusals() {
    let b = TestBuf::rw(3);
    let mut d = device();
    let a = b.addr();
    let reg = |d: &mut DeviceMemory, client, addr, len, iova, access| {
        d.register(client, PD, addr, len, iova, access)
    };
    let invalid = |r: Result<MrKeys, RegError>| matches!(r, Err(RegError::Invalid(_)));
    assert!(invalid(reg(&mut d, CLIENT, a, 8, a, REMOTE_WRITE)));
    assert!(invalid(reg(
        &mut d,
        CLIENT,
        a,
        8,
        a,
        REMOTE_ATOMIC | REMOTE_READ
    )));
    assert!(invalid(reg(&mut d, CLIENT, a, 8, a, 1 << 15)));
    assert!(invalid(reg(&mut d, CLIENT, a, 0, a, 0)));
    assert!(invalid(reg(&mut d, CLIENT, u64::MAX - 4, 8, 0, 0)));
    assert!(invalid(reg(&mut d, CLIENT, a, 8, u64::MAX - 4, 0)));
    assert_eq!(reg(&mut d, 99, a, 8, a, 0), Err(RegError::NoClient));
    assert_eq!(RegError::Invalid("x").errno(), libc::EINVAL);
    assert_eq!(RegError::Fault.errno(), libc::EFAULT);
    assert_eq!(RegError::NoResources("x").errno(), libc::ENOMEM);

    // A hole in the middle, a range running off the end, address 0.
    b.unmap(1, 1);
    let p = page() as u64;
    assert_eq!(reg(&mut d, CLIENT, a, 3 * p, a, 0), Err(RegError::Fault));
    assert_eq!(
        reg(&mut d, CLIENT, a + p - 1, 2, a, 0),
        Err(RegError::Fault)
    );
    assert_eq!(reg(&mut d, CLIENT, 0, 8, 0, 0), Err(RegError::Fault));
    assert!(reg(&mut d, CLIENT, a, p, a, ALL).is_ok());
    assert!(reg(&mut d, CLIENT, a + 2 * p, p, 0, ALL).is_ok());

    // Read-only memory registers for reading only; PROT_NONE not at all.
    let ro = TestBuf::new(1, libc::PROT_READ);
    assert_eq!(
        reg(&mut d, CLIENT, ro.addr(), 64, 0, LOCAL_WRITE),
        Err(RegError::Fault)
    );
    assert!(reg(&mut d, CLIENT, ro.addr(), 64, 0, REMOTE_READ).is_ok());
    let none = TestBuf::new(1, libc::PROT_NONE);
    assert_eq!(
        reg(&mut d, CLIENT, none.addr(), 64, 0, REMOTE_READ),
        Err(RegError::Fault)
    );

    let s = d.stats();
    assert_eq!((s.mrs, s.registrations, s.failures), (3, 3, 12));
    assert_eq!(s.bytes, 2 * p + 64);
}

#[test]
fn page_probe_fallback_finds_holes() {
    let b = TestBuf::rw(3);
    let mem = File::from(own_mem());
    let blind = MapSource::default();
    let p = page() as u64;
    let a = b.addr();
    assert_eq!(
        mapcheck::check_mapped(&mem, &blind, a + 5, 3 * p - 10, true),
        Ok(())
    );
    b.unmap(1, 1);
    let r = mapcheck::check_mapped(&mem, &blind, a + 5, 3 * p - 10, false);
    assert_eq!(r, Err(MapError::Unmapped));
    assert_eq!(mapcheck::check_mapped(&mem, &blind, a, p, false), Ok(()));
}

#[test]
fn munmapped_memory_gives_unmapped() {
    let b = TestBuf::rw(3);
    let mut d = device();
    let p = page();
    let k = d
        .register(CLIENT, PD, b.addr(), 3 * p as u64, 0, ALL)
        .unwrap()
        .lkey;
    b.unmap(1, 1);
    let mut got = vec![0u8; 3 * p];
    assert_eq!(
        d.read_remote(PD, QPN, k, 0, &mut got),
        Err(MemError::Unmapped)
    );
    assert_eq!(
        d.read_remote(PD, QPN, k, p as u64 + 8, &mut got[..8]),
        Err(MemError::Unmapped)
    );
    assert_eq!(
        d.write_remote(PD, QPN, k, p as u64, &got[..8]),
        Err(MemError::Unmapped)
    );
    assert_eq!(
        d.atomic_remote(PD, QPN, k, p as u64, AtomicOp::FetchAdd { add: 1 }),
        Err(MemError::Unmapped)
    );
    assert!(d.read_remote(PD, QPN, k, 0, &mut got[..p]).is_ok());
    assert!(d
        .read_local(PD, k, b.addr() + 2 * p as u64, &mut got[..p])
        .is_ok());
    b.unmap(0, 3);
    assert_eq!(
        d.read_local(PD, k, b.addr(), &mut got[..1]),
        Err(MemError::Unmapped)
    );
    assert_eq!(
        d.write_local(PD, k, b.addr(), &got[..1]),
        Err(MemError::Unmapped)
    );
}

#[test]
fn deregister_and_remove_client() {
    let b = TestBuf::rw(1);
    let mut d = device();
    d.add_client(2, own_mem());
    let k1 = d.register(CLIENT, PD, b.addr(), 100, 0, ALL).unwrap().lkey;
    let k2 = d.register(CLIENT, PD, b.addr(), 200, 0, ALL).unwrap().lkey;
    let k3 = d.register(2, PD + 1, b.addr(), 300, 0, ALL).unwrap().lkey;
    assert_eq!((d.client_mrs(CLIENT), d.client_mrs(2)), (2, 1));
    assert_eq!(d.deregister(2, k1), Err(RegError::NoSuchMr), "not its MR");
    assert_eq!(d.deregister(CLIENT, k3), Err(RegError::NoSuchMr));
    assert_eq!(d.deregister(CLIENT, 0), Err(RegError::NoSuchMr));
    d.deregister(CLIENT, k1).unwrap();
    assert_eq!(d.deregister(CLIENT, k1), Err(RegError::NoSuchMr));
    assert_eq!(d.stats().bytes, 500);
    d.remove_client(CLIENT);
    assert_eq!(d.mr(k2), None);
    assert_eq!(
        d.read_local(PD, k2, b.addr(), &mut [0; 4]),
        Err(MemError::InvalidKey)
    );
    assert!(d.read_local(PD + 1, k3, b.addr(), &mut [0; 4]).is_ok());
    let s = d.stats();
    assert_eq!((s.mrs, s.bytes), (1, 300));
    assert_eq!(
        d.register(CLIENT, PD, b.addr(), 8, 0, 0),
        Err(RegError::NoClient)
    );
    // Re-adding an id starts it afresh.
    d.add_client(2, own_mem());
    assert_eq!(d.mr(k3), None);
    assert_eq!(d.stats().bytes, 0);
}

#[test]
fn keys_are_unique_nonzero_and_latency_is_sampled() {
    let b = TestBuf::rw(1);
    let mut d = device();
    let mut keys = std::collections::HashSet::new();
    for _ in 0..300 {
        let k = d.register(CLIENT, PD, b.addr(), 64, 0, 0).unwrap();
        assert_ne!(k.lkey, 0);
        assert!(keys.insert(k.lkey));
    }
    let s = d.stats();
    assert_eq!((s.mrs, s.registrations, s.failures), (300, 300, 0));
    assert!(s.reg_p50_ns > 0 && s.reg_p50_ns <= s.reg_p99_ns, "{s:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    /// Any (va, len) is refused or lies wholly inside the region; no key,
    /// PD or size panics.
    #[test]
    fn remote_bounds_in_a_real_region(dv in -2000i64..6000, n in 0u64..5000, far: u64,
                                      use_far: bool, key: u32, pd in 6u32..9) {
        let b = TestBuf::rw(2);
        let mut d = device();
        let iova = 0x4000_0000u64;
        let k = d.register(CLIENT, PD, b.addr() + 8, 4000, iova, ALL).unwrap();
        let va = if use_far { far } else { iova.wrapping_add(dv as u64) };
        let inside = va >= iova && (va - iova) as u128 + n as u128 <= 4000;
        let r = d.check_remote(PD, QPN, k.rkey, va, n, REMOTE_READ);
        prop_assert_eq!(r.is_ok(), inside);
        let mut buf = vec![0u8; n as usize];
        prop_assert_eq!(d.read_remote(PD, QPN, k.rkey, va, &mut buf).is_ok(), inside);
        let r = d.read_remote(pd, QPN, key, va, &mut buf);
        prop_assert!(r.is_err() || (key == k.rkey && pd == PD));
    }
}

const CHILD_ENV: &str = "RXU_MEM_TEST_CHILD_SOCK";

/// Runs only as the child of `child_memory_then_exit`: shares a buffer and
/// its /proc/self/mem, reports the buffer on request, exits when told.
#[test]
fn child_helper() {
    let Ok(fd) = std::env::var(CHILD_ENV) else {
        return;
    };
    let fd: i32 = fd.parse().unwrap();
    // SAFETY: the parent left this descriptor open for us and nothing else
    // in this process owns it.
    let sock: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    let mut sock = UnixStream::from(sock);
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let b = TestBuf::rw(2);
    let mem = own_mem();
    fdpass::send_msg(sock.as_fd(), &b.addr().to_ne_bytes(), &[mem.as_fd()]).unwrap();
    for _ in 0..10 {
        let mut cmd = [0u8; 1];
        if sock.read_exact(&mut cmd).is_err() || cmd[0] != b'c' {
            break;
        }
        let head: Vec<u8> = (0..64).map(|i| b.get(i)).collect();
        sock.write_all(&head).unwrap();
    }
    std::process::exit(0);
}

#[test]
fn child_memory_then_exit() {
    let (mine, theirs) = UnixStream::pair().unwrap();
    mine.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let raw = theirs.as_raw_fd();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "mem::tests::child_helper", "--test-threads=1"])
        .env(CHILD_ENV, raw.to_string())
        .stdout(Stdio::null());
    // SAFETY: only fcntl, async-signal-safe, runs between fork and exec;
    // clearing FD_CLOEXEC on the child's copy hands it the socket.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(raw, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop(theirs);
    let mut mine = mine;
    let mut addr = [0u8; 8];
    let (n, mut fds) = fdpass::recv_msg(mine.as_fd(), &mut addr, 0).unwrap();
    assert_eq!((n, fds.len()), (8, 1));
    let addr = u64::from_ne_bytes(addr);

    let mut d = DeviceMemory::new();
    d.add_client(5, fds.remove(0));
    assert!(d.clients[&5].maps.has_maps(), "the child's maps are found");
    let k = d.register(5, PD, addr, 8192, addr, ALL).unwrap().lkey;
    let mut got = [0u8; 64];
    d.read_local(PD, k, addr, &mut got).unwrap();
    assert!(got.iter().enumerate().all(|(i, &v)| v == (i * 7 + 3) as u8));
    d.write_remote(PD, QPN, k, addr + 8, &[0xee; 16]).unwrap();
    d.atomic_remote(PD, QPN, k, addr + 32, AtomicOp::Write { value: 0 })
        .unwrap();
    mine.write_all(b"c").unwrap();
    let mut head = [0u8; 64];
    mine.read_exact(&mut head).unwrap();
    for (i, &v) in head.iter().enumerate() {
        let want = match i {
            8..=23 => 0xee,
            32..=39 => 0,
            _ => (i * 7 + 3) as u8,
        };
        assert_eq!(v, want, "child byte {i}");
    }

    assert!(!d.client_gone(5));
    mine.write_all(b"x").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "child did not exit");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success());

    // The child is gone: every access is an error, none a crash, and the
    // error says the owner exited (the transport then stays silent rather
    // than NAK the peer with a remote access error).
    assert_eq!(d.read_local(PD, k, addr, &mut got), Err(MemError::Gone));
    assert_eq!(d.write_local(PD, k, addr, &got), Err(MemError::Gone));
    assert_eq!(
        d.read_remote(PD, QPN, k, addr, &mut got),
        Err(MemError::Gone)
    );
    assert_eq!(d.write_remote(PD, QPN, k, addr, &got), Err(MemError::Gone));
    assert_eq!(
        d.atomic_remote(PD, QPN, k, addr, AtomicOp::FetchAdd { add: 1 }),
        Err(MemError::Gone)
    );
    assert_eq!(d.register(5, PD, addr, 64, addr, 0), Err(RegError::Fault));
    assert!(d.client_gone(5));
    d.remove_client(5);
    assert_eq!(d.stats().mrs, 0);
}

#[test]
fn on_demand_regions_pin_nothing_and_implicit_covers_everything() {
    let b = TestBuf::rw(3);
    let mut d = device();
    let p = page() as u64;
    let a = b.addr();
    b.unmap(1, 1);
    // A hole: refused pinned, registered on demand.
    assert_eq!(
        d.register(CLIENT, PD, a, 3 * p, a, ALL),
        Err(RegError::Fault)
    );
    let k = d
        .register(CLIENT, PD, a, 3 * p, a, ALL | ON_DEMAND)
        .unwrap()
        .lkey;
    assert_eq!(d.mr(k).unwrap().access, ALL | ON_DEMAND);
    let mut got = [0u8; 8];
    assert!(d.read_remote(PD, QPN, k, a, &mut got).is_ok());
    assert_eq!(
        d.write_remote(PD, QPN, k, a + p, &got),
        Err(MemError::Unmapped)
    );
    // Implicit: [0, 2^64 - 1) at iova 0, whatever is mapped in it.
    let whole = u64::MAX;
    assert!(matches!(
        d.register(CLIENT, PD, 0, whole, 4096, ON_DEMAND),
        Err(RegError::Invalid(_))
    ));
    assert!(matches!(
        d.register(CLIENT, PD, 0, whole, 0, LOCAL_WRITE),
        Err(RegError::Invalid(_))
    ));
    let i = d
        .register(CLIENT, PD, 0, whole, 0, ALL | ON_DEMAND)
        .unwrap()
        .lkey;
    assert!(d.read_local(PD, i, a + 2 * p, &mut got).is_ok());
    assert!(d.write_remote(PD, QPN, i, a, &[1, 2, 3]).is_ok());
    assert_eq!((b.get(0), b.get(2)), (1, 3));
    assert_eq!(
        d.read_remote(PD, QPN, i, a + p, &mut got),
        Err(MemError::Unmapped)
    );
    assert_eq!(
        d.read_remote(PD, QPN, i, u64::MAX - 4, &mut got),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(d.stats().bytes, u64::MAX, "byte count saturates");
}

#[test]
fn advise_checks_keys_ranges_and_mappings_as_the_kernel() {
    use super::advise::{advice::*, AdviseError as E, Range, FLAG_FLUSH as SYNC};
    let b = TestBuf::rw(3);
    let mut d = device();
    let p = page() as u64;
    let a = b.addr();
    b.unmap(1, 1);
    let odp = d
        .register(CLIENT, PD, a, 3 * p, a, ALL | ON_DEMAND)
        .unwrap()
        .lkey;
    let ro = d.register(CLIENT, PD, a, p, a, ON_DEMAND).unwrap().lkey;
    let pinned = d.register(CLIENT, PD, a, p, a, ALL).unwrap().lkey;
    let other_pd = d
        .register(CLIENT, PD + 1, a, p, a, ALL | ON_DEMAND)
        .unwrap()
        .lkey;
    let r = |addr, len, lkey| [Range { addr, len, lkey }];
    let adv = |adv, flags, rs: &[Range]| d.advise(CLIENT, PD, adv, flags, rs);
    for a_ in [PREFETCH, PREFETCH_WRITE, PREFETCH_NO_FAULT] {
        for f in [0, SYNC] {
            assert_eq!(adv(a_, f, &r(a, 64, odp)), Ok(()), "advice {a_} flags {f}");
        }
    }
    assert_eq!(adv(PREFETCH, SYNC, &r(a + p, 64, odp)), Err(E::Fault));
    assert_eq!(adv(PREFETCH, 0, &r(a + p, 64, odp)), Ok(()));
    assert_eq!(adv(PREFETCH_NO_FAULT, SYNC, &r(a + p, 64, odp)), Ok(()));
    assert_eq!(adv(PREFETCH, SYNC, &r(a + 3 * p, 8, odp)), Err(E::Fault));
    assert_eq!(adv(3, SYNC, &r(a, 8, odp)), Err(E::Unsupported(3)));
    assert!(matches!(
        adv(PREFETCH, 2, &r(a, 8, odp)),
        Err(E::Invalid(_))
    ));
    assert!(matches!(adv(PREFETCH, SYNC, &[]), Err(E::Invalid(_))));
    for k in [pinned, other_pd, 0x1234_5678] {
        assert_eq!(adv(PREFETCH, SYNC, &r(a, 8, k)), Err(E::NoSuchMr(k)));
    }
    // Asynchronous advice is rxe's: any region of the PD with local write
    // (an ordinary, pinned one too) for every advice; other keys EINVAL.
    for a_ in [PREFETCH, PREFETCH_WRITE, PREFETCH_NO_FAULT] {
        assert_eq!(adv(a_, 0, &r(a, 8, pinned)), Ok(()), "advice {a_}");
        for k in [ro, other_pd, 0x1234_5678] {
            assert!(matches!(adv(a_, 0, &r(a, 8, k)), Err(E::Invalid(_))));
        }
    }
    assert_eq!(
        adv(PREFETCH_WRITE, SYNC, &r(a, 8, ro)),
        Err(E::NoSuchMr(ro))
    );
    assert_eq!(adv(PREFETCH, SYNC, &r(a, 8, ro)), Ok(()));
    assert_eq!(
        d.advise(CLIENT + 1, PD, PREFETCH, SYNC, &r(a, 8, odp))
            .map_err(E::errno),
        Err(libc::EINVAL)
    );
    assert_eq!(E::Fault.errno(), libc::EFAULT);
    assert_eq!(E::NoSuchMr(1).errno(), libc::ENOENT);
    assert_eq!(E::Unsupported(3).errno(), libc::EOPNOTSUPP);
}

#[test]
fn reassigned_regions_outlive_their_registrar_and_keep_its_memory() {
    let b = TestBuf::rw(1);
    let mut d = device();
    d.add_client(CLIENT + 1, own_mem());
    let k = d.register(CLIENT, PD, b.addr(), 64, b.addr(), ALL).unwrap();
    assert!(!d.client_gone(CLIENT) && d.client_gone(CLIENT + 2));
    d.reassign(CLIENT, CLIENT + 1);
    assert_eq!(d.mr(k.lkey).map(|m| m.client), Some(CLIENT + 1));
    assert_eq!(d.client_mrs(CLIENT), 0);
    d.remove_client(CLIENT);
    d.write_local(PD, k.lkey, b.addr(), &[0x5a; 4]).unwrap();
    assert_eq!(b.get(3), 0x5a, "still the registrar's memory");
    assert_eq!(d.deregister(CLIENT, k.lkey), Err(RegError::NoSuchMr));
    d.deregister(CLIENT + 1, k.lkey).unwrap();
}

// ------------------------------------------------------------ windows

fn bind(mw: u32, mr: u32, addr: u64, len: u64, acc: u32) -> transport::qp::MwBind {
    transport::qp::MwBind {
        mw_rkey: mw,
        new_rkey: mw.wrapping_add(1),
        mr_lkey: mr,
        addr,
        len,
        access: acc,
    }
}

/// A window reaches the client's memory through its region, only inside
/// its own range and with its own access; it shares no key with regions.
#[test]
fn windows_translate_through_their_region() {
    let b = TestBuf::rw(2);
    let mut d = device();
    let k = d
        .register(CLIENT, PD, b.addr(), 8192, IOVA, LOCAL_WRITE | MW_BIND)
        .unwrap();
    // The region itself grants no remote access.
    assert_eq!(
        d.write_remote(PD, QPN, k.rkey, IOVA, &[1]),
        Err(MemError::AccessDenied)
    );
    let mw = d.alloc_mw(CLIENT, PD, MwType::Two).unwrap();
    assert!(d.mr(mw).is_none(), "window keys are not region keys");
    assert_ne!(Window::index(mw), Window::index(k.lkey));
    d.bind_mw(
        PD,
        QPN,
        &bind(mw, k.lkey, IOVA + 4096, 100, REMOTE_WRITE | REMOTE_READ),
    )
    .unwrap();
    let key = d.mw(mw).unwrap().rkey;
    d.write_remote(PD, QPN, key, IOVA + 4096 + 10, &[0xab; 4])
        .unwrap();
    assert_eq!(b.get(4096 + 10), 0xab);
    let mut got = [0u8; 4];
    d.read_remote(PD, QPN, key, IOVA + 4096 + 10, &mut got)
        .unwrap();
    assert_eq!(got, [0xab; 4]);
    for (va, n) in [(IOVA + 4095, 1usize), (IOVA + 4096 + 97, 4)] {
        assert_eq!(
            d.write_remote(PD, QPN, key, va, &vec![0; n]),
            Err(MemError::OutOfBounds)
        );
    }
    assert_eq!(
        d.atomic_remote(PD, QPN, key, IOVA + 4096, AtomicOp::FetchAdd { add: 1 }),
        Err(MemError::AccessDenied)
    );
    assert_eq!(
        d.write_remote(PD, QPN + 1, key, IOVA + 4096, &[1]),
        Err(MemError::InvalidKey),
        "type 2: another QP"
    );
    // Bound windows pin the region.
    assert_eq!(d.deregister(CLIENT, k.lkey), Err(RegError::WindowsBound));
    assert_eq!(
        d.invalidate(PD, QPN, k.lkey),
        Err(MemError::AccessDenied),
        "a region with windows is not invalidated"
    );
    d.invalidate(PD, QPN, key).unwrap();
    assert_eq!(
        d.write_remote(PD, QPN, key, IOVA + 4096, &[1]),
        Err(MemError::InvalidKey)
    );
    d.deregister(CLIENT, k.lkey).unwrap();
    assert_eq!(d.client_mws(CLIENT), 1);
    d.dealloc_mw(CLIENT, key).unwrap();
    assert_eq!(d.client_mws(CLIENT), 0);
    assert!(d.dealloc_mw(CLIENT, key).is_err());
}

#[test]
fn windows_belong_to_their_client() {
    let b = TestBuf::rw(1);
    let mut d = device();
    d.add_client(CLIENT + 1, own_mem());
    let k = d
        .register(CLIENT, PD, b.addr(), 4096, IOVA, LOCAL_WRITE | MW_BIND)
        .unwrap();
    let mw = d.alloc_mw(CLIENT, PD, MwType::One).unwrap();
    // Another client's PD cannot bind it, nor free it.
    assert_eq!(
        d.bind_mw(PD + 1, QPN, &bind(mw, k.lkey, IOVA, 8, REMOTE_READ)),
        Err(MemError::WrongPd)
    );
    assert!(d.dealloc_mw(CLIENT + 1, mw).is_err());
    d.bind_mw(PD, QPN, &bind(mw, k.lkey, IOVA, 8, REMOTE_READ))
        .unwrap();
    let key = d.mw(mw).unwrap().rkey;
    // Type 1: any QP of the PD, none of another.
    let mut got = [0u8; 8];
    d.read_remote(PD, QPN + 5, key, IOVA, &mut got).unwrap();
    assert_eq!(
        d.read_remote(PD + 1, QPN, key, IOVA, &mut got),
        Err(MemError::WrongPd)
    );
    assert_eq!(d.invalidate(PD, QPN, key), Err(MemError::AccessDenied));
    // A client that leaves takes its windows along.
    d.remove_client(CLIENT);
    assert!(d.mw(key).is_none());
    assert_eq!(d.alloc_mw(CLIENT, PD, MwType::Two), Err(RegError::NoClient));
}

/// rereg: the keys stay, the next access sees the new PD, range and
/// access; a bound window pins the region.
#[test]
fn reregister_changes_the_next_access() {
    let b = TestBuf::rw(2);
    let mut d = device();
    let k = d
        .register(CLIENT, PD, b.addr(), 4096, IOVA, ALL | MW_BIND)
        .unwrap();
    d.write_remote(PD, QPN, k.rkey, IOVA, &[1]).unwrap();
    d.reregister(CLIENT, k.lkey, None, None, Some(LOCAL_WRITE))
        .unwrap();
    assert_eq!(
        d.write_remote(PD, QPN, k.rkey, IOVA, &[1]),
        Err(MemError::AccessDenied)
    );
    d.reregister(CLIENT, k.lkey, Some(PD + 1), None, Some(ALL | MW_BIND))
        .unwrap();
    assert_eq!(
        d.write_remote(PD, QPN, k.rkey, IOVA, &[1]),
        Err(MemError::WrongPd)
    );
    d.write_remote(PD + 1, QPN, k.rkey, IOVA, &[1]).unwrap();
    // New range: addressed at its own addresses; the old ones are gone.
    let second = b.addr() + 4096;
    d.reregister(CLIENT, k.lkey, None, Some((second, 4096)), None)
        .unwrap();
    d.write_remote(PD + 1, QPN, k.rkey, second, &[0xee])
        .unwrap();
    assert_eq!(b.get(4096), 0xee);
    assert_eq!(
        d.write_remote(PD + 1, QPN, k.rkey, IOVA, &[1]),
        Err(MemError::OutOfBounds)
    );
    assert_eq!(d.mr(k.lkey).map(|m| (m.addr, m.len)), Some((second, 4096)));
    assert!(matches!(
        d.reregister(CLIENT, k.lkey, None, Some((0, 0)), None),
        Err(RegError::Invalid(_))
    ));
    assert!(matches!(
        d.reregister(CLIENT, k.lkey, None, None, Some(REMOTE_WRITE)),
        Err(RegError::Invalid(_))
    ));
    assert_eq!(
        d.reregister(CLIENT + 1, k.lkey, None, None, Some(0)),
        Err(RegError::NoClient)
    );
    let mw = d.alloc_mw(CLIENT, PD + 1, MwType::Two).unwrap();
    d.bind_mw(PD + 1, QPN, &bind(mw, k.lkey, second, 8, REMOTE_READ))
        .unwrap();
    assert_eq!(
        d.reregister(CLIENT, k.lkey, None, None, Some(ALL)),
        Err(RegError::WindowsBound)
    );
}
