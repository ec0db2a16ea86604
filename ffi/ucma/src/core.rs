//! The emulated device: opens, commands, events and closes of rdma_cm
//! channels, against the id table and the daemons. No libc interposition
//! here (see `interpose`), so tests drive it directly.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use rxu_abi::proto::cm::{event as ev, CmEventRecord, CmOption, CmRequest, CmResponse, RouteInfo};
use rxu_abi::proto::{self, QpType};

use crate::abi;
use crate::command::{Command, Errno};
use crate::daemon::Daemons;
use crate::event::{self as record, EventResp, LOCAL_TAG, MAX_RECORD};
use crate::mem;
use crate::table::{Id, Mcast, Table};

/// The process's emulated ucma.
pub struct Ucma {
    pub table: Table,
    pub daemons: Daemons,
}

/// The errnos of a daemon's `Resolve` that are the caller's mistake (a
/// synchronous error); the others become ADDR_ERROR as on a kernel.
fn resolve_is_sync(e: Errno) -> bool {
    matches!(e, libc::EINVAL | libc::ENOENT)
}

impl Ucma {
    pub fn new(runtime_dir: PathBuf) -> Self {
        Ucma {
            table: Table::default(),
            daemons: Daemons::new(runtime_dir),
        }
    }

    /// An open of the device: a socket pair; the application gets the
    /// returned fd (readable while events are queued).
    pub fn open(&mut self, cloexec: bool, nonblock: bool) -> Result<RawFd, Errno> {
        let mut ty = libc::SOCK_SEQPACKET;
        if cloexec {
            ty |= libc::SOCK_CLOEXEC;
        }
        if nonblock {
            ty |= libc::SOCK_NONBLOCK;
        }
        let mut sv = [0; 2];
        // SAFETY: sv is a valid 2-element array for socketpair to fill.
        if unsafe { libc::socketpair(libc::AF_UNIX, ty, 0, sv.as_mut_ptr()) } != 0 {
            return Err(errno());
        }
        // SAFETY: fcntl on the fresh fd sv[1]; our end is always close-on-exec.
        unsafe { libc::fcntl(sv[1], libc::F_SETFD, libc::FD_CLOEXEC) };
        // SAFETY: socketpair just created sv[1]; nothing else owns it.
        let b = unsafe { OwnedFd::from_raw_fd(sv[1]) };
        self.table.add_channel(sv[0], b);
        Ok(sv[0])
    }

    pub fn is_channel(&self, fd: RawFd) -> bool {
        self.table.channels.contains_key(&fd)
    }

    /// The application closed channel `fd` (the caller closes the fd):
    /// every id of it is destroyed, as closing the kernel's file does.
    pub fn close(&mut self, fd: RawFd) {
        let hs: Vec<u32> = (self.table.ids.iter())
            .filter(|(_, id)| id.channel == fd)
            .map(|(h, _)| *h)
            .collect();
        for h in hs {
            self.destroy(h);
        }
        if let Some(ch) = self.table.channels.remove(&fd) {
            for dev in ch.attached {
                let _ = self
                    .daemons
                    .call(dev, CmRequest::DetachChannel { channel: ch.num }, &[]);
            }
        }
    }

    fn destroy(&mut self, h: u32) -> u32 {
        let Some(id) = self.table.remove_id(h) else {
            return 0;
        };
        for (dev, did) in id.bindings {
            let _ = self.daemons.call(dev, CmRequest::Destroy { id: did }, &[]);
        }
        id.events_reported
    }

    /// Sends AttachChannel for channel `fd` to `dev` once.
    fn attach(&mut self, fd: RawFd, dev: usize) -> Result<(), Errno> {
        let ch = self.table.channels.get(&fd).ok_or(libc::EBADF)?;
        if ch.attached.contains(&dev) {
            return Ok(());
        }
        let req = CmRequest::AttachChannel {
            channel: ch.num,
            tag: dev as u32,
        };
        self.daemons.call(dev, req, &[ch.b.as_fd()])?;
        if let Some(ch) = self.table.channels.get_mut(&fd) {
            ch.attached.push(dev);
        }
        Ok(())
    }

