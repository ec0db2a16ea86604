//! Start-up: the device's facts (netdev, MTU, GUID), binding the engine
//! with errors that say what to do, the runtime directory, the control
//! socket (replacing a stale one only) and the pid file.

use std::io::{self, Write};
use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use transport::engine::{EngineConfig, EngineError};

use crate::devnode::format::{node_guid_from_ip, node_guid_from_mac};
use crate::verbs::DeviceFacts;
use rxu_abi::paths;

use super::log::{info, warning};
use super::sys;
use super::DaemonError;

/// What `rxud` is started with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The ibdev name (e.g. `rxu0`).
    pub name: String,
    pub addr: IpAddr,
    /// The netdev the address lives on (found from the address if None).
    pub netdev: Option<String>,
    /// UDP port (4791; another port only talks to rxu peers on it too).
    pub port: u16,
    /// Netdev MTU (read from sysfs if None).
    pub mtu: Option<u32>,
    /// Longest idle spin before the loop sleeps.
    pub max_spin: Duration,
    /// The device tree to keep in step with the port (from `rxu up`).
    pub node: Option<super::port::NodeLoc>,
    /// Serve every address of the netdev, following adds and removes
    /// (the engine binds 0.0.0.0 and [::] on the netdev); else `addr` only.
    pub all_addrs: bool,
    /// rdma_cm timers (the kernel's defaults unless a test shortens them).
    pub cm_timing: rxu_cm::engine::CmTiming,
    /// Send packets between QPs of this device through the UDP socket
    /// too, not the intra-device shortcut (`--force-udp`).
    pub force_udp: bool,
    /// Serve clients of every user (socket 0666, as the kernel's
    /// /dev/infiniband/uverbsN); else only the daemon's user and root.
    pub all_users: bool,
    /// Per-client and per-uid quotas (`quota.rs`).
    pub limits: super::quota::Limits,
}

impl Config {
    pub fn new(name: &str, addr: IpAddr) -> Config {
        Config {
            name: name.to_owned(),
            addr,
            netdev: None,
            port: transport::wire::ROCE_V2_PORT,
            mtu: None,
            max_spin: Duration::from_micros(50),
            node: None,
            all_addrs: false,
            cm_timing: rxu_cm::engine::CmTiming::default(),
            force_udp: false,
            all_users: false,
            limits: super::quota::Limits::default(),
        }
    }
}

/// Checks an ibdev name as libibverbs and the device node need it.
pub fn check_name(name: &str) -> Result<(), DaemonError> {
    let ok = !name.is_empty()
        && name.len() < 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !name.contains("rxe");
    if ok {
        Ok(())
    } else {
        Err(DaemonError::InvalidName(name.to_owned()))
    }
}

fn sysfs_net(netdev: &str, file: &str) -> PathBuf {
    Path::new("/sys/class/net").join(netdev).join(file)
}

/// The netdev holding `addr` (getifaddrs); loopback addresses that are
/// not listed (127.0.0.2 and up) belong to the loopback device.
fn netdev_of(addr: IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut loopback = None;
    let mut p = head;
    // Bounded by the kernel's interface list.
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned, alive until
        // freeifaddrs below; ifa_name is a NUL-terminated string and
        // ifa_addr is null or points at a sockaddr of its family.
        unsafe {
            let ifa = &*p;
            let name = std::ffi::CStr::from_ptr(ifa.ifa_name)
                .to_string_lossy()
                .into_owned();
            if ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0 {
                loopback = Some(name.clone());
            }
            if !ifa.ifa_addr.is_null() {
                let a = match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        Some(IpAddr::from(sin.sin_addr.s_addr.to_ne_bytes()))
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        Some(IpAddr::from(sin6.sin6_addr.s6_addr))
                    }
                    _ => None,
                };
                if a == Some(addr) && found.is_none() {
                    found = Some(name);
                }
            }
            p = ifa.ifa_next;
        }
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    found.or(if addr.is_loopback() { loopback } else { None })
}

fn read_trimmed(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned())
}

