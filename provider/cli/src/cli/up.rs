//! `rxu up`: check, start rxud, publish the device node, return the
//! export lines.
//!
//! Order matters: everything that can be checked is checked before the
//! daemon starts (root, addresses, the UDP port, the name), the uverbs
//! index is reserved by creating `/dev/infiniband/uverbsN` (atomic, and
//! shared by every runtime directory on the host), and the device tree is
//! published only once the daemon answers, so a client never sees a
//! device nobody serves. A failure undoes what was done.

use std::fs;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use super::admin::{AdminConn, AdminError};
use super::devices::{self, cdev_path};
use super::lock::RuntimeLock;
use super::netif::{self, Iface};
use super::spawn::{self, NotReady};
use super::{command_line, env, CliError, Result};
use rxu_abi::paths;
use rxu_abi::proto::Request;
use rxud::devnode::{
    format, uverbs_name, DevNode, DeviceDesc, Mtu, Paths, PortState, DEFAULT_GID_TBL_LEN,
    MAX_GID_TBL_LEN,
};

/// RoCEv2's UDP port.
pub const ROCE_PORT: u16 = 4791;
/// How long the daemon gets to answer.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Highest uverbs index tried.
const MAX_UVERBS: u32 = 256;
const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Debug)]
pub struct UpOpts {
    pub name: String,
    pub netdev: Option<String>,
    pub addr: Option<IpAddr>,
    pub port: u16,
    /// Packets between QPs of the device go through its UDP socket too
    /// (rxud `--force-udp`), not the intra-device shortcut.
    pub force_udp: bool,
    /// Serve only the user who brought the device up (and root); by
    /// default a device root brings up serves every user, as the kernel's
    /// uverbs nodes (0666) do, and a user's device only that user.
    pub owner_only: bool,
}

impl UpOpts {
    /// Whether the daemon serves clients of every user.
    pub fn all_users(&self) -> bool {
        super::is_root() && !self.owner_only
    }
}

/// What the device will be, resolved from the options and the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub netdev: String,
    pub ifindex: u32,
    pub netdev_up: bool,
    /// GID table order: IPv4 first.
    pub addrs: Vec<IpAddr>,
    /// GID 0, the address rxud is started on.
    pub primary: IpAddr,
    pub eth_mtu: u32,
    pub node_guid: u64,
}

/// Resolves the netdev and addresses. With `--addr` the device has that
/// one address; with `--netdev` alone every address of the netdev.
pub fn plan(
    opts: &UpOpts,
    ifaces: &[Iface],
    mtu_of: impl Fn(&str) -> io::Result<u32>,
    mac_of: impl Fn(&str) -> Option<[u8; 6]>,
) -> Result<Plan> {
    let addr = opts.addr.map(netif::canonical);
    let iface = match (&opts.netdev, addr) {
        (Some(nd), _) => {
            let i = ifaces
                .iter()
                .find(|i| &i.name == nd)
                .ok_or_else(|| CliError::NoSuchNetdev(nd.clone()))?;
            if let Some(a) = addr {
                // Which netdev owns it, if any, decides the message.
                match netif::iface_of(ifaces, a) {
                    Some(owner) if owner.name == i.name => {}
                    Some(_) => {
                        return Err(CliError::AddrNotOnNetdev {
                            addr: a,
                            netdev: nd.clone(),
                        })
                    }
                    None => return Err(CliError::AddrNotLocal(a)),
                }
            }
            i
        }
        (None, Some(a)) => netif::iface_of(ifaces, a).ok_or(CliError::AddrNotLocal(a))?,
        (None, None) => {
            return Err(CliError::Usage(
                "say which network to use: --netdev IFNAME or --addr IP".into(),
            ))
        }
    };
    let (addrs, primary) = match addr {
        Some(a) => (vec![a], a),
        None => {
            // Every address of the netdev (rxud serves them all and
            // follows adds and removes), IPv4 first: GID 0 is the first
            // IPv4 address.
            let all = rxud::daemon::port::usable_gid_addrs(&iface.addrs);
            let p = *all
                .first()
                .ok_or_else(|| CliError::NoAddress(iface.name.clone()))?;
            (all, p)
        }
    };
    let eth_mtu =
        mtu_of(&iface.name).map_err(CliError::io(format!("reading the MTU of {}", iface.name)))?;
    // rxud's rule, so the tree's node_guid and ibv_query_device agree: a
    // real MAC gives rxe's GUID, else (loopback) the address's.
    let node_guid = match mac_of(&iface.name) {
        Some(mac) => format::node_guid_from_mac(mac),
        None => format::node_guid_from_ip(primary),
    };
    Ok(Plan {
        netdev: iface.name.clone(),
        ifindex: iface.index,
        netdev_up: iface.is_up(),
        addrs,
        primary,
        eth_mtu,
        node_guid,
    })
}

