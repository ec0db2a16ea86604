//! Test harness for the client library: one `rxud` per test on its own
//! loopback address, all sharing one runtime directory (the client finds
//! sockets through `RXU_RUNTIME_DIR`, which is process-wide).

#![allow(dead_code)]

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rxu_client::*;

/// The `rxud` binary, if this build has one.
pub fn rxud() -> Option<&'static str> {
    option_env!("CARGO_BIN_EXE_rxud")
}

/// The runtime directory of this test process, set once before any
/// daemon starts or client connects.
pub fn runtime_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("rxu-client-api-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::env::set_var("RXU_RUNTIME_DIR", &d);
        d
    })
}

/// A running daemon, shut down and reaped on drop.
pub struct Daemon {
    pub name: String,
    pub addr: Ipv4Addr,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    /// Starts `rxud` as device `name` on `addr`; None (after a note on
    /// stderr) when this build has no daemon.
    pub fn start(name: &str, addr: Ipv4Addr) -> Option<Daemon> {
        let Some(bin) = rxud() else {
            eprintln!("skipped: no rxud binary in this build");
            return None;
        };
        let dir = runtime_dir();
        let log = dir.join(format!("{name}.test.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .args(["--name", name, "--addr", &addr.to_string()])
            .env("RXU_RUNTIME_DIR", dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let mut d = Daemon {
            name: name.to_string(),
            addr,
            child,
            log,
        };
        d.wait_ready();
        Some(d)
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("rxud exited with {status}:\n{}", self.log_text());
            }
            if Context::open_admin(&self.name).is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "rxud did not come up:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn open(&self) -> Context {
        Context::open(&self.name).unwrap_or_else(|e| panic!("open: {e}\n{}", self.log_text()))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(admin) = Context::open_admin(&self.name) {
            let _ = admin.shutdown(true);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                self.forget_log();
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// The log outlives a failed test only.
    fn forget_log(&self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

pub const ALL_ACCESS: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

/// Polls `cq` until one completion arrives (10 s at most).
pub fn poll_one(cq: &Cq) -> Wc {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [Wc::default()];
    loop {
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(Instant::now() < deadline, "no completion within 10 s");
        std::thread::yield_now();
    }
}

/// Asserts nothing completes on `cq` for `ms` milliseconds.
pub fn assert_quiet(cq: &Cq, ms: u64) {
    let deadline = Instant::now() + Duration::from_millis(ms);
    let mut wc = [Wc::default()];
    while Instant::now() < deadline {
        assert_eq!(cq.poll(&mut wc).unwrap(), 0, "unexpected {:?}", wc[0]);
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A successful completion of `opcode`, or a panic naming what came.
pub fn expect_ok(cq: &Cq, opcode: WcOpcode) -> Wc {
    let wc = poll_one(cq);
    assert!(wc.is_success(), "{}: {wc:?}", wc.status_str());
    assert_eq!(wc.opcode, opcode as u32, "{wc:?}");
    wc
}

/// Deterministic test bytes.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed as u32) as u8)
        .collect()
}

/// Two QPs of one type on one device, each with its own CQ, connected to
/// each other.
pub struct Pair {
    pub ctx: Context,
    pub pd: Pd,
    pub cq_a: Cq,
    pub cq_b: Cq,
    pub a: Qp,
    pub b: Qp,
}

pub fn cap() -> QpCap {
    QpCap {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    }
}

impl Pair {
    pub fn new(ctx: &Context, qp_type: QpType) -> Pair {
        Self::with(ctx, qp_type, None, None)
    }

    /// With `b` receiving through `srq` and/or its CQ on `channel`.
    pub fn with(
        ctx: &Context,
        qp_type: QpType,
        srq: Option<&Srq>,
        channel: Option<&CompChannel>,
    ) -> Pair {
        let pd = match srq {
            Some(s) => s.pd().clone(),
            None => Pd::alloc(ctx).unwrap(),
        };
        let cq_a = Cq::create(ctx, 128, 0, None, 0xa).unwrap();
        let cq_b = Cq::create(ctx, 128, 0, channel, 0xb).unwrap();
        let a = Qp::create(&pd, &QpInit::new(qp_type, &cq_a, &cq_a, cap())).unwrap();
        let mut init_b = QpInit::new(qp_type, &cq_b, &cq_b, cap());
        init_b.srq = srq;
        let b = Qp::create(&pd, &init_b).unwrap();
        let gid = ctx.query_gid(0).unwrap();
        let ea = QpEndpoint {
            qpn: a.qpn(),
            psn: 0x100,
            gid,
        };
        let eb = QpEndpoint {
            qpn: b.qpn(),
            psn: 0xfff_f00,
            gid,
        };
        let opts = ConnectOpts::default();
        a.connect(ea.psn, &eb, &opts).unwrap();
        b.connect(eb.psn, &ea, &opts).unwrap();
        Pair {
            ctx: ctx.clone(),
            pd,
            cq_a,
            cq_b,
            a,
            b,
        }
    }
}
