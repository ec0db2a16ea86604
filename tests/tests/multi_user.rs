//! A device root brings up serves every user, as the kernel's uverbs nodes
//! (0666) do: an unprivileged user's ibv_rc_pingpong runs over it, but
//! that user cannot stop the daemon; `rxu up --owner-only` keeps other
//! users out with a clear error; a runtime dir another user planted, or a
//! socket another user's process answers, gets nothing from a client.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rxu_abi::proto::fdpass;

use rxu_testkit::tools::Dev;
use rxu_testkit::{bins, serial};

const LIMIT: Duration = Duration::from_secs(60);
const NOBODY: [&str; 3] = ["--reuid=65534", "--regid=65534", "--clear-groups"];

/// A script that runs `prog` as nobody (for Dev::pair, which appends the
/// program's arguments).
fn as_nobody(dev: &Dev, prog: &str) -> String {
    let path = dev.runtime_dir().join(format!("nobody-{prog}"));
    let script = format!(
        "#!/bin/sh\nexec setpriv {} {prog} \"$@\"\n",
        NOBODY.join(" ")
    );
    std::fs::write(&path, script).unwrap();
    let ok = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dev.runtime_dir())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let ok = Command::new("chmod")
        .arg("755")
        .arg(&path)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    path.display().to_string()
}

#[test]
fn other_users_run_verbs_but_cannot_stop_the_daemon() {
    let _g = serial();
    let Some(dev) = Dev::up("rxumu", "127.0.14.1", &["ibv_rc_pingpong", "setpriv"]) else {
        return;
    };
    let pingpong = as_nobody(&dev, "ibv_rc_pingpong");
    let p = dev.pair(&pingpong, 18521, &["-g", "0", "-n", "50", "-c"], LIMIT);
    p.expect_ok();
    assert!(p.client_stdout().contains("50 iters"), "{}", p.report());
    // rxu down as nobody: refused by the daemon, the device stays up.
    let rxu = dev.runtime_dir().join("rxu");
    std::fs::copy(bins::rxu(), &rxu).unwrap();
    let r = dev.run(
        "setpriv",
        &[
            NOBODY[0],
            NOBODY[1],
            NOBODY[2],
            rxu.to_str().unwrap(),
            "down",
            "--name",
            &dev.name,
        ],
        LIMIT,
    );
    assert!(!r.ok(), "nobody stopped the daemon: {}", r.report());
    assert!(
        r.stderr.contains("belong to another user"),
        "{}",
        r.report()
    );
    assert!(dev.status().contains(&dev.name), "{}", dev.status());
    // The daemon's own refusal of another user's Shutdown: rxud's
    // control tests (shutdown_from_another_user_is_refused).
    assert!(dev.status().contains(&dev.name), "{}", dev.status());
}

#[test]
fn owner_only_devices_refuse_other_users() {
    let _g = serial();
    let Some(dev) = Dev::up("rxumv", "127.0.14.2", &["ibv_devinfo", "setpriv"]) else {
        return;
    };
    let out = Command::new(bins::rxu())
        .args([
            "up",
            "--addr",
            "127.0.14.3",
            "--name",
            "rxumw",
            "--owner-only",
        ])
        .env("RXU_RUNTIME_DIR", dev.runtime_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let devinfo = as_nobody(&dev, "ibv_devinfo");
    // The device everyone may use answers; the owner-only one does not.
    let r = dev.run(&devinfo, &["-d", "rxumv"], LIMIT);
    r.expect_ok();
    assert!(r.stdout.contains("PORT_ACTIVE"), "{}", r.report());
    let r = dev.run(&devinfo, &["-d", "rxumw"], LIMIT);
    assert!(!r.ok(), "{}", r.report());
    // Root still uses it.
    let r = dev.run("ibv_devinfo", &["-d", "rxumw"], LIMIT);
    r.expect_ok();
    let down = Command::new(bins::rxu())
        .args(["down", "--name", "rxumw"])
        .env("RXU_RUNTIME_DIR", dev.runtime_dir())
        .status()
        .unwrap();
    assert!(down.success());
}

// --- Planted runtime directories and fake daemons (issue 19 finding 5) ---
//
// Without RXU_RUNTIME_DIR or XDG_RUNTIME_DIR a user's runtime dir is
// /tmp/rxu-<uid>, which any other user may create first. The victim here
// is uid VICTIM running the client library (rxu-peer opens a verbs
// context first thing); the attacker is nobody, listening on the socket
// the victim would connect to and counting what it is sent.

const VICTIM: u32 = 65532;
const ATTACKER: u32 = 65534;

fn victim_dir() -> PathBuf {
    PathBuf::from(format!("/tmp/rxu-{VICTIM}"))
}

/// Removes a path whatever it is (a symlink, a dir, nothing).
fn clear(p: &Path) {
    if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
        let _ = std::fs::remove_dir_all(p);
    } else {
        let _ = std::fs::remove_file(p);
    }
}