/// The device tree description for a plan.
pub fn describe(name: &str, uverbs_index: u32, plan: &Plan) -> Result<DeviceDesc> {
    let mtu = Mtu::for_netdev_mtu(plan.eth_mtu as usize).ok_or_else(|| CliError::MtuTooSmall {
        netdev: plan.netdev.clone(),
        mtu: plan.eth_mtu,
    })?;
    let mut d = DeviceDesc::new(name, uverbs_index, plan.addrs.clone());
    d.node_guid = plan.node_guid;
    d.sys_image_guid = plan.node_guid;
    d.netdev = Some(plan.netdev.clone());
    d.port.active_mtu = mtu;
    d.port.max_mtu = Mtu::M4096;
    d.port.state = if plan.netdev_up {
        PortState::Active
    } else {
        PortState::Down
    };
    let n = format::gid_table(&plan.addrs).len() as u32;
    d.gid_tbl_len = n.clamp(DEFAULT_GID_TBL_LEN, MAX_GID_TBL_LEN);
    Ok(d)
}

/// Brings the device up; returns the export lines for stdout.
pub fn run(opts: &UpOpts) -> Result<Vec<String>> {
    check_name(&opts.name)?;
    let dpaths = devices::devnode_paths();
    check_privileges(&dpaths.dev_dir)?;
    let ifaces = netif::interfaces().map_err(CliError::io("listing network interfaces"))?;
    let mut plan = plan(opts, &ifaces, netif::mtu, netif::mac)?;
    // Like rxud: an interface without carrier is down too.
    plan.netdev_up &= netif::operstate(&plan.netdev).as_deref() != Some("down");
    if !plan.netdev_up {
        eprintln!(
            "rxu up: warning: netdev {} is down; the port will be DOWN",
            plan.netdev
        );
    }
    // Catch bad names, path lengths and MTUs before anything starts.
    describe(&opts.name, 0, &plan)?.validate(&dpaths)?;

    let rt = paths::runtime_dir();
    create_runtime_dir(&rt)?;
    let _lock = RuntimeLock::acquire(&rt, LOCK_TIMEOUT)
        .map_err(CliError::io(format!("locking {}", rt.display())))?;

    check_not_up(&opts.name)?;
    if opts.addr.is_some() {
        for a in &plan.addrs {
            check_port(*a, opts.port, plan.ifindex)?;
        }
    } else {
        check_port_on_netdev(&plan, opts.port)?;
    }

    let daemon = spawn::find_daemon().ok_or_else(|| {
        CliError::NoDaemon(
            std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "rxu".into()),
        )
    })?;
    let reservation = Reservation::take(&dpaths)?;
    let desc = describe(&opts.name, reservation.index, &plan)?;

    let log = paths::log_path(&opts.name);
    let args = daemon_args(opts, &plan, &dpaths.sysfs, desc.uverbs_index);
    let child = spawn::start(&daemon, &args, &log)
        .map_err(CliError::io(format!("starting {}", daemon.display())))?;
    let mut guard = DaemonGuard {
        child,
        conn: None,
        name: opts.name.clone(),
        armed: true,
    };
    let _ = devices::write_pid(&opts.name, guard.child.id());
    match spawn::wait_ready(
        &mut guard.child,
        &paths::socket_path(&opts.name),
        READY_TIMEOUT,
    ) {
        Ok(conn) => guard.conn = Some(conn),
        Err(NotReady::Died(status)) => {
            guard.disarm_dead();
            return Err(CliError::Daemon(format!(
                "rxud for {} exited ({status}) before serving. Its log ({}):\n{}",
                opts.name,
                log.display(),
                indent(&spawn::log_tail(&log, 20))
            )));
        }
        Err(NotReady::Timeout(last)) => {
            let why = last.map(|e| format!(" (last: {e})")).unwrap_or_default();
            return Err(CliError::Daemon(format!(
                "rxud for {} did not answer within {}s{why}; stopped it. Its log ({}):\n{}",
                opts.name,
                READY_TIMEOUT.as_secs(),
                log.display(),
                indent(&spawn::log_tail(&log, 20))
            )));
        }
    }

    let node = DevNode::create(&dpaths, &desc)?;
    if let Some(c) = guard.conn.as_mut() {
        reconcile(&node, &desc, c);
    }
    reservation.keep();
    guard.keep();
    eprintln!(
        "rxu up: {} ({}) on {} [{}], {}, daemon pid {}",
        opts.name,
        uverbs_name(desc.uverbs_index),
        plan.netdev,
        plan.addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        cdev_path(&dpaths, desc.uverbs_index).display(),
        devices::read_pid(&opts.name).unwrap_or(0),
    );
    Ok(env::export_lines())
}

