//! An open device: the control connection to `rxud`, the async event
//! socket and the doorbell every ring of this client shares.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::error::{Error, Result};
use super::event::{AsyncEvent, ASYNC_EVENT_LEN};
use super::sock;
use super::watch::{Health, Watcher};
use rxu_abi::paths;
use rxu_abi::proto::{
    self, fdpass, ClientStatus, Counter, DeviceAttr, PortAttr, QuotaLimit, Request, Response,
    UidUse, MAX_MSG, PROTO_VERSION,
};
use rxu_abi::ring::Doorbell;

/// An open rxu device. Cheap to clone; every verbs object holds one, so the
/// connection lives until the last object is gone.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

struct Inner {
    /// First, so it is stopped before `ctl` (which it polls) closes.
    _watch: Option<Watcher>,
    /// Whether rxud is alive (None for admin connections).
    health: Option<Arc<Health>>,
    device: String,
    client_id: u32,
    max_inline_data: u32,
    /// Request/response: one exchange at a time.
    ctl: Mutex<OwnedFd>,
    /// Read end of the async event socket (None for admin connections).
    async_rd: Option<OwnedFd>,
    /// Rung after posting when the daemon sleeps (None for admin).
    doorbell: Option<Doorbell>,
}

/// What a verbs (non-admin) connection has besides the control socket.
struct Events {
    async_rd: OwnedFd,
    doorbell: Doorbell,
    health: Arc<Health>,
    watch: Watcher,
}

/// What `Request::Status` returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStatus {
    pub device: String,
    pub addrs: Vec<String>,
    pub netdev: String,
    pub clients: Vec<ClientStatus>,
    /// The daemon's quota kinds and limits, and what each uid holds.
    pub limits: Vec<QuotaLimit>,
    pub uids: Vec<UidUse>,
}

/// What `Request::Stats` returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceStats {
    pub device: Vec<Counter>,
    pub qps: Vec<(u32, Vec<Counter>)>,
}

/// Connects to device `name`'s daemon once its runtime directory and its
/// credentials are checked (`paths::connect_trusted`): nothing, least of
/// all this process's memory, goes to a socket another user planted.
fn connect(name: &str) -> Result<OwnedFd> {
    paths::connect_trusted(&paths::runtime_dir(), &paths::socket_path(name)).map_err(|e| match e {
        paths::TrustError::Io { source, .. }
            if matches!(
                source.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            Error::DeviceNotFound(name.to_string())
        }
        paths::TrustError::Io { source, .. } => Error::Io(source),
        e => Error::Untrusted {
            errno: e.errno(),
            msg: e.to_string(),
        },
    })
}

impl Context {
    /// Opens device `name` for verbs: connects to its daemon and hands it
    /// this process's memory (`/proc/self/mem`), the write end of the async
    /// event socket and the doorbell.
    pub fn open(name: &str) -> Result<Context> {
        let ctl = connect(name)?;
        let mem: OwnedFd = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open("/proc/self/mem")?
            .into();
        let (async_rd, async_wr) = sock::seqpacket_pair()?;
        let doorbell = Doorbell::new()?;
        let hello = Request::Hello {
            version: PROTO_VERSION,
            pid: std::process::id(),
            admin: false,
        };
        let (resp, _) = exchange(
            ctl.as_fd(),
            &hello,
            &[mem.as_fd(), async_wr.as_fd(), doorbell.as_fd()],
        )?;
        drop(mem);
        // Our write end stays, to say DEVICE_FATAL for a daemon that died
        // without saying it (module `watch`).
        let health = Arc::new(Health::new(async_wr));
        let watch = Watcher::start(ctl.as_raw_fd(), health.clone())?;
        let events = Events {
            async_rd,
            doorbell,
            health,
            watch,
        };
        Self::from_hello(resp, ctl, Some(events))
    }

    /// Opens device `name` for administration (the `rxu` tool): no memory,
    /// no events; only status, stats, shutdown and queries.
    pub fn open_admin(name: &str) -> Result<Context> {
        let ctl = connect(name)?;
        let hello = Request::Hello {
            version: PROTO_VERSION,
            pid: std::process::id(),
            admin: true,
        };
        let (resp, _) = exchange(ctl.as_fd(), &hello, &[])?;
        Self::from_hello(resp, ctl, None)
    }

    fn from_hello(resp: Response, ctl: OwnedFd, ev: Option<Events>) -> Result<Context> {
        let Response::Hello {
            device,
            client_id,
            max_inline_data,
        } = resp
        else {
            return Err(unexpected("Hello", &resp));
        };
        let (async_rd, doorbell, health, watch) = match ev {
            Some(e) => (
                Some(e.async_rd),
                Some(e.doorbell),
                Some(e.health),
                Some(e.watch),
            ),
            None => (None, None, None, None),
        };
        Ok(Context {
            inner: Arc::new(Inner {
                _watch: watch,
                health,
                device,
                client_id,
                max_inline_data,
                ctl: Mutex::new(ctl),
                async_rd,
                doorbell,
            }),
        })
    }

