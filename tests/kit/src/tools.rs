//! Running unmodified verbs programs (rdma-core's tools, perftest, small C
//! programs) against an rxu device brought up with `rxu up` and the
//! provider loaded through RDMAV_DRIVERS.
//!
//! Every device gets its own runtime directory, every program run is
//! bounded by a timeout (killed after it), and a failing run prints the
//! programs' output. [`Dev::up`] and [`compile_c`] skip (see
//! [`crate::skip`]) when the machine cannot run them: not root (`rxu up`
//! creates /dev/infiniband/uverbsN), a tool or the verbs headers not
//! installed.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::runtime::scratch_dir;
use crate::{bins, have, is_root, skip};

/// A device that is up, with the environment a verbs program needs.
pub struct Dev {
    pub name: String,
    pub addr: String,
    rt: PathBuf,
    rxu: PathBuf,
    pub env: HashMap<String, String>,
    /// The runtime dir is this device's own (removed on drop); false for
    /// a device brought up beside another ([`Dev::up_beside`]).
    owns_rt: bool,
}

impl Dev {
    /// Brings up `name` on `addr`; None (after [`skip`]) when the test
    /// cannot run here. `tools` must be installed.
    pub fn up(name: &str, addr: &str, tools: &[&str]) -> Option<Dev> {
        if !is_root() {
            skip("needs root (rxu up creates /dev/infiniband/uverbsN)");
            return None;
        }
        if let Some(t) = tools.iter().find(|t| !have(t)) {
            skip(&format!("{t} is not installed (scripts/install-deps)"));
            return None;
        }
        let rt = scratch_dir(&format!("verbs-{name}"));
        // A private copy: a rebuild must not swap the file under a program.
        bins::install_provider(&rt).unwrap();
        let rxu = bins::rxu();
        let out = Command::new(&rxu)
            .args(["up", "--addr", addr, "--name", name])
            .env("RXU_RUNTIME_DIR", &rt)
            .output()
            .expect("run rxu up");
        assert!(
            out.status.success(),
            "rxu up --addr {addr} --name {name}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let mut env = HashMap::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((k, v)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) {
                env.insert(k.to_owned(), v.trim_matches('\'').to_owned());
            }
        }
        assert!(env.contains_key("SYSFS_PATH"), "rxu up printed {env:?}");
        env.insert("RXU_RUNTIME_DIR".into(), rt.display().to_string());
        env.insert(
            "RDMAV_DRIVERS".into(),
            rt.join("librxu").display().to_string(),
        );
        // rdma_cm programs: the ucma emulator, a private copy as well.
        let ucma = rt.join("librxu-ucma.so");
        std::fs::copy(bins::ucma_lib(), &ucma).unwrap();
        env.insert("LD_PRELOAD".into(), ucma.display().to_string());
        Some(Dev {
            name: name.to_owned(),
            addr: addr.to_owned(),
            rt,
            rxu,
            env,
            owns_rt: true,
        })
    }

    /// A second device in this one's runtime dir and device tree, so one
    /// program sees both (same environment). Drop it before this one.
    pub fn up_beside(&self, name: &str, addr: &str) -> Dev {
        let out = Command::new(&self.rxu)
            .args(["up", "--addr", addr, "--name", name])
            .env("RXU_RUNTIME_DIR", &self.rt)
            .output()
            .expect("run rxu up");
        assert!(
            out.status.success(),
            "rxu up --addr {addr} --name {name}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        Dev {
            name: name.to_owned(),
            addr: addr.to_owned(),
            rt: self.rt.clone(),
            rxu: self.rxu.clone(),
            env: self.env.clone(),
            owns_rt: false,
        }
    }

    /// A command with the device's environment.
    pub fn cmd(&self, prog: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new(prog);
        c.envs(&self.env);
        c
    }

    pub fn runtime_dir(&self) -> &Path {
        &self.rt
    }

    /// Runs one program to completion (at most `limit`).
    pub fn run(&self, prog: &str, args: &[&str], limit: Duration) -> Run {
        let mut c = self.cmd(prog);
        c.args(args);
        Run::finish(spawn(c), limit, format!("{prog} {}", args.join(" ")))
    }

    /// Like [`Dev::run`], with environment changes: `Some(v)` sets a
    /// variable, `None` removes it (e.g. LD_PRELOAD).
    pub fn run_env(
        &self,
        prog: &str,
        args: &[&str],
        env: &[(&str, Option<&str>)],
        limit: Duration,
    ) -> Run {
        let mut c = self.cmd(prog);
        c.args(args);
        for (k, v) in env {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        Run::finish(
            spawn(c),
            limit,
            format!("{prog} {} ({env:?})", args.join(" ")),
        )
    }

    /// A server and a client of the same program: the server first, the
    /// client (with `127.0.0.1` appended) once the server listens on `port`.
    pub fn pair(&self, prog: &str, port: u16, args: &[&str], limit: Duration) -> Pair {
        let port_s = port.to_string();
        let mut full: Vec<&str> = vec!["-d", &self.name, "-p", &port_s];
        full.extend_from_slice(args);
        let mut s = self.cmd(prog);
        s.args(&full);
        let server = spawn(s);
        let listening = wait_listen(port, Duration::from_secs(10));
        let mut c = self.cmd(prog);
        c.args(&full).arg("127.0.0.1");
        let client = listening.then(|| spawn(c));
        let what = format!("{prog} {}", full.join(" "));
        let client = client.map(|c| Run::finish(c, limit, format!("client: {what} 127.0.0.1")));
        let server = Run::finish(server, limit, format!("server: {what}"));
        Pair {
            server,
            client,
            listening,
        }
    }

    /// A server on this device and a client on `client` (another device,
    /// so every packet crosses UDP between two daemons); the client
    /// connects to the server's TCP port on 127.0.0.1.
    pub fn pair_across(
        &self,
        client: &Dev,
        prog: &str,
        port: u16,
        args: &[&str],
        limit: Duration,
    ) -> Pair {
        let port_s = port.to_string();
        let side = |dev: &Dev| {
            let mut v: Vec<String> = vec!["-d".into(), dev.name.clone(), "-p".into()];
            v.push(port_s.clone());
            v.extend(args.iter().map(|a| a.to_string()));
            v
        };
        let (sargs, cargs) = (side(self), side(client));
        let mut s = self.cmd(prog);
        s.args(&sargs);
        let server = spawn(s);
        let listening = wait_listen(port, Duration::from_secs(10));
        let mut c = client.cmd(prog);
        c.args(&cargs).arg("127.0.0.1");
        let client = listening.then(|| spawn(c));
        let (sw, cw) = (sargs.join(" "), cargs.join(" "));
        let client =
            client.map(|c| Run::finish(c, limit, format!("client: {prog} {cw} 127.0.0.1")));
        let server = Run::finish(server, limit, format!("server: {prog} {sw}"));
        Pair {
            server,
            client,
            listening,
        }
    }

    /// An rdma_cm server on this device and its client on `client` (this
    /// device again, or another): the client starts once `rxu status`
    /// shows an rdma_cm id listening on `port` here.
    pub fn cm_pair(
        &self,
        client: &Dev,
        prog: &str,
        server_args: &[&str],
        client_args: &[&str],
        port: u16,
        limit: Duration,
    ) -> Pair {
        self.cm_pair_programs(
            client,
            (prog, server_args),
            (prog, client_args),
            port,
            limit,
        )
    }

    /// Like [`Dev::cm_pair`] with different server and client programs.
    pub fn cm_pair_programs(
        &self,
        client: &Dev,
        server_prog: (&str, &[&str]),
        client_prog: (&str, &[&str]),
        port: u16,
        limit: Duration,
    ) -> Pair {
        let mut s = self.cmd(server_prog.0);
        s.args(server_prog.1);
        let server = spawn(s);
        let listening = self.wait_cm_listen(port, Duration::from_secs(10));
        let mut c = client.cmd(client_prog.0);
        c.args(client_prog.1);
        let client = listening.then(|| spawn(c)).map(|c| {
            let what = format!("client: {} {}", client_prog.0, client_prog.1.join(" "));
            Run::finish(c, limit, what)
        });
        let what = format!("server: {} {}", server_prog.0, server_prog.1.join(" "));
        let server = Run::finish(server, limit, what);
        Pair {
            server,
            client,
            listening,
        }
    }

    /// Waits (at most `limit`) until an rdma_cm id listens on `port` of
    /// this device.
    pub fn wait_cm_listen(&self, port: u16, limit: Duration) -> bool {
        let want = format!(":{port}");
        let end = Instant::now() + limit;
        while Instant::now() < end {
            if self
                .status()
                .lines()
                .any(|l| l.contains(" listen ") && l.trim_end().ends_with(&want))
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// `rxu status` of this device.
    pub fn status(&self) -> String {
        let out = Command::new(&self.rxu)
            .arg("status")
            .env("RXU_RUNTIME_DIR", &self.rt)
            .output()
            .expect("run rxu status");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts a program with the device's environment; its output is
    /// collected by [`Run::wait`].
    pub fn start(&self, prog: &str, args: &[&str]) -> Child {
        let mut c = self.cmd(prog);
        c.args(args);
        spawn(c)
    }

    /// Daemon counters (`rxu stats`).
    pub fn stats(&self) -> String {
        let out = Command::new(&self.rxu)
            .args(["stats", "--name", &self.name])
            .env("RXU_RUNTIME_DIR", &self.rt)
            .output()
            .expect("run rxu stats");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = Command::new(&self.rxu)
            .args(["down", "--name", &self.name, "--force"])
            .env("RXU_RUNTIME_DIR", &self.rt)
            .output();
        if self.owns_rt {
            let _ = std::fs::remove_dir_all(&self.rt);
        }
    }
}

fn spawn(mut c: Command) -> Child {
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn a verbs program")
}

/// Whether something listens on TCP `port` (read from /proc/net/tcp*, so
/// the one-connection servers are not disturbed).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && format!("{} ", cols[1]).ends_with(&want) && cols[3] == "0A"
            })
        })
    })
}