/// The daemon keeps the tree's port state and GIDs current once it
/// exists; what changed between its start and the tree's publication is
/// written here, from what the daemon says now.
fn reconcile(node: &DevNode, desc: &DeviceDesc, c: &mut AdminConn) {
    let Ok(p) = c.query_port(1) else {
        return;
    };
    let state = if p.state == PortState::Active as u8 {
        PortState::Active
    } else {
        PortState::Down
    };
    if state != desc.port.state {
        let _ = node.set_port_state(state);
    }
    let addrs: Vec<IpAddr> = p.gids.iter().map(rxud::verbs::addr_of_gid).collect();
    if format::gid_table(&addrs) != format::gid_table(&desc.gids) {
        let _ = node.set_gids(&addrs);
    }
}

fn daemon_args(opts: &UpOpts, plan: &Plan, sysfs: &Path, uverbs: u32) -> Vec<String> {
    let mut v = vec![
        "--name".into(),
        opts.name.clone(),
        "--addr".into(),
        plan.primary.to_string(),
        "--netdev".into(),
        plan.netdev.clone(),
        "--port".into(),
        opts.port.to_string(),
        "--mtu".into(),
        plan.eth_mtu.to_string(),
        "--sysfs".into(),
        sysfs.display().to_string(),
        "--uverbs".into(),
        uverbs.to_string(),
    ];
    if opts.addr.is_none() {
        // --netdev alone: every address of the netdev.
        v.push("--all-addrs".into());
    }
    if opts.all_users() {
        v.push("--all-users".into());
    }
    if opts.force_udp {
        v.push("--force-udp".into());
    }
    v
}

