//! Hostile clients against a live rxud (issue 19, findings 1 and 10): every
//! fd slot of every request that takes fds is given what an attacker
//! would give it (a regular file, an `O_PATH` fd, another process's
//! `/proc/<pid>/mem`, `/proc/self/oom_score_adj`, a socket connected to a
//! listener elsewhere). Each gets a clear error with the errno rxud's
//! `daemon/fdcheck.rs` documents, a refused Hello closes the session, a
//! bystander ping-pong on the same device keeps completing, and rxud's fd
//! count is back to its baseline once the attacker closed.

use std::fs::{File, OpenOptions};
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rxu_abi::proto::cm::CmRequest;
use rxu_abi::proto::{self, fdpass, Request, Response, PROTO_VERSION};
use rxu_testkit::hostile::{rss_kib, settle_fds, steady_fd_count, Bystander};
use rxu_testkit::runtime::scratch_dir;
use rxu_testkit::{seqpacket_pair, serial, Daemon};

/// The largest pause the bystander may see while attacks run.
const GAP: Duration = Duration::from_millis(100);

/// A raw control connection: what a hostile client speaks.
struct Conn(OwnedFd);

impl Conn {
    fn open(d: &Daemon) -> Conn {
        Conn(rxu_testkit::sock::connect(&d.socket()))
    }

