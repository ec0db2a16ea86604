//! `rxud`, the soft NIC daemon: one per device. It owns the UDP engine
//! bound to the device's address, serves clients on a SOCK_SEQPACKET
//! control socket ([`rxu_abi::proto`]), moves work requests from their
//! rings into the engine and completions back, and cleans up after
//! clients that go away.
//!
//! Modules: `setup` (start-up: facts, engine bind errors, runtime
//! files), `event_loop` (the single-threaded loop and its spin policy),
//! `device` (the device: its parts `objects`, `port`, the engine and
//! `counters`), `handle` (dispatch), `fdcheck` (what every fd a client
//! passes must be: its own memory, its own socket pairs), `fuse`,
//! `watchdog` and `closer` (no syscall on a client's memory or file may
//! hold the loop past a deadline: FUSE) and `cq`, `srq`, `qp`, `mr`, `mw`, `admin` (the
//! requests, each a function of the parts it needs; `reply` is what they
//! return), `datapath` (rings <-> engine), `wqe` (slot validation),
//! `session` (per-client objects), `quota` and `charge` (per-client and
//! per-uid limits, what each request takes), `share` (contexts imported with
//! `ibv_import_device` and their PDs and MRs), `netlink`, `link` and
//! `port` (port 1 follows its netdev), `privs` (the capabilities kept
//! after start-up).

pub mod admin;
pub mod advise;
pub mod charge;
pub mod closer;
pub mod cm;
pub mod cm_join;
pub mod completion;
pub mod counters;
pub mod cq;
pub mod datapath;
pub mod device;
pub mod event_loop;
pub mod fdcheck;
pub mod fuse;
pub mod handle;
pub mod idle;
pub mod link;
pub mod log;
pub mod mcast;
pub mod mr;
pub mod mw;
pub mod netlink;
pub mod objects;
pub mod port;
pub mod privs;
pub mod qp;
pub mod quota;
pub mod ready;
pub mod reply;
pub mod session;
pub mod setup;
pub mod share;
pub mod srq;
pub mod sys;
pub mod watchdog;
pub mod wqe;
pub mod xrc;
pub mod xrcd;

#[cfg(test)]
mod tests;

use std::io;
use std::net::IpAddr;

use transport::engine::EngineError;

pub use device::Device;
pub use setup::Config;

use log::info;

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("invalid device name {0:?}: 1-63 characters of [A-Za-z0-9_-], not containing \"rxe\"")]
    InvalidName(String),
    #[error("address {0} is not assigned to any local interface")]
    AddrNotLocal(IpAddr),
    #[error("no network device {0}")]
    NoNetdev(String),
    #[error("UDP port {port} on {addr} is already in use: {hint}")]
    PortInUse {
        addr: IpAddr,
        port: u16,
        hint: &'static str,
    },
    #[error("device {name} is already running (pid {pid})")]
    AlreadyRunning { name: String, pid: String },
    #[error("engine: {0}")]
    Engine(#[from] EngineError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
}

/// Runs the daemon until SIGTERM / SIGINT / SIGHUP or a Shutdown request.
pub fn run(cfg: Config) -> Result<(), DaemonError> {
    log::init_from_env();
    setup::check_name(&cfg.name)?;
    // Before anything exists that a signal would leave behind.
    let signals = sys::termination_signals().map_err(|source| DaemonError::Io {
        what: "signalfd".into(),
        source,
    })?;
    sys::raise_nofile_limit();
    let facts = setup::device_facts(&cfg)?;
    setup::RuntimeFiles::check_not_running(&cfg.name)?;
    let mut dev = Device::new(facts.clone(), setup::engine_config(&cfg, &facts.netdev))
        .map_err(|e| setup::bind_error(&cfg, e))?;
    dev.port.set_node(cfg.node.clone());
    dev.port.set_all_addrs(cfg.all_addrs);
    dev.set_cm_timing(cfg.cm_timing);
    dev.set_limits(cfg.limits.clone());
    // The port by the same rule rtnetlink events are judged by later.
    dev.refresh_port(false);
    let files = setup::RuntimeFiles::create(&cfg.name, cfg.all_users)?;
    info!(
        "device {} on {}:{} (netdev {}, MTU {}, port MTU {} bytes; {})",
        cfg.name,
        cfg.addr,
        cfg.port,
        dev.port.netdev(),
        dev.port.facts().netdev_mtu,
        dev.port.mtu().bytes(),
        dev.path_name()
    );
    let mut d = event_loop::Daemon::new(dev, files, signals, cfg.max_spin, cfg.all_users).map_err(
        |source| DaemonError::Io {
            what: "epoll".into(),
            source,
        },
    )?;
    // Everything that needed more than the loop does is done.
    drop_privileges(cfg.port)?;
    d.run()?;
    info!("stopped");
    Ok(())
}

/// Keeps only the capabilities the loop uses ([`privs`]) and says which.
fn drop_privileges(port: u16) -> Result<(), DaemonError> {
    let kept = privs::drop_to(privs::needed(port)).map_err(|source| DaemonError::Io {
        what: "dropping capabilities".into(),
        source,
    })?;
    let caps = privs::names(kept.caps);
    info!(
        "privileges: kept {}; bounding set {}; no_new_privs set",
        if caps.is_empty() {
            "no capabilities".to_owned()
        } else {
            caps.join(", ")
        },
        if kept.bounding_cut {
            "cut to them"
        } else {
            "left as found (no cap_setpcap)"
        }
    );
    Ok(())
}
