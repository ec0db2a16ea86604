//! Issue 19 finding 2: one client must not freeze every client by making
//! rxud's single loop thread wait on it. The attack: memory backed by a
//! FUSE file whose server never answers (`rxu_testkit::fuse::StuckFuse`),
//! which blocks any pread/pwrite of it in the kernel. rxud's watchdog
//! (`daemon/watchdog.rs`) sees the syscall pass its 40 ms deadline, aborts
//! the client's own FUSE connection (which ends the wait) and the loop
//! closes that client's session. A bystander ping-pong on the same device
//! keeps completing at least every 100 ms throughout, and rxud's fds and
//! RSS come back once the attacker is gone. (A FUSE file passed as an fd
//! is refused before any syscall touches it: `hostile_fds`.)

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use rxu_client::*;
use rxu_testkit::fuse::StuckFuse;
use rxu_testkit::hostile::{rss_kib, settle_fds, steady_fd_count, Bystander};
use rxu_testkit::runtime::scratch_dir;
use rxu_testkit::verbs::{Pair, ALL_ACCESS};
use rxu_testkit::{serial, skip, Daemon};

const GAP: Duration = Duration::from_millis(100);
const LEN: usize = 64 * 1024;

fn stuck_fs(tag: &str) -> Option<StuckFuse> {
    if !std::path::Path::new("/dev/fuse").exists() {
        skip::skip("no /dev/fuse: this kernel has no FUSE");
        return None;
    }
    match StuckFuse::mount(&scratch_dir(tag).join("mnt")) {
        Ok(fs) => Some(fs),
        Err(e) => {
            skip::skip(&format!("cannot mount a FUSE file system here: {e}"));
            None
        }
    }
}

/// Anonymous memory of `len` bytes (unmapped when the test process ends).
fn anon(len: usize) -> *mut u8 {
    // SAFETY: a fresh private anonymous mapping; no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "mmap");
    p.cast()
}

/// Runs `attack` on `d` with a bystander, then checks it was served and
/// that rxud's fds and RSS came back.
fn under_watch(d: &Daemon, attack: impl FnOnce()) {
    let by = Bystander::start(&d.name);
    let base = steady_fd_count(d.pid());
    let rss = rss_kib(d.pid());
    attack();
    let after = settle_fds(d.pid(), base, Duration::from_secs(5));
    let report = by.finish();
    let rss_after = rss_kib(d.pid());
    eprintln!(
        "bystander: {} round trips, largest gap {:?}; rxud fds {base} -> {after}, RSS {rss} -> {rss_after} KiB",
        report.rounds, report.max_gap
    );
    report.assert_served(GAP);
    assert!(after <= base, "rxud holds {after} fds, {base} before");
    assert!(
        rss_after <= rss + 8 * 1024,
        "rxud's RSS grew from {rss} to {rss_after} KiB"
    );
}

/// Waits (bounded) until the context's session is closed by rxud.
fn failed_within(ctx: &Context, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if ctx.is_dead() || ctx.query_port(1).is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Waits (bounded) for the stuck file system's connection to end.
fn aborted_within(fs: &StuckFuse) -> bool {
    let end = Instant::now() + Duration::from_secs(2);
    while !fs.aborted() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(2));
    }
    fs.aborted()
}

/// Registering memory mapped from the stuck file: rxud's registration
/// check reads it and would wait forever.
#[test]
fn registering_fuse_memory_fails_the_client_and_no_one_else() {
    let _g = serial();
    let Some(fs) = stuck_fs("fuse-reg") else {
        return;
    };
    let d = Daemon::start("rxuf1", Ipv4Addr::new(127, 0, 15, 21));
    under_watch(&d, || {
        let ctx = Context::open(&d.name).unwrap();
        let pd = Pd::alloc(&ctx).unwrap();
        let p = fs.map(None, LEN).unwrap();
        let t0 = Instant::now();
        // SAFETY: the range is our own live mapping, never touched through
        // references.
        let r = unsafe { reg_mr(&pd, p, LEN, ALL_ACCESS) };
        let took = t0.elapsed();
        eprintln!("reg_mr over FUSE memory: {r:?} after {took:?}");
        assert!(r.is_err(), "registration over stuck memory succeeded");
        assert!(took < Duration::from_secs(2), "reg_mr took {took:?}");
        assert!(fs.reads.load(std::sync::atomic::Ordering::Relaxed) > 0);
        assert!(
            aborted_within(&fs),
            "rxud did not abort the FUSE connection"
        );
        assert!(failed_within(&ctx, Duration::from_secs(5)), "session kept");
        drop(pd);
        drop(ctx);
    });
    let log = d.log_text();
    assert!(
        log.contains("aborted its FUSE connection"),
        "rxud's log does not say what it did:\n{log}"
    );
}

/// Registering ordinary memory, then mapping the stuck file over it:
/// the registration check passed, and the first RDMA WRITE into the
/// region makes rxud's pwrite wait.
#[test]
fn fuse_memory_mapped_under_a_registered_region_fails_the_client() {
    let _g = serial();
    let Some(fs) = stuck_fs("fuse-remap") else {
        return;
    };
    let d = Daemon::start("rxuf2", Ipv4Addr::new(127, 0, 15, 22));
    under_watch(&d, || {
        let ctx = Context::open(&d.name).unwrap();
        let pair = Pair::new(&ctx, QpType::Rc);
        let src = anon(4096);
        let dst = anon(LEN);
        // SAFETY: our own live mappings, touched only through raw
        // pointers.
        let (smr, dmr) = unsafe {
            (
                reg_mr(&pair.pd, src, 4096, ALL_ACCESS).unwrap(),
                reg_mr(&pair.pd, dst, LEN, ALL_ACCESS).unwrap(),
            )
        };
        fs.map(Some(dst), LEN).unwrap();
        let sge = [Sge {
            addr: src as u64,
            length: 4096,
            lkey: smr.lkey(),
        }];
        let t0 = Instant::now();
        pair.a
            .post_send(&[SendWr::write(1, &sge, dst as u64, dmr.rkey()).signaled()])
            .unwrap();
        assert!(
            failed_within(&ctx, Duration::from_secs(5)),
            "the session outlived a write that blocked rxud"
        );
        eprintln!("session failed after {:?}", t0.elapsed());
        assert!(fs.reads.load(std::sync::atomic::Ordering::Relaxed) > 0);
        assert!(
            aborted_within(&fs),
            "rxud did not abort the FUSE connection"
        );
        drop((smr, dmr, pair, ctx));
    });
}