    /// Sends `req` with `fds`; the response, or None when the daemon
    /// closed the connection.
    fn call(&self, req: &Request, fds: &[BorrowedFd<'_>]) -> Option<Response> {
        fdpass::send_msg(self.0.as_fd(), &proto::encode(req).unwrap(), fds).ok()?;
        if !fdpass::wait_readable(self.0.as_fd(), Some(Duration::from_secs(10))).ok()? {
            return None;
        }
        let mut buf = vec![0u8; proto::MAX_MSG];
        let (n, _) = fdpass::recv_msg(self.0.as_fd(), &mut buf, 0).ok()?;
        (n > 0).then(|| proto::decode(&buf[..n]).unwrap())
    }

    /// Whether the daemon closed it (reads end of file within 5 s).
    fn closed(&self) -> bool {
        if !matches!(
            fdpass::wait_readable(self.0.as_fd(), Some(Duration::from_secs(5))),
            Ok(true)
        ) {
            return false;
        }
        let mut buf = [0u8; 64];
        matches!(fdpass::recv_msg(self.0.as_fd(), &mut buf, 0), Ok((0, _)))
    }
}

fn hello_req() -> Request {
    Request::Hello {
        version: PROTO_VERSION,
        pid: std::process::id(),
        admin: false,
    }
}

fn errno_of(r: Option<Response>) -> (i32, String) {
    match r {
        Some(Response::Error { errno, msg }) => (errno, msg),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn own_mem(write: bool) -> OwnedFd {
    OpenOptions::new()
        .read(true)
        .write(write)
        .open("/proc/self/mem")
        .unwrap()
        .into()
}

fn eventfd() -> OwnedFd {
    // SAFETY: eventfd takes integer arguments and returns a new fd or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: eventfd just returned this fd; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn o_path(path: &Path) -> OwnedFd {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)
        .unwrap_or_else(|e| panic!("O_PATH {}: {e}", path.display()))
        .into()
}

/// What the attacks need that outlives one attack: a scratch dir with a
/// regular file and a listener, and a child process whose memory is not
/// ours.
struct Arsenal {
    dir: PathBuf,
    file: PathBuf,
    sock: PathBuf,
    _listener: OwnedFd,
    child: Child,
}

impl Arsenal {
    fn new(tag: &str) -> Arsenal {
        let dir = scratch_dir(tag);
        let file = dir.join("plain");
        std::fs::write(&file, [0x5a; 8192]).unwrap();
        let sock = dir.join("elsewhere.sock");
        let listener = rxu_testkit::sock::seqpacket_listener(&sock, false);
        let child = Command::new("sleep")
            .arg("60")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep");
        Arsenal {
            dir,
            file,
            sock,
            _listener: listener,
            child,
        }
    }

    fn regular_file(&self) -> OwnedFd {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.file)
            .unwrap()
            .into()
    }

    fn child_mem(&self) -> OwnedFd {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{}/mem", self.child.id()))
            .unwrap()
            .into()
    }

    fn oom_score_adj(&self) -> OwnedFd {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/self/oom_score_adj")
            .unwrap()
            .into()
    }

    fn connected_elsewhere(&self) -> OwnedFd {
        rxu_testkit::sock::connect(&self.sock)
    }
}

impl Drop for Arsenal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The four attacks every slot gets, besides its own O_PATH variant.
fn common(a: &Arsenal) -> Vec<(&'static str, OwnedFd)> {
    vec![
        ("a regular file", a.regular_file()),
        ("another process's /proc/<pid>/mem", a.child_mem()),
        ("/proc/self/oom_score_adj", a.oom_score_adj()),
        (
            "a socket connected to a listener elsewhere",
            a.connected_elsewhere(),
        ),
    ]
}

/// The errno an event-socket slot answers for attack `what`.
fn socket_errno(what: &str) -> i32 {
    if what.starts_with("a socket") {
        libc::EPERM
    } else {
        libc::EINVAL
    }
}

/// Runs `attack` with a bystander on `d`, then checks the bystander was
/// served throughout and rxud's fds came back.
fn under_watch(d: &Daemon, attack: impl FnOnce()) {
    let by = Bystander::start(&d.name);
    let base = steady_fd_count(d.pid());
    let rss = rss_kib(d.pid());
    attack();
    let after = settle_fds(d.pid(), base, Duration::from_secs(5));
    assert!(
        after <= base,
        "rxud holds {after} fds, {base} before the attack"
    );
    let report = by.finish();
    report.assert_served(GAP);
    eprintln!(
        "bystander: {} round trips, largest gap {:?}; rxud fds {base} -> {after}, RSS {rss} -> {} KiB",
        report.rounds,
        report.max_gap,
        rss_kib(d.pid())
    );
}

#[test]
fn hello_refuses_fds_that_are_not_the_clients_own() {
    let _g = serial();
    let d = Daemon::start("rxuh1", Ipv4Addr::new(127, 0, 15, 2));
    let a = Arsenal::new("hostile-hello");
    under_watch(&d, || {
        // Slot 0, the memory grant.
        let mut attacks = common(&a);
        attacks.push(("O_PATH /proc/self/mem", o_path(Path::new("/proc/self/mem"))));
        attacks.push(("/proc/self/mem read-only", own_mem(false)));
        for (what, fd) in attacks {
            let c = Conn::open(&d);
            let (_, wr) = seqpacket_pair();
            let bell = eventfd();
            let r = c.call(&hello_req(), &[fd.as_fd(), wr.as_fd(), bell.as_fd()]);
            let (errno, msg) = errno_of(r);
            let want = if what.contains("O_PATH") || what.contains("read-only") {
                libc::EBADF
            } else {
                libc::EPERM
            };
            assert_eq!(errno, want, "memory fd = {what}: {msg}");
            assert!(msg.contains("memory fd"), "{what}: {msg}");
            assert!(c.closed(), "memory fd = {what}: the session stayed open");
        }
        // Slot 1, the async event socket.
        let mut attacks = common(&a);
        attacks.push(("O_PATH of a socket file", o_path(&a.sock)));
        for (what, fd) in attacks {
            let c = Conn::open(&d);
            let bell = eventfd();
            let r = c.call(
                &hello_req(),
                &[own_mem(true).as_fd(), fd.as_fd(), bell.as_fd()],
            );
            let (errno, msg) = errno_of(r);
            let want = if what.contains("O_PATH") {
                libc::EBADF
            } else {
                socket_errno(what)
            };
            assert_eq!(errno, want, "async socket = {what}: {msg}");
            assert!(msg.contains("async event socket"), "{what}: {msg}");
            assert!(c.closed(), "async socket = {what}: the session stayed open");
        }
        // Slot 2, the doorbell.
        let bell = eventfd();
        let mut attacks = common(&a);
        let link = PathBuf::from(format!("/proc/self/fd/{}", bell.as_raw_fd()));
        attacks.push(("O_PATH of an eventfd", o_path(&link)));
        for (what, fd) in attacks {
            let c = Conn::open(&d);
            let (_, wr) = seqpacket_pair();
            let r = c.call(
                &hello_req(),
                &[own_mem(true).as_fd(), wr.as_fd(), fd.as_fd()],
            );
            let (errno, msg) = errno_of(r);
            let want = if what.contains("O_PATH") {
                libc::EBADF
            } else {
                libc::EINVAL
            };
            assert_eq!(errno, want, "doorbell = {what}: {msg}");
            assert!(msg.contains("doorbell"), "{what}: {msg}");
            assert!(c.closed(), "doorbell = {what}: the session stayed open");
        }
        // The same connection with its own fds is served.
        let c = Conn::open(&d);
        let (_rd, wr) = seqpacket_pair();
        let bell = eventfd();
        let r = c.call(
            &hello_req(),
            &[own_mem(true).as_fd(), wr.as_fd(), bell.as_fd()],
        );
        assert!(matches!(r, Some(Response::Hello { .. })), "{r:?}");
    });
}

/// A verbs connection that said a proper Hello.
fn ready_conn(d: &Daemon) -> (Conn, OwnedFd) {
    let c = Conn::open(d);
    let (rd, wr) = seqpacket_pair();
    let bell = eventfd();
    let r = c.call(
        &hello_req(),
        &[own_mem(true).as_fd(), wr.as_fd(), bell.as_fd()],
    );
    assert!(matches!(r, Some(Response::Hello { .. })), "{r:?}");
    (c, rd)
}

#[test]
fn requests_after_hello_refuse_foreign_fds() {
    let _g = serial();
    let d = Daemon::start("rxuh2", Ipv4Addr::new(127, 0, 15, 3));
    let a = Arsenal::new("hostile-reqs");
    under_watch(&d, || {
        let (c, _rd) = ready_conn(&d);
        let cq = Request::CreateCq {
            cqe: 16,
            comp_vector: 0,
            user_handle: 1,
            channel: true,
            timestamps: false,
        };
        // CreateCq's completion channel.
        let mut attacks = common(&a);
        attacks.push(("O_PATH of a socket file", o_path(&a.sock)));
        for (what, fd) in attacks {
            let (errno, msg) = errno_of(c.call(&cq, &[fd.as_fd()]));
            let want = if what.contains("O_PATH") {
                libc::EBADF
            } else {
                socket_errno(what)
            };
            assert_eq!(errno, want, "completion channel = {what}: {msg}");
            assert!(msg.contains("completion channel"), "{what}: {msg}");
        }
        // The cmd_fd (BindCmdFd, ImportContext) and an XRC domain's file
        // may be any file the client opened, as on the kernel; an O_PATH
        // fd opens nothing and is refused, as the kernel's fdget does.
        let reqs = [
            ("BindCmdFd", Request::BindCmdFd),
            ("ImportContext", Request::ImportContext),
            (
                "OpenXrcd",
                Request::OpenXrcd {
                    oflags: libc::O_CREAT as u32,
                },
            ),
        ];
        for (name, req) in &reqs {
            let fd = o_path(&a.file);
            let (errno, msg) = errno_of(c.call(req, &[fd.as_fd()]));
            assert_eq!(errno, libc::EBADF, "{name} with an O_PATH fd: {msg}");
            assert!(msg.contains("O_PATH"), "{name}: {msg}");
        }
        // The session is still served: a channel CQ with its own pair.
        let (_crd, cwr) = seqpacket_pair();
        let r = c.call(&cq, &[cwr.as_fd()]);
        assert!(matches!(r, Some(Response::Cq { .. })), "{r:?}");
        // rdma_cm's event channel (AttachChannel on a CmHello connection).
        let cm = Conn::open(&d);
        let r = cm.call(
            &Request::CmHello {
                version: PROTO_VERSION,
                pid: std::process::id(),
            },
            &[],
        );
        assert!(matches!(r, Some(Response::Hello { .. })), "{r:?}");
        let attach = Request::Cm(CmRequest::AttachChannel { channel: 1, tag: 1 });
        let mut attacks = common(&a);
        attacks.push(("O_PATH of a socket file", o_path(&a.sock)));
        for (what, fd) in attacks {
            let (errno, msg) = errno_of(cm.call(&attach, &[fd.as_fd()]));
            let want = if what.contains("O_PATH") {
                libc::EBADF
            } else {
                socket_errno(what)
            };
            assert_eq!(errno, want, "rdma_cm channel = {what}: {msg}");
            assert!(msg.contains("rdma_cm event channel"), "{what}: {msg}");
        }
        let (_ard, awr) = seqpacket_pair();
        let r = cm.call(&attach, &[awr.as_fd()]);
        assert!(matches!(r, Some(Response::Cm(_))), "{r:?}");
    });
}

/// Finding 1 as it was tried: a client hands a plain file of its own as
/// its memory, meaning to register an implicit ODP MR and RDMA-WRITE to
/// va 0 so that root rxud writes into the file. The Hello is refused and
/// the session closed, so nothing can reach the file.
#[test]
fn a_plain_file_as_memory_is_refused_at_hello() {
    let _g = serial();
    let d = Daemon::start("rxuh3", Ipv4Addr::new(127, 0, 15, 4));
    let a = Arsenal::new("hostile-f1");
    let before = std::fs::read(&a.file).unwrap();
    let c = Conn::open(&d);
    let (_rd, wr) = seqpacket_pair();
    let bell = eventfd();
    let file = a.regular_file();
    let r = c.call(&hello_req(), &[file.as_fd(), wr.as_fd(), bell.as_fd()]);
    let (errno, msg) = errno_of(r);
    assert_eq!(errno, libc::EPERM, "{msg}");
    assert!(
        msg.contains("/proc/"),
        "the refusal names what it wanted: {msg}"
    );
    assert!(c.closed(), "the session outlived a refused Hello");
    // A request on the refused connection gets nothing either.
    assert!(c.call(&Request::AllocPd, &[]).is_none());
    drop(c);
    assert_eq!(std::fs::read(&a.file).unwrap(), before, "the file changed");
    let _ = File::open(&a.file).unwrap();
}

/// A file on a FUSE file system whose server never answers, in every fd
/// slot: refused before any syscall touches it (EINVAL, the message
/// naming FUSE). rxud's close of it sends a FLUSH that is never answered;
/// that close runs on rxud's closer thread, whose wait the watchdog ends
/// by aborting the connection (the client's uid owns it), so the FLUSH
/// arrives, the file system ends aborted, and nothing waits on the loop.
#[test]
fn fuse_files_are_refused_in_every_slot_and_never_block_rxud() {
    let _g = serial();
    if !Path::new("/dev/fuse").exists() {
        rxu_testkit::skip("no /dev/fuse: this kernel has no FUSE");
        return;
    }
    let d = Daemon::start("rxuh4", Ipv4Addr::new(127, 0, 15, 5));
    let dir = scratch_dir("hostile-fuse-fds");
    under_watch(&d, || {
        // Each case: (what, the request, where the FUSE fd goes among
        // the fds it carries, whether it is sent on a ready session).
        type Case = (&'static str, Request, usize, bool);
        let cq = Request::CreateCq {
            cqe: 16,
            comp_vector: 0,
            user_handle: 1,
            channel: true,
            timestamps: false,
        };
        let cases: Vec<Case> = vec![
            ("Hello's memory fd", hello_req(), 0, false),
            ("Hello's async socket", hello_req(), 1, false),
            ("Hello's doorbell", hello_req(), 2, false),
            ("CreateCq's channel", cq, 0, true),
            ("BindCmdFd", Request::BindCmdFd, 0, true),
            ("ImportContext", Request::ImportContext, 0, true),
            (
                "OpenXrcd",
                Request::OpenXrcd {
                    oflags: libc::O_CREAT as u32,
                },
                0,
                true,
            ),
        ];
        for (i, (what, req, slot, ready)) in cases.into_iter().enumerate() {
            let fs = rxu_testkit::fuse::StuckFuse::mount(&dir.join(format!("m{i}")))
                .unwrap_or_else(|e| panic!("mount a FUSE file system: {e}"));
            let raw = fs.open().unwrap();
            // SAFETY: the fs keeps `raw` open until it is dropped, after
            // this borrow ends.
            let fuse_fd = unsafe { BorrowedFd::borrow_raw(raw) };
            let (c, _rd) = if ready {
                ready_conn(&d)
            } else {
                (Conn::open(&d), own_mem(true))
            };
            let (_prd, pwr) = seqpacket_pair();
            let bell = eventfd();
            let mem = own_mem(true);
            let mut fds: Vec<BorrowedFd<'_>> = if ready {
                vec![]
            } else {
                vec![mem.as_fd(), pwr.as_fd(), bell.as_fd()]
            };
            if ready {
                fds.push(fuse_fd);
            } else {
                fds[slot] = fuse_fd;
            }
            let (errno, msg) = errno_of(c.call(&req, &fds));
            assert_eq!(errno, libc::EINVAL, "{what}: {msg}");
            assert!(msg.contains("FUSE"), "{what}: {msg}");
            if !ready {
                assert!(c.closed(), "{what}: a refused Hello left the session open");
            }
            // rxud closed its copy (off the loop) and ended that wait.
            let end = std::time::Instant::now() + Duration::from_secs(5);
            while !fs.aborted() && std::time::Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(
                fs.flushes.load(std::sync::atomic::Ordering::Relaxed) > 0,
                "{what}: rxud never closed the file"
            );
            assert!(
                fs.aborted(),
                "{what}: the stuck close was not ended\n{}",
                d.log_text()
            );
        }
        // The rdma_cm event channel.
        let fs = rxu_testkit::fuse::StuckFuse::mount(&dir.join("cm")).unwrap();
        let raw = fs.open().unwrap();
        // SAFETY: as above.
        let fuse_fd = unsafe { BorrowedFd::borrow_raw(raw) };
        let cm = Conn::open(&d);
        let r = cm.call(
            &Request::CmHello {
                version: PROTO_VERSION,
                pid: std::process::id(),
            },
            &[],
        );
        assert!(matches!(r, Some(Response::Hello { .. })), "{r:?}");
        let attach = Request::Cm(CmRequest::AttachChannel { channel: 1, tag: 1 });
        let (errno, msg) = errno_of(cm.call(&attach, &[fuse_fd]));
        assert_eq!(errno, libc::EINVAL, "AttachChannel: {msg}");
        assert!(msg.contains("FUSE"), "AttachChannel: {msg}");
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// A client that floods Hello and close: 2000 sessions opened with their
/// own fds and dropped at once (half before the reply, half after).
/// Each is served or cleaned up; the bystander keeps completing and
/// rxud's fds and RSS come back.
#[test]
fn a_hello_and_close_flood_leaves_nothing_behind() {
    let _g = serial();
    let d = Daemon::start("rxuh5", Ipv4Addr::new(127, 0, 15, 6));
    let rss = rss_kib(d.pid());
    under_watch(&d, || {
        let mem = own_mem(true);
        let t0 = std::time::Instant::now();
        let mut served = 0;
        for i in 0..2000 {
            let c = Conn::open(&d);
            let (_rd, wr) = seqpacket_pair();
            let bell = eventfd();
            let fds = [mem.as_fd(), wr.as_fd(), bell.as_fd()];
            if i % 2 == 0 {
                let bytes = proto::encode(&hello_req()).unwrap();
                fdpass::send_msg(c.0.as_fd(), &bytes, &fds).unwrap();
            } else if matches!(c.call(&hello_req(), &fds), Some(Response::Hello { .. })) {
                served += 1;
            }
        }
        assert_eq!(served, 1000, "every waited-for Hello is answered");
        eprintln!("2000 Hello/close in {:?}", t0.elapsed());
    });
    let after = rss_kib(d.pid());
    assert!(
        after <= rss + 4096,
        "rxud's RSS grew from {rss} to {after} KiB"
    );
}