/// The facts the verbs layer derives attributes from.
pub fn device_facts(cfg: &Config) -> Result<DeviceFacts, DaemonError> {
    let netdev = match &cfg.netdev {
        Some(n) => {
            if !sysfs_net(n, "").exists() {
                return Err(DaemonError::NoNetdev(n.clone()));
            }
            n.clone()
        }
        None => netdev_of(cfg.addr).ok_or(DaemonError::AddrNotLocal(cfg.addr))?,
    };
    let mtu = cfg
        .mtu
        .or_else(|| read_trimmed(&sysfs_net(&netdev, "mtu"))?.parse().ok())
        .unwrap_or(1500);
    let mac = read_trimmed(&sysfs_net(&netdev, "address")).and_then(|s| parse_mac(&s));
    // Same rule as the device node: a real MAC gives rxe's GUID, else
    // (loopback) one derived from the address.
    let node_guid = match mac {
        Some(m) if m != [0; 6] => node_guid_from_mac(m),
        _ => node_guid_from_ip(cfg.addr),
    };
    let port_up = read_trimmed(&sysfs_net(&netdev, "operstate")).is_none_or(|s| s != "down");
    Ok(DeviceFacts {
        name: cfg.name.clone(),
        netdev,
        addrs: vec![cfg.addr],
        netdev_mtu: mtu,
        node_guid,
        port_up,
    })
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// The engine for `cfg` on `netdev`: one specific address, or (all
/// addresses) both wildcards tied to the netdev, so that devices on other
/// netdevs bind the same port without conflict.
pub fn engine_config(cfg: &Config, netdev: &str) -> EngineConfig {
    let mut e = if cfg.all_addrs {
        let mut e = EngineConfig::new(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        e.also_v6 = true;
        e.bind_device = Some(netdev.to_owned());
        e
    } else {
        EngineConfig::new(cfg.addr)
    };
    e.port = cfg.port;
    e.first_qpn = random_first_qpn();
    e.loopback = !cfg.force_udp;
    // Peers listen on the same port (4791, or the test port).
    e.peer_port = cfg.port;
    // Room for a peer's burst while this daemon waits for a core (the
    // clients it serves spin on the same two): UC and UD cannot recover
    // what an overflowing socket drops, and perftest's UC server then
    // waits forever. 4 MiB lost packets between two devices on one host;
    // 32 MiB (64 MiB as the kernel counts it) peaked at ~37 MB in use.
    e.socket_buffer = 32 << 20;
    e
}

/// Where this incarnation's QP numbers start: random, as initial PSNs are,
/// so that a peer still talking to a QP of a daemon that died (or was
/// restarted) does not reach the QP that happens to get its number next.
/// Within [0x100, 0xF0_0000): far from the reserved low numbers and from
/// the end of the 24-bit space. A fixed start if no randomness can be had.
pub fn random_first_qpn() -> u32 {
    const LOW: u32 = 0x100;
    const SPAN: u32 = 0xF0_0000 - LOW;
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), libc::GRND_NONBLOCK) };
    let r = if n == b.len() as isize {
        u32::from_ne_bytes(b)
    } else {
        // No entropy yet (early boot): time and pid still differ per start.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        t ^ std::process::id().rotate_left(16)
    };
    LOW + r % SPAN
}

/// Whether the kernel's Soft-RoCE module is loaded (it binds UDP 4791).
pub fn rdma_rxe_loaded() -> bool {
    Path::new("/sys/module/rdma_rxe").exists()
}

/// A clear error for a failed engine bind.
pub fn bind_error(cfg: &Config, e: EngineError) -> DaemonError {
    if let EngineError::Io(io) = &e {
        match io.raw_os_error() {
            Some(libc::EADDRINUSE) => {
                return DaemonError::PortInUse {
                    addr: cfg.addr,
                    port: cfg.port,
                    hint: if rdma_rxe_loaded() {
                        "the kernel's rdma_rxe module is loaded and holds UDP port 4791 on \
                         every address; unload it (modprobe -r rdma_rxe) or use another port"
                    } else {
                        "another rxud, or the kernel's rdma_rxe module when loaded (it binds \
                         UDP 4791 on every address), holds it"
                    },
                };
            }
            Some(libc::EADDRNOTAVAIL) => return DaemonError::AddrNotLocal(cfg.addr),
            _ => {}
        }
    }
    DaemonError::Engine(e)
}

