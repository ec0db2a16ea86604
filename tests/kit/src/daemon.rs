//! An `rxud` started directly, as `rxu up` would start it but without the
//! device node (no root needed). Its output goes to a log file that
//! outlives a failed test only; it is shut down (forced) and reaped on
//! drop, killed if it does not go within 5 s.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rxu_abi::proto::Request;
use rxu_client::{Context, DeviceStats, DeviceStatus};

use crate::{bins, runtime, sock};

/// How long a daemon may take to answer after it was started.
const START_LIMIT: Duration = Duration::from_secs(20);

/// A running daemon.
pub struct Daemon {
    pub name: String,
    pub addr: IpAddr,
    dir: PathBuf,
    /// The runtime directory is this daemon's alone: removed on drop.
    own_dir: bool,
    child: Child,
    log: PathBuf,
    /// The log is a file made for it (not one given with `log_to`).
    own_log: bool,
}

/// What [`Daemon::spawn`] starts: extra arguments, another runtime
/// directory.
pub struct Spawn {
    name: String,
    addr: IpAddr,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    dir: Option<PathBuf>,
    log: Option<PathBuf>,
}

impl Spawn {
    /// Its stdout and stderr go to `path` (opened for appending; e.g.
    /// `/dev/full`) instead of a fresh log file in the runtime directory.
    pub fn log_to(mut self, path: impl Into<PathBuf>) -> Spawn {
        self.log = Some(path.into());
        self
    }

    /// Extra `rxud` arguments (`--port`, `--mtu`, ...).
    pub fn args(mut self, args: &[&str]) -> Spawn {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// An environment variable for it (`RXU_FORCE_UDP`, ...).
    pub fn env(mut self, key: &str, value: &str) -> Spawn {
        self.envs.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Serves from `dir` (which must exist) instead of this process's
    /// runtime directory; `dir` is removed when the daemon drops. The
    /// client library cannot reach such a daemon: talk to
    /// [`Daemon::socket`] directly.
    pub fn own_dir(mut self, dir: PathBuf) -> Spawn {
        self.dir = Some(dir);
        self
    }

    /// Starts it and waits until it answers an admin `Hello` (panics with
    /// its log when it exits or does not answer in time).
    pub fn start(self) -> Daemon {
        let own_dir = self.dir.is_some();
        let dir = self.dir.unwrap_or_else(|| runtime::runtime_dir().clone());
        let own_log = self.log.is_none();
        let (log, out) = match self.log {
            Some(p) => {
                let f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&p)
                    .unwrap_or_else(|e| panic!("opening {}: {e}", p.display()));
                (p, f)
            }
            None => {
                let p = dir.join(format!("{}.test.log", self.name));
                let f = std::fs::File::create(&p)
                    .unwrap_or_else(|e| panic!("creating {}: {e}", p.display()));
                (p, f)
            }
        };
        let child = Command::new(bins::rxud())
            .args(["--name", &self.name, "--addr", &self.addr.to_string()])
            .args(&self.args)
            .env("RXU_RUNTIME_DIR", &dir)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup the log fd"))
            .stderr(out)
            .spawn()
            .expect("spawn rxud");
        let mut d = Daemon {
            name: self.name,
            addr: self.addr,
            dir,
            own_dir,
            child,
            log,
            own_log,
        };
        d.wait_ready();
        d
    }
}

impl Daemon {
    /// `rxud --name <name> --addr <addr>` in this process's runtime
    /// directory, answering.
    pub fn start(name: &str, addr: impl Into<IpAddr>) -> Daemon {
        Daemon::spawn(name, addr).start()
    }