    /// A `Bind` of id `h` on device `dev`; records the binding.
    fn bind_on(
        &mut self,
        h: u32,
        dev: usize,
        addr: SocketAddr,
    ) -> Result<(SocketAddr, RouteInfo), Errno> {
        let id = self.table.ids.get(&h).ok_or(libc::ENOENT)?;
        let fd = id.channel;
        let (ps, qp_type, opts) = (id.ps, id.qp_type, id.options);
        self.attach(fd, dev)?;
        let num = self.table.channels.get(&fd).map_or(0, |c| c.num);
        let req = CmRequest::Bind {
            channel: num,
            ps,
            qp_type,
            addr,
            reuseaddr: opts.reuseaddr,
            afonly: opts.afonly,
            tos: opts.tos,
        };
        match self.daemons.call(dev, req, &[])? {
            CmResponse::Bound {
                id: did,
                addr,
                route,
            } => {
                self.table.bind(h, dev, did);
                if let Some(t) = opts.ack_timeout {
                    let o = CmRequest::SetOption {
                        id: did,
                        option: CmOption::AckTimeout(t),
                    };
                    let _ = self.daemons.call(dev, o, &[]);
                }
                Ok((addr, route))
            }
            _ => Err(libc::EPROTO),
        }
    }

    /// An address (same family as `ip`) of a device on the netdev that
    /// holds `ip`.
    fn device_address_on_netdev_of(&mut self, ip: IpAddr) -> Option<IpAddr> {
        let ifname = crate::netdev::ifname_of(ip)?;
        let n = self.daemons.refresh();
        (0..n).find_map(
            |dev| match self.daemons.call(dev, CmRequest::QueryDevice, &[]) {
                Ok(CmResponse::Device { netdev, addrs, .. }) if netdev == ifname => {
                    addrs.into_iter().find(|a| a.is_ipv4() == ip.is_ipv4())
                }
                _ => None,
            },
        )
    }

    /// Binds id `h` to a specific address on the device that serves it.
    fn bind_specific(&mut self, h: u32, addr: SocketAddr) -> Result<(), Errno> {
        let n = self.daemons.refresh();
        for dev in 0..n {
            match self.bind_on(h, dev, addr) {
                Ok((bound, route)) => {
                    if let Some(id) = self.table.ids.get_mut(&h) {
                        id.src = Some(bound);
                        id.route = route;
                        id.wildcard = false;
                    }
                    return Ok(());
                }
                // Not this device's address (or no daemon): the next.
                Err(libc::ENODEV | libc::EPROTO) => continue,
                Err(e) => return Err(e),
            }
        }
        // As the kernel: an address of this host that no RDMA device
        // serves is ENODEV, an address of no interface EADDRNOTAVAIL.
        let probe = SocketAddr::new(addr.ip(), 0);
        Err(if UdpSocket::bind(probe).is_ok() {
            libc::ENODEV
        } else {
            libc::EADDRNOTAVAIL
        })
    }

    /// `rdma_bind_addr` to a wildcard: the port is taken at once, on every
    /// device (one port for all: the kernel has one port space per
    /// namespace), so `rdma_get_src_port` right after bind has it and a
    /// second bind to it fails. With no device yet the id stays local
    /// (port as given) and LISTEN binds it.
    fn bind_wildcard(&mut self, h: u32, addr: SocketAddr) -> Result<(), Errno> {
        let src = match self.bind_every_device(h, addr) {
            Ok(bound) => bound,
            Err(libc::ENODEV) => addr,
            Err(e) => return Err(e),
        };
        if let Some(i) = self.table.ids.get_mut(&h) {
            i.src = Some(src);
            i.wildcard = true;
        }
        Ok(())
    }