fn indent(s: &str) -> String {
    if s.is_empty() {
        return "    (empty)".into();
    }
    s.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn check_name(name: &str) -> Result<()> {
    if !devices::valid_name(name) {
        return Err(CliError::Usage(format!(
            "device name {name:?}: 1 to 63 of A-Z a-z 0-9 _ . -, not starting with '.'"
        )));
    }
    if name.contains("rxe") {
        return Err(CliError::Usage(format!(
            "device name {name:?} contains \"rxe\": libibverbs' stock rxe provider would claim it"
        )));
    }
    Ok(())
}

/// Root, or at least a writable /dev/infiniband (then a non-root user's
/// runtime directory works too).
fn check_privileges(dev_dir: &Path) -> Result<()> {
    if super::is_root() || writable(dev_dir) {
        return Ok(());
    }
    Err(CliError::NotRoot {
        cmd: "rxu up",
        what: format!(
            "{} (libibverbs opens devices only there) and the runtime directory {}",
            dev_dir.join("uverbsN").display(),
            paths::runtime_dir().display()
        ),
        hint: command_line(),
    })
}

fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path for the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

fn create_runtime_dir(rt: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if fs::symlink_metadata(rt).is_err() {
        if let Some(parent) = rt.parent() {
            fs::create_dir_all(parent)
                .map_err(CliError::io(format!("creating {}", parent.display())))?;
        }
        // Root's tree is read by clients of every user (the sockets guard
        // themselves); a user's is that user's alone. The umask can only
        // narrow these.
        // SAFETY: geteuid has no preconditions and cannot fail.
        let mode = if unsafe { libc::geteuid() } == 0 {
            0o755
        } else {
            0o700
        };
        match fs::DirBuilder::new().mode(mode).create(rt) {
            // Set again: the umask may have narrowed it.
            Ok(()) => fs::set_permissions(rt, fs::Permissions::from_mode(mode))
                .map_err(CliError::io(format!("chmod {}", rt.display())))?,
            // Made meanwhile by someone else: checked below like any.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(CliError::io(format!("creating {}", rt.display()))(e)),
        }
    }
    // An existing one (or one made meanwhile) must be ours or root's,
    // writable by nobody else, not a symbolic link.
    rxu_abi::paths::check_runtime_dir(rt).map_err(|e| CliError::Daemon(e.to_string()))
}

/// Refuses a name whose daemon answers (or lives), and cleans what a dead
/// daemon left behind.
fn check_not_up(name: &str) -> Result<()> {
    let sock = paths::socket_path(name);
    match AdminConn::connect(&sock, Duration::from_secs(2)) {
        Ok(_) => {
            let pid = devices::read_pid(name)
                .map(|p| format!(" (daemon pid {p})"))
                .unwrap_or_default();
            return Err(CliError::AlreadyUp(name.to_owned(), pid));
        }
        Err(AdminError::NotRunning(_)) => {}
        Err(e) => {
            return Err(CliError::Daemon(format!(
            "{name}'s socket {} exists but does not answer ({e}); `rxu down --name {name} --force`",
            sock.display()
        )))
        }
    }
    if let Some(pid) = devices::read_pid(name).filter(|p| devices::is_rxud(*p)) {
        return Err(CliError::Daemon(format!(
            "{name}'s daemon (pid {pid}) is running but not serving; `rxu down --name {name} --force`"
        )));
    }
    let stale = super::down::remove_files(name)?;
    if stale {
        eprintln!("rxu up: removed what an earlier {name} left behind");
    }
    Ok(())
}

/// The wildcard binds a device serving all of its netdev makes.
fn check_port_on_netdev(plan: &Plan, port: u16) -> Result<()> {
    for v6 in [false, true] {
        let any = if v6 {
            IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
        };
        port_result(any, port, netif::test_bind_udp_dev(v6, port, &plan.netdev))?;
    }
    Ok(())
}

fn check_port(addr: IpAddr, port: u16, scope: u32) -> Result<()> {
    port_result(addr, port, netif::test_bind_udp(addr, port, scope))
}

fn port_result(addr: IpAddr, port: u16, r: io::Result<()>) -> Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
            let hint = if netif::rdma_rxe_loaded() && port == ROCE_PORT {
                ": the kernel's Soft-RoCE (rdma_rxe) is loaded and holds it; \
                 `rdma link delete <dev>` its devices and `modprobe -r rdma_rxe`"
                    .to_owned()
            } else {
                format!(
                    " (another rxu device or program; `rxu status`, `ss -ulpn sport = :{port}`; \
                     a loaded rdma_rxe module also takes it: `modprobe -r rdma_rxe`)"
                )
            };
            Err(CliError::PortInUse { addr, port, hint })
        }
        Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => Err(CliError::AddrNotLocal(addr)),
        Err(e) => Err(CliError::Io {
            what: format!("binding UDP {addr} port {port}"),
            source: e,
        }),
    }
}

/// `/dev/infiniband/uverbsN` made by us to claim N: symlink creation is
/// atomic, so two `rxu up`s (even with different runtime directories)
/// never pick the same N. DevNode::create accepts the identical node.
struct Reservation {
    index: u32,
    path: Option<PathBuf>,
}