/// What a fake daemon was sent.
#[derive(Debug, Default)]
struct Caught {
    connections: usize,
    bytes: usize,
    fds: usize,
}

/// A listener made by `uid` (its SO_PEERCRED is that user's) at `sock`,
/// after running `prepare` with that user's credentials (making a
/// directory, a symlink); accepts and reads until stopped.
struct FakeDaemon {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Caught>>,
}

impl FakeDaemon {
    fn start(uid: u32, sock: PathBuf, prepare: impl FnOnce() + Send + 'static) -> FakeDaemon {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            // Raw syscalls change this thread's credentials only (glibc's
            // wrappers would change every thread's); the thread ends with
            // them.
            // SAFETY: integer arguments only; the results are checked.
            let ok = unsafe {
                libc::syscall(libc::SYS_setresgid, uid, uid, uid) == 0
                    && libc::syscall(libc::SYS_setresuid, uid, uid, uid) == 0
            };
            assert!(ok, "setresuid: {}", std::io::Error::last_os_error());
            prepare();
            let l = rxu_testkit::sock::seqpacket_listener(&sock, true);
            // Open to whoever connects, as an attacker leaves it.
            std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
            tx.send(()).unwrap();
            serve(&l, &flag)
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("fake daemon did not start");
        FakeDaemon {
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Caught {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts and reads (non-blocking, every 5 ms) until `stop`, at most 60 s.
fn serve(l: &OwnedFd, stop: &AtomicBool) -> Caught {
    let mut caught = Caught::default();
    let mut conns: Vec<OwnedFd> = Vec::new();
    let end = Instant::now() + Duration::from_secs(60);
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        // SAFETY: accept4 with null address pointers is allowed.
        let c = unsafe {
            libc::accept4(
                l.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if c >= 0 {
            caught.connections += 1;
            // SAFETY: accept4 returned a new fd that we now own.
            conns.push(unsafe { OwnedFd::from_raw_fd(c) });
        }
        for c in &conns {
            let mut buf = vec![0u8; 1 << 16];
            if let Ok((n, fds)) = fdpass::recv_msg(c.as_fd(), &mut buf, libc::MSG_DONTWAIT) {
                caught.bytes += n;
                caught.fds += fds.len();
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    caught
}

/// Runs the client library as VICTIM with no runtime-dir variables (as
/// cron, `sudo -u` or a container would): it must fail to open rxu0 and
/// say why; its output.
fn victim_opens_device() -> String {
    let dir = rxu_testkit::runtime::scratch_dir("victim-bin");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let peer = dir.join("rxu-peer");
    std::fs::copy(env!("CARGO_BIN_EXE_rxu-peer"), &peer).unwrap();
    std::fs::set_permissions(&peer, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={VICTIM}"),
            &format!("--regid={VICTIM}"),
            "--clear-groups",
        ])
        .arg(&peer)
        .args([
            "--device",
            "rxu0",
            "--role",
            "server",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--timeout", "5"])
        .env_remove("RXU_RUNTIME_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .current_dir("/")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !out.status.success(),
        "the victim's client went ahead: {text}"
    );
    assert!(text.contains("RESULT fail"), "{text}");
    assert!(text.contains("open device"), "{text}");
    text
}

fn needs_root_and_setpriv() -> bool {
    if !rxu_testkit::is_root() || !rxu_testkit::have("setpriv") {
        rxu_testkit::skip("needs root and setpriv");
        return false;
    }
    true
}

#[test]
fn a_runtime_dir_another_user_made_is_refused() {
    let _g = serial();
    if !needs_root_and_setpriv() {
        return;
    }
    let dir = victim_dir();
    clear(&dir);
    let d = dir.clone();
    let fake = FakeDaemon::start(ATTACKER, dir.join("rxu0.sock"), move || {
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    });
    let text = victim_opens_device();
    let caught = fake.finish();
    clear(&dir);
    assert_eq!(caught.fds, 0, "the fake daemon was sent fds: {caught:?}");
    assert_eq!(caught.connections, 0, "{caught:?}");
    assert!(
        text.contains(&format!("{} is owned by uid {ATTACKER}", dir.display())),
        "{text}"
    );
}

#[test]
fn a_symlinked_or_open_runtime_dir_is_refused() {
    let _g = serial();
    if !needs_root_and_setpriv() {
        return;
    }
    let dir = victim_dir();
    // A symbolic link the attacker made to a dir of its own.
    clear(&dir);
    let own = PathBuf::from(format!("/tmp/rxu-attacker-{}", std::process::id()));
    clear(&own);
    let (d, o) = (dir.clone(), own.clone());
    let fake = FakeDaemon::start(ATTACKER, own.join("rxu0.sock"), move || {
        std::fs::create_dir(&o).unwrap();
        std::fs::set_permissions(&o, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&o, &d).unwrap();
    });
    let text = victim_opens_device();
    let caught = fake.finish();
    clear(&dir);
    clear(&own);
    assert_eq!((caught.connections, caught.fds), (0, 0), "{caught:?}");
    assert!(text.contains("is a symbolic link"), "{text}");
    // The victim's own dir, but writable by everyone: the attacker put
    // its socket there.
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(VICTIM), Some(VICTIM)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let fake = FakeDaemon::start(ATTACKER, dir.join("rxu0.sock"), || {});
    let text = victim_opens_device();
    let caught = fake.finish();
    clear(&dir);
    assert_eq!((caught.connections, caught.fds), (0, 0), "{caught:?}");
    assert!(text.contains("is writable by others (mode 777)"), "{text}");
}

#[test]
fn a_fake_daemon_in_a_sound_dir_gets_nothing() {
    let _g = serial();
    if !needs_root_and_setpriv() {
        return;
    }
    // The victim's dir is sound (its own, 0700), but the socket in it is
    // another user's listener (moved there: the attacker could not have
    // created it, a stale path or a shared RXU_RUNTIME_DIR could).
    let dir = victim_dir();
    clear(&dir);
    let own = PathBuf::from(format!("/tmp/rxu-attacker-{}", std::process::id()));
    clear(&own);
    let o = own.clone();
    let fake = FakeDaemon::start(ATTACKER, own.join("fake.sock"), move || {
        std::fs::create_dir(&o).unwrap();
        std::fs::set_permissions(&o, std::fs::Permissions::from_mode(0o755)).unwrap();
    });
    std::fs::create_dir(&dir).unwrap();
    std::fs::rename(own.join("fake.sock"), dir.join("rxu0.sock")).unwrap();
    std::os::unix::fs::chown(&dir, Some(VICTIM), Some(VICTIM)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let text = victim_opens_device();
    let caught = fake.finish();
    clear(&dir);
    clear(&own);
    // It connected (that is how it learnt who answers) and sent nothing.
    assert_eq!((caught.bytes, caught.fds), (0, 0), "{caught:?}");
    assert!(
        text.contains(&format!("served by a process of uid {ATTACKER}")),
        "{text}"
    );
    assert!(text.contains("nothing sent"), "{text}");
}

/// `rxu status` and `rxu stats` as another user show only that user's
/// clients and QPs: nobody does not learn root's pids, QPNs or peers
/// from the daemon (root still sees everything).
#[test]
fn other_users_see_only_their_own_clients_in_status_and_stats() {
    let _g = serial();
    let Some(dev) = Dev::up("rxumw", "127.0.14.3", &["ibv_rc_pingpong", "setpriv"]) else {
        return;
    };
    // Root's server waits for a client that never comes, holding a QP.
    let mut server = dev.start("ibv_rc_pingpong", &["-g", "0", "-p", "18523"]);
    let end = Instant::now() + Duration::from_secs(20);
    let pid = server.id().to_string();
    while !dev.status().contains(&pid) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    let as_root = dev.status();
    assert!(as_root.contains(&pid), "root sees the server: {as_root}");
    let rxu = dev.runtime_dir().join("rxu");
    std::fs::copy(bins::rxu(), &rxu).unwrap();
    as_nobody(&dev, "true");
    let rxu = rxu.to_str().unwrap();
    let status = dev.run(
        "setpriv",
        &[NOBODY[0], NOBODY[1], NOBODY[2], rxu, "status"],
        LIMIT,
    );
    let stats = dev.run(
        "setpriv",
        &[
            NOBODY[0], NOBODY[1], NOBODY[2], rxu, "stats", "--name", &dev.name,
        ],
        LIMIT,
    );
    let root_stats = dev.stats();
    let _ = server.kill();
    let _ = server.wait();
    assert!(status.ok(), "{}", status.report());
    assert!(stats.ok(), "{}", stats.report());
    assert!(status.stdout.contains(&dev.name), "{}", status.report());
    assert!(
        !status.stdout.contains(&pid),
        "nobody sees root's pid {pid}: {}",
        status.report()
    );
    // Root's QP has per-QP counters in root's view; none in nobody's.
    let qp_lines = |s: &str| {
        s.lines()
            .filter(|l| l.trim_start().starts_with("qp "))
            .count()
    };
    assert!(qp_lines(&root_stats) >= 1, "root sees the QP: {root_stats}");
    assert_eq!(
        qp_lines(&stats.stdout),
        0,
        "nobody sees root's QPs: {}",
        stats.report()
    );
}