    /// Binds id `h` to the wildcard `addr` on every device with one port.
    /// Port 0 takes the first device's ephemeral port; when another device
    /// has that one taken, everything is undone and a new port tried (a
    /// bounded number of times). ENODEV when no device serves rdma_cm.
    fn bind_every_device(&mut self, h: u32, addr: SocketAddr) -> Result<SocketAddr, Errno> {
        const TRIES: usize = 8;
        if let Some(i) = self.table.ids.get_mut(&h) {
            i.wildcard = true;
        }
        let n = self.daemons.refresh();
        let mut last = libc::EADDRINUSE;
        for _ in 0..TRIES {
            let mut want = addr;
            let mut any = false;
            let mut failed = None;
            for dev in 0..n {
                match self.bind_on(h, dev, want) {
                    Ok((bound, _)) => {
                        want.set_port(bound.port());
                        any = true;
                    }
                    Err(libc::ENODEV | libc::EPROTO) => continue,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            let e = match failed {
                None if any => return Ok(want),
                None => return Err(libc::ENODEV),
                Some(e) => e,
            };
            self.unwind_bindings(h);
            let retry =
                addr.port() == 0 && any && matches!(e, libc::EADDRINUSE | libc::EADDRNOTAVAIL);
            if !retry {
                return Err(e);
            }
            last = e;
        }
        Err(last)
    }

    /// Everything but GET_EVENT, which [`Ucma::translate`] completes.
    pub fn command(&mut self, fd: RawFd, c: Command) -> Result<(), Errno> {
        match c {
            Command::CreateId {
                uid,
                response,
                ps,
                qp_type,
            } => {
                let qp_type = QpType::from_ibv(u32::from(qp_type)).ok_or(libc::EINVAL)?;
                let h = self.table.add_id(Id::new(uid, ps, qp_type, fd));
                mem::write(response, &h.to_ne_bytes()).inspect_err(|_| {
                    self.table.remove_id(h);
                })
            }
            Command::DestroyId { response, id } => {
                self.table.id_of(fd, id)?;
                let n = self.destroy(id);
                mem::write(response, &n.to_ne_bytes())
            }
            Command::BindIp { addr, id } => {
                let i = self.table.id_of(fd, id)?;
                if !i.bindings.is_empty() || i.src.is_some() {
                    return Err(libc::EINVAL);
                }
                if addr.ip().is_unspecified() {
                    return self.bind_wildcard(id, addr);
                }
                self.bind_specific(id, addr)
            }
            Command::ResolveIp { src, dst, id, .. } => self.resolve_ip(fd, id, src, dst),
            Command::ResolveRoute { id, .. } => {
                let i = self.table.id_of(fd, id)?;
                if i.device().is_none() || i.dst.is_none() {
                    return Err(libc::EINVAL);
                }
                i.route.num_paths = 1;
                if let Some(t) = i.options.tos {
                    i.route.traffic_class = t;
                }
                self.post_local(fd, id, ev::ROUTE_RESOLVED, 0)
            }
            Command::QueryRoute {
                response,
                id,
                out_len,
            } => {
                let i = self.table.id_of(fd, id)?;
                let b = abi::query_route_resp(&abi::RouteView {
                    src: i.src.as_ref(),
                    dst: i.dst.as_ref(),
                    route: i.device().map(|_| &i.route),
                });
                mem::write(response, &b[..out_len.min(b.len())])
            }
            Command::Connect { param, id, ece } => {
                let (dev, did) = self.device_of(fd, id)?;
                self.ok(
                    dev,
                    CmRequest::Connect {
                        id: did,
                        param,
                        ece,
                    },
                )
            }
            Command::Listen { id, backlog } => self.listen(fd, id, backlog),
            Command::Accept {
                uid,
                param,
                id,
                ece,
            } => {
                let (dev, did) = self.device_of(fd, id)?;
                let valid = param.is_some();
                self.ok(
                    dev,
                    CmRequest::Accept {
                        id: did,
                        param,
                        ece,
                    },
                )?;
                if valid {
                    if let Some(i) = self.table.ids.get_mut(&id) {
                        i.uid = uid;
                    }
                }
                Ok(())
            }
            Command::Reject {
                id,
                private_data,
                reason,
            } => {
                let (dev, did) = self.device_of(fd, id)?;
                self.ok(
                    dev,
                    CmRequest::Reject {
                        id: did,
                        private_data,
                        reason,
                    },
                )
            }
            Command::Disconnect { id } => {
                let (dev, did) = self.device_of(fd, id)?;
                self.ok(dev, CmRequest::Disconnect { id: did })
            }
            Command::InitQpAttr {
                response,
                id,
                qp_state,
            } => {
                let (dev, did) = self.device_of(fd, id)?;
                let req = CmRequest::InitQpAttr {
                    id: did,
                    state: qp_state,
                };
                match self.daemons.call(dev, req, &[])? {
                    CmResponse::QpAttr { mask, attr } => {
                        mem::write(response, &abi::qp_attr_resp(mask, &attr))
                    }
                    _ => Err(libc::EPROTO),
                }
            }
            Command::GetEvent { .. } => Err(libc::EINVAL),
            Command::SetOption {
                optval,
                id,
                level,
                optname,
                optlen,
            } => self.set_option(fd, id, level, optname, optval, optlen),
            Command::Notify { id, event } => {
                let (dev, did) = self.device_of(fd, id)?;
                self.ok(dev, CmRequest::Notify { id: did, event })
            }
            Command::JoinIpMcast {
                response,
                uid,
                addr,
                id,
            } => {
                let (dev, did) = self.device_of(fd, id)?;
                let req = CmRequest::JoinMcast {
                    id: did,
                    addr,
                    send_only: false,
                };
                self.ok(dev, req)?;
                let m = self.table.add_mcast(Mcast {
                    id,
                    uid,
                    addr,
                    events_reported: 0,
                });
                mem::write(response, &m.to_ne_bytes()).inspect_err(|_| {
                    self.table.mcs.remove(&m);
                    let _ = self
                        .daemons
                        .call(dev, CmRequest::LeaveMcast { id: did, addr }, &[]);
                })
            }
            Command::LeaveMcast { response, id } => {
                let m = self.table.mcast_of(fd, id)?;
                let (owner, addr, n) = (m.id, m.addr, m.events_reported);
                self.table.mcs.remove(&id);
                if let Some((dev, did)) = self.table.ids.get(&owner).and_then(Id::device) {
                    let _ = self
                        .daemons
                        .call(dev, CmRequest::LeaveMcast { id: did, addr }, &[]);
                }
                mem::write(response, &n.to_ne_bytes())
            }
            Command::MigrateId {
                response,
                id,
                fd: cur,
            } => self.migrate(fd, cur, id, response),
        }
    }

    fn ok(&mut self, dev: usize, req: CmRequest) -> Result<(), Errno> {
        self.daemons.call(dev, req, &[]).map(|_| ())
    }

    /// The device binding of an id, EINVAL without one (`ucma_get_ctx_dev`).
    fn device_of(&mut self, fd: RawFd, id: u32) -> Result<(usize, u32), Errno> {
        self.table.id_of(fd, id)?.device().ok_or(libc::EINVAL)
    }

    fn post_local(&self, fd: RawFd, id: u32, ev: u32, status: i32) -> Result<(), Errno> {
        let ch = self.table.channels.get(&fd).ok_or(libc::EBADF)?;
        record::send_record(ch.b.as_fd(), &record::local(id, ev, status))
    }

    fn resolve_ip(
        &mut self,
        fd: RawFd,
        id: u32,
        src: Option<SocketAddr>,
        dst: SocketAddr,
    ) -> Result<(), Errno> {
        let i = self.table.id_of(fd, id)?;
        if i.listening || i.dst.is_some() {
            return Err(libc::EINVAL);
        }
        if i.device().is_none() {
            // The source: the one given, else the kernel's route to dst;
            // the port the id holds when it was bound to a wildcard.
            let held = (!i.bindings.is_empty()).then(|| i.src.map(|s| s.port()));
            let port = held
                .flatten()
                .or(src.map(|s| s.port()))
                .or(i.src.map(|s| s.port()))
                .unwrap_or(0);
            // The wildcard bindings give way to one on the source's device
            // (the kernel keeps the port and fills in the address).
            self.unwind_bindings(id);
            let ip = match src.filter(|s| !s.ip().is_unspecified()) {
                Some(s) => Some(s.ip()),
                None => match route_source(dst) {
                    Ok(ip) => Some(ip),
                    Err(e) => return self.post_local(fd, id, ev::ADDR_ERROR, -e),
                },
            };
            let given = src.is_some_and(|s| !s.ip().is_unspecified());
            if let Some(ip) = ip {
                if let Some(i) = self.table.ids.get_mut(&id) {
                    i.src = None;
                }
                let mut bound = self.bind_specific(id, SocketAddr::new(ip, port));
                if !given && matches!(bound, Err(libc::EADDRNOTAVAIL | libc::ENODEV)) {
                    // The route leaves from an address no device serves
                    // (127.0.0.1 towards 127.0.7.2 on lo): the device on
                    // that netdev answers with its own address.
                    if let Some(own) = self.device_address_on_netdev_of(ip) {
                        bound = self.bind_specific(id, SocketAddr::new(own, port));
                    }
                }
                match bound {
                    Ok(()) => {}
                    Err(e) if given => return Err(e),
                    Err(libc::EADDRNOTAVAIL | libc::ENODEV) => {
                        return self.post_local(fd, id, ev::ADDR_ERROR, -libc::ENODEV)
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        let (dev, did) = self.device_of(fd, id)?;
        match self
            .daemons
            .call(dev, CmRequest::Resolve { id: did, dst }, &[])
        {
            Ok(CmResponse::Route(route)) => {
                if let Some(i) = self.table.ids.get_mut(&id) {
                    i.dst = Some(dst);
                    i.route = route;
                }
                self.post_local(fd, id, ev::ADDR_RESOLVED, 0)
            }
            Ok(_) => Err(libc::EPROTO),
            Err(e) if resolve_is_sync(e) => Err(e),
            Err(e) => self.post_local(fd, id, ev::ADDR_ERROR, -e),
        }
    }

    fn listen(&mut self, fd: RawFd, id: u32, backlog: i32) -> Result<(), Errno> {
        let i = self.table.id_of(fd, id)?;
        if i.listening {
            // A second listen only updates the backlog on the kernel.
            return Ok(());
        }
        if let Some((dev, did)) = i.device() {
            self.ok(dev, CmRequest::Listen { id: did, backlog })?;
        } else {
            // A wildcard id listens on every device with its one port; an
            // unbound (or bound before any device existed) id binds first.
            let fresh = i.bindings.is_empty();
            if fresh {
                let addr = i
                    .src
                    .unwrap_or(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
                let bound = self.bind_every_device(id, addr)?;
                if let Some(i) = self.table.ids.get_mut(&id) {
                    i.src = Some(bound);
                }
            }
            let bindings = self
                .table
                .ids
                .get(&id)
                .map_or(Vec::new(), |i| i.bindings.clone());
            for (dev, did) in bindings {
                if let Err(e) = self.ok(dev, CmRequest::Listen { id: did, backlog }) {
                    if fresh {
                        self.unwind_bindings(id);
                    }
                    return Err(e);
                }
            }
        }
        if let Some(i) = self.table.ids.get_mut(&id) {
            i.listening = true;
        }
        Ok(())
    }

    /// Drops the daemon ids of id `h` (a failed wildcard bind or listen,
    /// or wildcard bindings replaced by one on a device).
    fn unwind_bindings(&mut self, h: u32) {
        let bindings = match self.table.ids.get_mut(&h) {
            Some(i) => std::mem::take(&mut i.bindings),
            None => return,
        };
        for b in bindings {
            self.table.by_daemon.remove(&b);
            let _ = self.daemons.call(b.0, CmRequest::Destroy { id: b.1 }, &[]);
        }
    }

    fn set_option(
        &mut self,
        fd: RawFd,
        id: u32,
        level: u32,
        name: u32,
        optval: u64,
        optlen: u32,
    ) -> Result<(), Errno> {
        self.table.id_of(fd, id)?;
        let mut buf = [0u8; 512];
        let len = (optlen as usize).min(buf.len());
        mem::read(optval, &mut buf[..len])?;
        if level != abi::OPTION_LEVEL_ID {
            // RDMA_OPTION_IB_PATH (routes from ACM) is not supported.
            return Err(libc::ENOSYS);
        }
        let int =
            || (optlen == 4).then(|| i32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) != 0);
        let byte = || (optlen == 1).then_some(buf[0]);
        let option = match name {
            abi::OPTION_ID_TOS => CmOption::Tos(byte().ok_or(libc::EINVAL)?),
            abi::OPTION_ID_REUSEADDR => CmOption::ReuseAddr(int().ok_or(libc::EINVAL)?),
            abi::OPTION_ID_AFONLY => CmOption::AfOnly(int().ok_or(libc::EINVAL)?),
            abi::OPTION_ID_ACK_TIMEOUT => CmOption::AckTimeout(byte().ok_or(libc::EINVAL)?),
            _ => return Err(libc::ENOSYS),
        };
        let i = self.table.id_of(fd, id)?;
        match option {
            CmOption::Tos(t) => i.options.tos = Some(t),
            CmOption::ReuseAddr(v) => i.options.reuseaddr = v,
            CmOption::AfOnly(v) => i.options.afonly = v,
            CmOption::AckTimeout(t) => i.options.ack_timeout = Some(t),
        }
        let targets = i.bindings.clone();
        for (dev, did) in targets {
            self.ok(dev, CmRequest::SetOption { id: did, option })?;
        }
        Ok(())
    }

    fn migrate(&mut self, new: RawFd, cur: RawFd, id: u32, response: u64) -> Result<(), Errno> {
        // SAFETY: F_GETFD only asks whether `cur` is an open descriptor.
        if unsafe { libc::fcntl(cur, libc::F_GETFD) } < 0 {
            return Err(libc::ENOENT);
        }
        if !self.is_channel(cur) || !self.is_channel(new) {
            return Err(libc::EINVAL);
        }
        let i = self.table.id_of(cur, id)?;
        let bindings = i.bindings.clone();
        let n = i.events_reported;
        let num = self.table.channels.get(&new).map_or(0, |c| c.num);
        for &(dev, did) in &bindings {
            self.attach(new, dev)?;
            self.ok(
                dev,
                CmRequest::Migrate {
                    id: did,
                    channel: num,
                },
            )?;
        }
        if let Some(i) = self.table.ids.get_mut(&id) {
            i.channel = new;
        }
        self.move_records(cur, new, id, &bindings);
        mem::write(response, &n.to_ne_bytes())
    }

    /// Moves the queued records of id `h` from channel `cur` to `new`
    /// (others are requeued on `cur` in order), as the kernel moves the
    /// id's events between files.
    fn move_records(&self, cur: RawFd, new: RawFd, h: u32, bindings: &[(usize, u32)]) {
        let (Some(c), Some(n)) = (self.table.channels.get(&cur), self.table.channels.get(&new))
        else {
            return;
        };
        let mut queued = Vec::new();
        let mut buf = [0u8; MAX_RECORD];
        while let Ok(len @ 1..) = record::recv_raw(cur, &mut buf, libc::MSG_DONTWAIT) {
            queued.push(buf[..len].to_vec());
        }
        for rec in queued {
            let ours = proto::decode::<CmEventRecord>(&rec).is_ok_and(|r| {
                (r.tag == LOCAL_TAG && r.id == h)
                    || bindings
                        .iter()
                        .any(|&(dev, did)| r.tag == dev as u32 && r.id == did)
            });
            let to = if ours { &n.b } else { &c.b };
            let _ = record::send_raw(to.as_fd(), &rec);
        }
    }

    /// Turns one record read from channel `fd` into the event response
    /// the kernel would give, with its bookkeeping (new ids of connect
    /// requests, events_reported). None: the record is to be skipped
    /// (its id is gone, or not yet accepted).
    pub fn translate(&mut self, fd: RawFd, rec: &[u8]) -> Option<[u8; abi::EVENT_RESP_LEN]> {
        let r: CmEventRecord = proto::decode(rec).ok()?;
        if r.tag == LOCAL_TAG {
            let id = self
                .table
                .ids
                .get_mut(&r.id)
                .filter(|i| i.channel == fd && i.uid != 0)?;
            id.events_reported += 1;
            return Some(record::event_resp(&EventResp {
                uid: id.uid,
                id: r.id,
                event: r.event,
                status: r.status,
                ud: id.qp_type == QpType::Ud,
                param: &r.param,
                ece: r.ece,
            }));
        }
        let dev = r.tag as usize;
        let h = self.table.by_daemon.get(&(dev, r.id)).copied();
        if r.event == ev::CONNECT_REQUEST {
            let Some(lh) = h else {
                let _ = self
                    .daemons
                    .call(dev, CmRequest::Destroy { id: r.new_id }, &[]);
                return None;
            };
            let l = self.table.ids.get(&lh)?;
            let (uid, ps, qp_type, channel) = (l.uid, l.ps, l.qp_type, l.channel);
            let mut child = Id::new(0, ps, qp_type, channel);
            child.bindings.push((dev, r.new_id));
            child.src = r.local;
            child.dst = r.remote;
            child.route = r.route.clone().unwrap_or_default();
            let nh = self.table.add_id(child);
            if let Some(l) = self.table.ids.get_mut(&lh) {
                l.events_reported += 1;
            }
            return Some(record::event_resp(&EventResp {
                uid,
                id: nh,
                event: r.event,
                status: r.status,
                ud: qp_type == QpType::Ud,
                param: &r.param,
                ece: r.ece,
            }));
        }
        let h = h?;
        let id = self.table.ids.get_mut(&h)?;
        let ud = id.qp_type == QpType::Ud;
        if r.event == ev::MULTICAST_JOIN || r.event == ev::MULTICAST_ERROR {
            let addr = r.mcast?;
            let (&mh, m) = self
                .table
                .mcs
                .iter_mut()
                .find(|(_, m)| m.id == h && m.addr == addr)?;
            m.events_reported += 1;
            id.events_reported += 1;
            return Some(record::event_resp(&EventResp {
                uid: m.uid,
                id: mh,
                event: r.event,
                status: r.status,
                ud: true,
                param: &r.param,
                ece: r.ece,
            }));
        }
        if r.event == ev::DEVICE_REMOVAL {
            // The kernel closes the id's cm_id; the daemon forgot it.
            for b in std::mem::take(&mut id.bindings) {
                self.table.by_daemon.remove(&b);
            }
        }
        let id = self.table.ids.get_mut(&h)?;
        if id.uid == 0 {
            return None;
        }
        id.events_reported += 1;
        Some(record::event_resp(&EventResp {
            uid: id.uid,
            id: h,
            event: r.event,
            status: r.status,
            ud,
            param: &r.param,
            ece: r.ece,
        }))
    }
}

/// The source address the kernel's routing picks for `dst` (a connected
/// UDP socket sends nothing); the errno when there is no route.
fn route_source(dst: SocketAddr) -> Result<IpAddr, Errno> {
    let any: SocketAddr = match dst {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let s = UdpSocket::bind(any).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let port = if dst.port() == 0 { 9 } else { dst.port() };
    s.connect(SocketAddr::new(dst.ip(), port))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::ENETUNREACH))?;
    let _ = s.as_raw_fd();
    s.local_addr()
        .map(|a| a.ip())
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

fn errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests;