impl Reservation {
    fn take(p: &Paths) -> Result<Reservation> {
        if !p.dev_dir.is_dir() {
            fs::create_dir_all(&p.dev_dir)
                .map_err(CliError::io(format!("creating {}", p.dev_dir.display())))?;
        }
        let class = devices::verbs_class(&p.sysfs);
        for index in 0..MAX_UVERBS {
            if class.join(uverbs_name(index)).symlink_metadata().is_ok() {
                continue;
            }
            let path = cdev_path(p, index);
            match std::os::unix::fs::symlink("/dev/null", &path) {
                Ok(()) => {
                    return Ok(Reservation {
                        index,
                        path: Some(path),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(CliError::Io {
                        what: format!("creating {}", path.display()),
                        source: e,
                    })
                }
            }
        }
        Err(CliError::NoFreeIndex(
            p.dev_dir.display().to_string(),
            MAX_UVERBS,
        ))
    }

    fn keep(mut self) {
        self.path = None;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// Stops the daemon we started unless `keep` is called.
struct DaemonGuard {
    child: Child,
    conn: Option<AdminConn>,
    name: String,
    armed: bool,
}

impl DaemonGuard {
    /// The daemon lives on after us (dropping a `Child` neither kills nor
    /// waits).
    fn keep(mut self) {
        self.armed = false;
    }

    /// It exited by itself: just reap it and clean its files.
    fn disarm_dead(&mut self) {
        let _ = self.child.wait();
        let _ = fs::remove_file(paths::pid_path(&self.name));
        let _ = fs::remove_file(paths::socket_path(&self.name));
    }
}

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(mut c) = self.conn.take() {
            let _ = c.call(&Request::Shutdown { force: true });
        }
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = fs::remove_file(paths::pid_path(&self.name));
        let _ = fs::remove_file(paths::socket_path(&self.name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lo() -> Iface {
        Iface {
            name: "lo".into(),
            index: 1,
            flags: (libc::IFF_UP | libc::IFF_LOOPBACK) as u32,
            addrs: vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()],
        }
    }

    fn eth() -> Iface {
        Iface {
            name: "eth0".into(),
            index: 2,
            flags: libc::IFF_UP as u32,
            addrs: vec![
                "fe80::1".parse().unwrap(),
                "10.0.0.5".parse().unwrap(),
                "10.0.0.6".parse().unwrap(),
            ],
        }
    }

    fn opts(netdev: Option<&str>, addr: Option<&str>) -> UpOpts {
        UpOpts {
            name: "rxu0".into(),
            netdev: netdev.map(Into::into),
            addr: addr.map(|a| a.parse().unwrap()),
            port: ROCE_PORT,
            force_udp: false,
            owner_only: false,
        }
    }

    fn plan_of(o: &UpOpts) -> Result<Plan> {
        let mtu = |n: &str| Ok(if n == "lo" { 65536 } else { 1500 });
        let mac = |n: &str| (n == "eth0").then_some([0, 0x11, 0x22, 0x33, 0x44, 0x55]);
        plan(o, &[lo(), eth()], mtu, mac)
    }

    #[test]
    fn netdev_gives_all_its_addresses_first_ipv4_first() {
        let p = plan_of(&opts(Some("eth0"), None)).unwrap();
        assert_eq!(p.netdev, "eth0");
        assert_eq!(p.primary, "10.0.0.5".parse::<IpAddr>().unwrap());
        let want: Vec<IpAddr> = vec!["10.0.0.5".parse().unwrap(), "10.0.0.6".parse().unwrap()];
        assert_eq!(p.addrs, want, "no link-local GID");
        let l = plan_of(&opts(Some("lo"), None)).unwrap();
        let want: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
        assert_eq!(l.addrs, want);
        let args = daemon_args(&opts(Some("eth0"), None), &p, Path::new("/s"), 0);
        assert!(args.iter().any(|a| a == "--all-addrs"), "{args:?}");
        // Root's devices serve every user unless --owner-only.
        let all = args.iter().any(|a| a == "--all-users");
        assert_eq!(all, crate::cli::is_root(), "{args:?}");
        let mut owner = opts(Some("eth0"), None);
        owner.owner_only = true;
        let args = daemon_args(&owner, &p, Path::new("/s"), 0);
        assert!(!args.iter().any(|a| a == "--all-users"), "{args:?}");
        assert_eq!(format::guid(p.node_guid), "0211:22ff:fe33:4455");
        // rxud derives the same GUID from the MAC whatever the address.
        let by_addr = plan_of(&opts(None, Some("10.0.0.6"))).unwrap();
        assert_eq!(by_addr.node_guid, p.node_guid);
        assert_eq!(by_addr.addrs, vec![by_addr.primary]);
        let d = describe("rxu0", 0, &p).unwrap();
        assert_eq!(d.port.active_mtu, Mtu::M1024);
        assert_eq!(d.netdev.as_deref(), Some("eth0"));
    }

    #[test]
    fn a_loopback_address_finds_lo_and_is_the_only_gid() {
        let p = plan_of(&opts(None, Some("127.0.0.2"))).unwrap();
        assert_eq!(p.netdev, "lo");
        assert_eq!(p.addrs, vec!["127.0.0.2".parse::<IpAddr>().unwrap()]);
        let d = describe("rxu1", 1, &p).unwrap();
        assert_eq!(d.port.active_mtu, Mtu::M4096);
        assert_eq!(d.gid_tbl_len, DEFAULT_GID_TBL_LEN);
        // Two devices on lo get different GUIDs.
        let p1 = plan_of(&opts(None, Some("127.0.0.1"))).unwrap();
        assert_ne!(p.node_guid, p1.node_guid);
        let mapped = plan_of(&opts(None, Some("::ffff:127.0.0.3"))).unwrap();
        assert_eq!(mapped.primary, "127.0.0.3".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn mistakes_are_named() {
        assert!(matches!(
            plan_of(&opts(None, Some("192.0.2.123"))),
            Err(CliError::AddrNotLocal(_))
        ));
        assert!(matches!(
            plan_of(&opts(Some("nope0"), None)),
            Err(CliError::NoSuchNetdev(_))
        ));
        assert!(matches!(
            plan_of(&opts(Some("eth0"), Some("127.0.0.1"))),
            Err(CliError::AddrNotOnNetdev { .. })
        ));
        assert!(matches!(
            plan_of(&opts(Some("eth0"), Some("192.0.2.1"))),
            Err(CliError::AddrNotLocal(_))
        ));
        assert!(matches!(
            plan_of(&opts(None, None)),
            Err(CliError::Usage(_))
        ));
        let bare = Iface {
            name: "dummy0".into(),
            index: 3,
            flags: 0,
            addrs: vec![],
        };
        let r = plan(&opts(Some("dummy0"), None), &[bare], |_| Ok(1500), |_| None);
        assert!(matches!(r, Err(CliError::NoAddress(_))));
        let tiny = plan(&opts(Some("lo"), None), &[lo()], |_| Ok(300), |_| None).unwrap();
        assert!(matches!(
            describe("rxu0", 0, &tiny),
            Err(CliError::MtuTooSmall { .. })
        ));
    }

    #[test]
    fn both_netdev_and_its_address() {
        let p = plan_of(&opts(Some("lo"), Some("127.0.0.9"))).unwrap();
        assert_eq!(p.addrs.len(), 1);
        assert_eq!(p.netdev, "lo");
    }

    #[test]
    fn down_netdev_gives_a_down_port() {
        let mut i = eth();
        i.flags = 0;
        let p = plan(&opts(Some("eth0"), None), &[i], |_| Ok(9000), |_| None).unwrap();
        assert!(!p.netdev_up);
        let d = describe("rxu0", 0, &p).unwrap();
        assert_eq!(d.port.state, PortState::Down);
        assert_eq!(d.port.active_mtu, Mtu::M4096);
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("rxu0").is_ok());
        assert!(check_name("myrxe0").is_err());
        assert!(check_name("../x").is_err());
        assert!(check_name("").is_err());
    }

    #[test]
    fn daemon_gets_name_address_netdev_port_mtu() {
        let p = plan_of(&opts(None, Some("127.0.0.2"))).unwrap();
        let mut o = opts(None, Some("127.0.0.2"));
        o.port = 5000;
        o.owner_only = true;
        assert_eq!(
            daemon_args(&o, &p, Path::new("/run/rxu/sysfs"), 3),
            [
                "--name",
                "rxu0",
                "--addr",
                "127.0.0.2",
                "--netdev",
                "lo",
                "--port",
                "5000",
                "--mtu",
                "65536",
                "--sysfs",
                "/run/rxu/sysfs",
                "--uverbs",
                "3"
            ]
        );
        o.force_udp = true;
        let args = daemon_args(&o, &p, Path::new("/run/rxu/sysfs"), 3);
        assert_eq!(args.last().map(String::as_str), Some("--force-udp"));
    }
}