pub fn wait_listen(port: u16, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if listening(port) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A finished (or killed) program run.
pub struct Run {
    pub what: String,
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn finish(mut child: Child, limit: Duration, what: String) -> Run {
        // Drain the pipes in threads so a chatty program never blocks.
        let mut so = child.stdout.take().expect("stdout");
        let mut se = child.stderr.take().expect("stderr");
        let to = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = so.read_to_string(&mut s);
            s
        });
        let te = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = se.read_to_string(&mut s);
            s
        });
        let end = Instant::now() + limit;
        let mut timed_out = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break Some(st),
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(10)),
                _ => {
                    timed_out = true;
                    let _ = child.kill();
                    break child.wait().ok();
                }
            }
        };
        Run {
            what,
            status,
            timed_out,
            stdout: to.join().unwrap_or_default(),
            stderr: te.join().unwrap_or_default(),
        }
    }

    /// Waits (at most `limit`) for a program from [`Dev::start`].
    pub fn wait(child: Child, limit: Duration, what: &str) -> Run {
        Run::finish(child, limit, what.to_owned())
    }

    pub fn ok(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }

    pub fn report(&self) -> String {
        format!(
            "--- {} ({}):\n{}{}",
            self.what,
            if self.timed_out {
                "killed after its time limit".to_owned()
            } else {
                format!("{:?}", self.status)
            },
            self.stdout,
            self.stderr
        )
    }

    /// Panics with the output unless the program succeeded.
    pub fn expect_ok(&self) -> &Self {
        assert!(self.ok(), "{}", self.report());
        self
    }
}