/// The socket and pid files; removed when dropped.
pub struct RuntimeFiles {
    pub socket: PathBuf,
    pub pid: PathBuf,
    pub listener: OwnedFd,
}

impl RuntimeFiles {
    /// Fails if a daemon for `name` answers on its socket; removes a
    /// stale socket file nobody answers on. Run before binding the engine
    /// so a second daemon says "already running", not "port in use".
    pub fn check_not_running(name: &str) -> Result<(), DaemonError> {
        let socket = paths::socket_path(name);
        let Ok(meta) = std::fs::symlink_metadata(&socket) else {
            return Ok(());
        };
        if !meta.file_type().is_socket() {
            return Err(DaemonError::Io {
                what: format!("{} exists and is not a socket", socket.display()),
                source: io::Error::from(io::ErrorKind::AlreadyExists),
            });
        }
        match sys::connect_seqpacket(&socket) {
            Ok(_) => {
                let owner = read_trimmed(&paths::pid_path(name)).unwrap_or_else(|| "?".into());
                Err(DaemonError::AlreadyRunning {
                    name: name.to_owned(),
                    pid: owner,
                })
            }
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                warning!("removing stale socket {}", socket.display());
                std::fs::remove_file(&socket).map_err(|source| DaemonError::Io {
                    what: format!("removing {}", socket.display()),
                    source,
                })
            }
            Err(source) => Err(DaemonError::Io {
                what: format!("probing {}", socket.display()),
                source,
            }),
        }
    }

    /// Creates the runtime directory, the control socket (after
    /// [`RuntimeFiles::check_not_running`]) and the pid file.
    pub fn create(name: &str, all_users: bool) -> Result<RuntimeFiles, DaemonError> {
        let dir = paths::runtime_dir();
        let io_err = |what: String| move |source: io::Error| DaemonError::Io { what, source };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_err(format!("creating {}", dir.display())))?;
        Self::check_not_running(name)?;
        let socket = paths::socket_path(name);
        let pid = paths::pid_path(name);
        let listener = sys::listen_seqpacket(&socket)
            .map_err(io_err(format!("listening on {}", socket.display())))?;
        if all_users {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666))
                .map_err(io_err(format!("chmod {}", socket.display())))?;
        }
        let files = RuntimeFiles {
            socket,
            pid,
            listener,
        };
        let mut f = std::fs::File::create(&files.pid)
            .map_err(io_err(format!("writing {}", files.pid.display())))?;
        writeln!(f, "{}", std::process::id())
            .map_err(io_err(format!("writing {}", files.pid.display())))?;
        info!("control socket {}", files.socket.display());
        Ok(files)
    }
}

impl Drop for RuntimeFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        // Only our own pid file: a successor may have written its own.
        if read_trimmed(&self.pid).is_some_and(|p| p == std::process::id().to_string()) {
            let _ = std::fs::remove_file(&self.pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_qpns_are_random_and_in_range() {
        let v: Vec<u32> = (0..16).map(|_| random_first_qpn()).collect();
        assert!(v.iter().all(|q| (0x100..0xF0_0000).contains(q)), "{v:x?}");
        let mut u = v.clone();
        u.sort_unstable();
        u.dedup();
        assert!(u.len() > 8, "16 starts, {} distinct: {v:x?}", u.len());
    }

    #[test]
    fn names() {
        assert!(check_name("rxu0").is_ok());
        assert!(check_name("my_dev-1").is_ok());
        for bad in ["", "rxe0", "a/b", "a b", &"x".repeat(64)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn macs() {
        assert_eq!(
            parse_mac("00:11:22:33:44:ff"),
            Some([0, 0x11, 0x22, 0x33, 0x44, 0xff])
        );
        assert_eq!(parse_mac("00:11:22:33:44"), None);
        assert_eq!(parse_mac("00:11:22:33:44:55:66"), None);
    }

    #[test]
    fn loopback_facts() {
        let mut c = Config::new("rxut", "127.0.0.9".parse().unwrap());
        c.mtu = Some(9000);
        let f = device_facts(&c).unwrap();
        assert_eq!(f.netdev, "lo");
        assert_eq!(f.netdev_mtu, 9000);
        assert_ne!(f.node_guid, 0);
    }
}
