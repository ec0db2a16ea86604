//! `rxud`: the rxu soft NIC daemon (one per device). Normally started by
//! `rxu up`, which redirects its stderr to `<runtime dir>/<name>.log`.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use rxud::daemon::{self, port::NodeLoc, Config};

#[derive(Parser)]
#[command(
    name = "rxud",
    version,
    about = "rxu soft RDMA NIC daemon (RoCEv2 over UDP)"
)]
struct Args {
    /// Device (ibdev) name, e.g. rxu0.
    #[arg(long)]
    name: String,
    /// Local IP address the device uses (its GID).
    #[arg(long)]
    addr: IpAddr,
    /// Network device the address lives on (found from the address if omitted).
    #[arg(long)]
    netdev: Option<String>,
    /// Serve every address of the netdev (IPv4 and IPv6, following adds
    /// and removes) instead of --addr alone; --addr is then the first
    /// IPv4 address (GID 0).
    #[arg(long, requires = "netdev")]
    all_addrs: bool,
    /// UDP port (RoCEv2 uses 4791; another port only talks to rxu peers using it too).
    #[arg(long, default_value_t = 4791)]
    port: u16,
    /// Netdev MTU the port MTU is derived from (read from sysfs if omitted).
    #[arg(long)]
    mtu: Option<u32>,
    /// Longest idle spin in microseconds before the daemon sleeps.
    #[arg(long, default_value_t = 50)]
    spin_us: u64,
    /// The device tree's root (SYSFS_PATH) to keep port state and GIDs
    /// current in; needs --uverbs.
    #[arg(long, requires = "uverbs")]
    sysfs: Option<PathBuf>,
    /// N of the device's uverbsN in that tree.
    #[arg(long, requires = "sysfs")]
    uverbs: Option<u32>,
    /// rdma_cm: the CM response timeout exponent (4.096 us * 2^N; the
    /// kernel's is 20, about 4 s); tests shorten it.
    #[arg(long)]
    cm_response_timeout: Option<u8>,
    /// rdma_cm: how often a REQ / REP / DREQ is retransmitted (kernel: 15).
    #[arg(long)]
    cm_retries: Option<u8>,
    /// Send packets between QPs of this device through its UDP socket
    /// too, instead of the intra-device shortcut (packet captures then see
    /// them). Also on when the environment has RXU_FORCE_UDP=1.
    #[arg(long)]
    force_udp: bool,
    /// Serve verbs clients of every user (control socket 0666, as the
    /// kernel's uverbs nodes); only the daemon's user or root may stop it.
    #[arg(long)]
    all_users: bool,
    /// Per-client and per-uid quotas, comma-separated `session.KIND=N`,
    /// `uid.KIND=N` (N a number or `max`) and `hello_timeout_ms=N`; KIND
    /// is one of sessions, unhello, qps, cqs, cq_depth, srqs, mrs,
    /// mr_bytes, pds, fds, xrcds, cm_ids, mcast_joins, wqes. Applied
    /// after RXU_LIMITS from the environment (same syntax). Repeatable.
    #[arg(long = "limit", value_name = "SPEC")]
    limits: Vec<String>,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let mut cfg = Config::new(&a.name, a.addr);
    cfg.netdev = a.netdev;
    cfg.port = a.port;
    cfg.all_addrs = a.all_addrs;
    cfg.force_udp = a.force_udp || env_on("RXU_FORCE_UDP");
    cfg.all_users = a.all_users;
    cfg.mtu = a.mtu;
    cfg.max_spin = Duration::from_micros(a.spin_us);
    cfg.node = a
        .sysfs
        .zip(a.uverbs)
        .map(|(sysfs, uverbs)| NodeLoc { sysfs, uverbs });
    if let Some(t) = a.cm_response_timeout {
        cfg.cm_timing.cm_response_timeout = t.min(31);
    }
    if let Some(n) = a.cm_retries {
        cfg.cm_timing.max_cm_retries = n.min(15);
    }
    let env = std::env::var("RXU_LIMITS").unwrap_or_default();
    for spec in std::iter::once(&env).chain(&a.limits) {
        if let Err(e) = cfg.limits.apply(spec) {
            eprintln!("rxud: error: {e}");
            return ExitCode::FAILURE;
        }
    }
    match daemon::run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            daemon::log::write(daemon::log::Level::Error, format_args!("{e}"));
            // Not eprintln!: a full or closed stderr must not turn the exit
            // into a panic.
            let _ = writeln!(std::io::stderr(), "rxud: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A switch in the environment: set, and neither empty nor "0".
fn env_on(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}