/// Both sides of a client/server program.
pub struct Pair {
    pub server: Run,
    pub client: Option<Run>,
    pub listening: bool,
}

impl Pair {
    pub fn ok(&self) -> bool {
        self.listening && self.server.ok() && self.client.as_ref().is_some_and(Run::ok)
    }

    pub fn report(&self) -> String {
        let mut s = String::new();
        if !self.listening {
            s += "the server never listened\n";
        }
        s += &self.server.report();
        if let Some(c) = &self.client {
            s += &c.report();
        }
        s
    }

    /// Panics with both outputs unless both sides succeeded.
    pub fn expect_ok(&self) -> &Self {
        assert!(self.ok(), "{}", self.report());
        self
    }

    pub fn client_stdout(&self) -> &str {
        self.client.as_ref().map_or("", |c| c.stdout.as_str())
    }
}

/// Compiles `tests/c/<name>.c` against libibverbs into `out_dir`; None
/// (after [`skip`]) without a C compiler or the verbs headers.
pub fn compile_c(name: &str, out_dir: &Path) -> Option<PathBuf> {
    compile_c_with(name, out_dir, &[])
}

/// Like [`compile_c`], linked against `libs` (e.g. "rdmacm") too; skips
/// when a library's headers are missing.
pub fn compile_c_with(name: &str, out_dir: &Path, libs: &[&str]) -> Option<PathBuf> {
    let headers = [("ibverbs", "infiniband/verbs.h", "libibverbs-dev")];
    let extra = [("rdmacm", "rdma/rdma_cma.h", "librdmacm-dev")];
    for (lib, header, pkg) in headers
        .iter()
        .chain(extra.iter().filter(|(l, ..)| libs.contains(l)))
    {
        if !Path::new("/usr/include").join(header).exists() {
            skip(&format!("{header} not installed ({pkg}, for -l{lib})"));
            return None;
        }
    }
    // tests/c beside this crate (tests/kit).
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../c")
        .join(format!("{name}.c"));
    let exe = out_dir.join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = match Command::new(&cc)
        .args(["-Wall", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(libs.iter().map(|l| format!("-l{l}")))
        .arg("-libverbs")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            skip(&format!("no C compiler ({cc}: {e})"));
            return None;
        }
    };
    assert!(
        out.status.success(),
        "{} did not compile:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}