    /// A daemon to start with more settings (see [`Spawn`]).
    pub fn spawn(name: &str, addr: impl Into<IpAddr>) -> Spawn {
        Spawn {
            name: name.to_owned(),
            addr: addr.into(),
            args: Vec::new(),
            envs: Vec::new(),
            dir: None,
            log: None,
        }
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_LIMIT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "rxud {} exited with {status}:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            if sock::admin(&self.socket()).is_some() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "rxud {} did not come up:\n{}",
                self.name,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its runtime directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its control socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join(format!("{}.sock", self.name))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it printed so far (the first 4 MiB: the log may be a device
    /// such as /dev/full that reads without end).
    pub fn log_text(&self) -> String {
        use std::io::Read;
        let mut text = Vec::new();
        if let Ok(f) = std::fs::File::open(&self.log) {
            let _ = f.take(4 << 20).read_to_end(&mut text);
        }
        String::from_utf8_lossy(&text).into_owned()
    }

    /// A verbs context on it, through the client library.
    pub fn open(&self) -> Context {
        Context::open(&self.name).unwrap_or_else(|e| panic!("open: {e}\n{}", self.log_text()))
    }

    /// Sends `sig` to it.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) has no memory preconditions; the pid is our own
        // child's, not yet reaped by anyone but us.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// Kills it outright (SIGKILL: it says nothing) and reaps it.
    pub fn kill(&mut self) {
        self.child.kill().expect("kill rxud");
        self.child.wait().expect("reap rxud");
    }

    /// Waits (at most 20 s) for it to exit; its exit code, None when it
    /// did not exit in time or died of a signal.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let end = Instant::now() + Duration::from_secs(20);
        while Instant::now() < end {
            if let Some(st) = self.child.try_wait().expect("waitpid rxud") {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Whether the process is still running (not a zombie) and answers on
    /// its socket.
    pub fn alive(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()));
        // The state follows the parenthesised command name.
        let running = stat.is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        });
        running && sock::admin(&self.socket()).is_some()
    }

    /// Open fds and memory mappings of the process (resources a client's
    /// rings, doorbells and memory grant take).
    pub fn fds_and_maps(&self) -> (usize, usize) {
        let pid = self.child.id();
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
        let maps =
            std::fs::read_to_string(format!("/proc/{pid}/maps")).map_or(0, |m| m.lines().count());
        (fds, maps)
    }

    /// Status, through the client library's admin connection.
    pub fn status(&self) -> DeviceStatus {
        Context::open_admin(&self.name)
            .and_then(|c| c.status())
            .unwrap_or_else(|e| panic!("{}: Status: {e}\n{}", self.name, self.log_text()))
    }

    /// Counters, through the client library's admin connection.
    pub fn stats(&self) -> DeviceStats {
        Context::open_admin(&self.name)
            .and_then(|c| c.stats())
            .unwrap_or_else(|e| panic!("{}: Stats: {e}\n{}", self.name, self.log_text()))
    }

    /// A device-wide counter.
    pub fn counter(&self, name: &str) -> u64 {
        counter(&self.stats(), name)
    }

    /// `rxu <args>` with this daemon's runtime directory; its stdout.
    /// Panics with its stderr unless it succeeds.
    pub fn rxu(&self, args: &[&str]) -> String {
        let out = Command::new(bins::rxu())
            .args(args)
            .env("RXU_RUNTIME_DIR", &self.dir)
            .output()
            .expect("run rxu");
        assert!(
            out.status.success(),
            "rxu {}: {}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(admin) = sock::admin(&self.socket()) {
            let _ = sock::exchange(&admin, &Request::Shutdown { force: true });
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut gone = false;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                gone = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if !gone {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // The log (and an own directory) outlive a failed test only.
        if !std::thread::panicking() {
            if self.own_dir {
                let _ = std::fs::remove_dir_all(&self.dir);
            } else if self.own_log {
                let _ = std::fs::remove_file(&self.log);
            }
        }
    }
}

/// The value of device-wide counter `name`; panics when there is none.
pub fn counter(s: &DeviceStats, name: &str) -> u64 {
    s.device
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no device counter {name}"))
        .value
}