    /// The device name the daemon reported.
    pub fn device_name(&self) -> &str {
        &self.inner.device
    }

    /// This connection's id in the daemon.
    pub fn client_id(&self) -> u32 {
        self.inner.client_id
    }

    /// The device's largest inline send.
    pub fn max_inline_data(&self) -> u32 {
        self.inner.max_inline_data
    }

    /// Sends one request and waits for its reply; a daemon error becomes
    /// [`Error::Daemon`]. Returns the reply and the fds that came with it.
    /// A request whose reply may come in pieces (Status, Stats).
    fn call_large(&self, req: &Request) -> Result<Response> {
        let first = self.call(req, &[])?.0;
        proto::unchunk(
            first,
            |offset| Ok(self.call(&Request::Chunk { offset }, &[])?.0),
            Error::Protocol,
        )
    }

    pub fn call(&self, req: &Request, fds: &[BorrowedFd<'_>]) -> Result<(Response, Vec<OwnedFd>)> {
        if self.is_dead() {
            return Err(Error::DeviceFatal);
        }
        let ctl = self.inner.ctl.lock().unwrap_or_else(|p| p.into_inner());
        match exchange(ctl.as_fd(), req, fds) {
            Err(Error::Disconnected) => match &self.inner.health {
                // Seen here before the watcher saw it: same consequences.
                Some(h) => {
                    h.die();
                    Err(Error::DeviceFatal)
                }
                None => Err(Error::Disconnected),
            },
            r => r,
        }
    }

    /// A request whose only good reply is `Ok`. Releasing an object of a
    /// device that is gone succeeds: it went with the device, and a
    /// program cleaning up after IBV_EVENT_DEVICE_FATAL must be able to.
    pub(crate) fn call_ok(&self, req: &Request) -> Result<()> {
        let releases = matches!(
            req,
            Request::DestroyQp { .. }
                | Request::DestroyCq { .. }
                | Request::DestroySrq { .. }
                | Request::DeregMr { .. }
                | Request::DeallocPd { .. }
        );
        match self.call(req, &[]) {
            Ok((Response::Ok, _)) => Ok(()),
            Ok((other, _)) => Err(unexpected("Ok", &other)),
            Err(Error::DeviceFatal) if releases => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether the device's daemon is gone (then every call fails with
    /// [`Error::DeviceFatal`] and DEVICE_FATAL was delivered).
    pub fn is_dead(&self) -> bool {
        self.inner.health.as_ref().is_some_and(|h| h.is_dead())
    }

    pub(crate) fn health(&self) -> Option<&Health> {
        self.inner.health.as_deref()
    }

    pub fn query_device(&self) -> Result<DeviceAttr> {
        match self.call(&Request::QueryDevice, &[])?.0 {
            Response::Device(d) => Ok(d),
            other => Err(unexpected("Device", &other)),
        }
    }

    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        match self.call(&Request::QueryPort { port }, &[])?.0 {
            Response::Port(p) => Ok(p),
            other => Err(unexpected("Port", &other)),
        }
    }

    /// GID `index` of port 1.
    pub fn query_gid(&self, index: usize) -> Result<[u8; 16]> {
        let port = self.query_port(1)?;
        port.gids
            .get(index)
            .copied()
            .ok_or(Error::Invalid("GID index out of range"))
    }

    /// Devices, clients and QPs (`rxu status`).
    pub fn status(&self) -> Result<DeviceStatus> {
        match self.call_large(&Request::Status)? {
            Response::Status {
                device,
                addrs,
                netdev,
                clients,
                limits,
                uids,
            } => Ok(DeviceStatus {
                device,
                addrs,
                netdev,
                clients,
                limits,
                uids,
            }),
            other => Err(unexpected("Status", &other)),
        }
    }

    /// Counters (`rxu stats`).
    pub fn stats(&self) -> Result<DeviceStats> {
        match self.call_large(&Request::Stats)? {
            Response::Stats { device, qps } => Ok(DeviceStats { device, qps }),
            other => Err(unexpected("Stats", &other)),
        }
    }

    /// Tells the daemon the application's `cmd_fd` of this context, so that
    /// [`Context::import_context`] on the same open file finds it.
    pub fn bind_cmd_fd(&self, cmd_fd: BorrowedFd<'_>) -> Result<()> {
        match self.call(&Request::BindCmdFd, &[cmd_fd])?.0 {
            Response::Ok => Ok(()),
            other => Err(unexpected("Ok", &other)),
        }
    }

    /// `ibv_import_device`: this (fresh) context joins the one whose
    /// `cmd_fd` is the same open file as `cmd_fd` — its PDs can then be
    /// imported ([`Pd::import`](crate::Pd::import)) and its MRs queried
    /// ([`Mr::import`](crate::Mr::import)). Fails with the daemon's
    /// ENOENT when no context of this device was opened on that file.
    pub fn import_context(&self, cmd_fd: BorrowedFd<'_>) -> Result<()> {
        match self.call(&Request::ImportContext, &[cmd_fd])?.0 {
            Response::Ok => Ok(()),
            other => Err(unexpected("Ok", &other)),
        }
    }

    /// Asks the daemon to stop (refused while clients are open unless `force`).
    pub fn shutdown(&self, force: bool) -> Result<()> {
        self.call_ok(&Request::Shutdown { force })
    }

    /// The async event socket, for poll/epoll (readable when an event waits).
    /// None on an admin connection.
    pub fn async_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.async_rd.as_ref().map(|f| f.as_fd())
    }

    /// Blocks until the next async event.
    pub fn get_async_event(&self) -> Result<AsyncEvent> {
        loop {
            if let Some(ev) = self.get_async_event_timeout(None)? {
                return Ok(ev);
            }
        }
    }

    /// Waits up to `timeout` (None: forever) for the next async event.
    pub fn get_async_event_timeout(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>> {
        let fd = self
            .async_fd()
            .ok_or(Error::Invalid("admin connection has no async events"))?;
        match sock::read_record_timeout::<ASYNC_EVENT_LEN>(fd, timeout) {
            Ok(r) => Ok(r.map(|b| AsyncEvent::from_record(&b))),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(Error::Disconnected),
            Err(e) => Err(e.into()),
        }
    }

    pub(crate) fn doorbell(&self) -> Result<&Doorbell> {
        self.inner.doorbell.as_ref().ok_or(Error::Invalid(
            "admin connection cannot create verbs objects",
        ))
    }
}

/// One request/response exchange on the control socket.
fn exchange(
    ctl: BorrowedFd<'_>,
    req: &Request,
    fds: &[BorrowedFd<'_>],
) -> Result<(Response, Vec<OwnedFd>)> {
    let bytes = proto::encode(req)?;
    let mut buf = vec![0u8; MAX_MSG];
    // A daemon that refuses a connection (its user's quota of
    // connections is used up) says why and closes before the Hello
    // arrives: the send fails, the reason is still to be read.
    let flags = match fdpass::send_msg(ctl, &bytes, fds) {
        Ok(()) => 0,
        Err(e) if matches!(e.raw_os_error(), Some(libc::EPIPE | libc::ECONNRESET)) => {
            libc::MSG_DONTWAIT
        }
        Err(e) => return Err(disconnected(e)),
    };
    let (n, rfds) = fdpass::recv_msg(ctl, &mut buf, flags).map_err(|e| match flags {
        0 => disconnected(e),
        _ => Error::Disconnected,
    })?;
    if n == 0 {
        return Err(Error::Disconnected);
    }
    match proto::decode::<Response>(&buf[..n])? {
        Response::Error { errno, msg } => Err(Error::Daemon { errno, msg }),
        resp => Ok((resp, rfds)),
    }
}

fn disconnected(e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EPIPE) | Some(libc::ECONNRESET) => Error::Disconnected,
        _ => Error::Io(e),
    }
}

/// The error for a reply of the wrong kind.
pub(crate) fn unexpected(wanted: &str, got: &Response) -> Error {
    let name = format!("{got:?}");
    let short = name.split([' ', '{', '(']).next().unwrap_or("");
    Error::Protocol(format!("expected a {wanted} reply, got {short}"))
}

/// The first fd of a reply, or a protocol error naming what is missing.
pub(crate) fn take_fd(fds: &mut Vec<OwnedFd>, what: &str) -> Result<OwnedFd> {
    if fds.is_empty() {
        return Err(Error::Protocol(format!("reply carries no {what} fd")));
    }
    Ok(fds.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unexpected_names_the_variant() {
        let e = unexpected(
            "Pd",
            &Response::Mr {
                mr: 1,
                lkey: 2,
                rkey: 3,
            },
        );
        assert_eq!(e.to_string(), "protocol error: expected a Pd reply, got Mr");
    }

    #[test]
    fn missing_device_has_a_hint() {
        // A name no daemon serves (the runtime dir may not even exist).
        let e = Context::open("rxu-no-such-device-for-tests").err().unwrap();
        assert!(matches!(e, Error::DeviceNotFound(_)), "{e}");
        assert_eq!(e.errno(), libc::ENODEV);
    }

    #[test]
    fn fake_daemon_exchange() {
        let (a, b) = sock::seqpacket_pair().unwrap();
        let t = std::thread::spawn(move || {
            let mut buf = vec![0u8; MAX_MSG];
            let (n, fds) = fdpass::recv_msg(b.as_fd(), &mut buf, 0).unwrap();
            assert!(fds.is_empty());
            let req: Request = proto::decode(&buf[..n]).unwrap();
            assert_eq!(req, Request::AllocPd);
            let resp = Response::Error {
                errno: libc::ENOMEM,
                msg: "no PDs left".into(),
            };
            fdpass::send_msg(b.as_fd(), &proto::encode(&resp).unwrap(), &[]).unwrap();
        });
        let e = exchange(a.as_fd(), &Request::AllocPd, &[]).unwrap_err();
        assert_eq!(e.errno(), libc::ENOMEM);
        t.join().unwrap();
        // The peer is gone now.
        let e = exchange(a.as_fd(), &Request::AllocPd, &[]).unwrap_err();
        assert!(matches!(e, Error::Disconnected), "{e}");
    }
}
