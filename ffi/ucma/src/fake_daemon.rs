//! A stand-in for rxud's CM side in tests: serves `<dir>/<name>.sock`,
//! answers `CmHello` and `Cm` requests with canned responses, logs them,
//! keeps the channel sockets it is given and writes event records to them
//! on request.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rxu_abi::proto::cm::{CmEventRecord, CmRequest, CmResponse, RouteInfo};
use rxu_abi::proto::{self, fdpass, QpAttr, Request, Response, MAX_MSG};

use crate::abi::ip_gid;

#[derive(Default)]
pub struct State {
    /// Every Cm request, in order.
    pub log: Vec<CmRequest>,
    /// channel -> (tag, our copy of the channel socket).
    pub channels: HashMap<u32, (u32, OwnedFd)>,
    /// daemon id -> channel.
    pub ids: HashMap<u32, u32>,
    /// Connections opened (CmHello), to see that one is kept.
    pub hellos: usize,
    next_id: u32,
}

pub struct FakeDaemon {
    pub state: Arc<Mutex<State>>,
    pub node_guid: u64,
}

pub const GUID_BASE: u64 = 0x0002_c9ff_fe00_0000;

pub fn route(node_guid: u64, src: SocketAddr, dst: Option<SocketAddr>) -> RouteInfo {
    RouteInfo {
        node_guid,
        port_num: 1,
        sgid: ip_gid(&src),
        dgid: dst.as_ref().map(ip_gid).unwrap_or_default(),
        pkey: 0xffff,
        mtu: 3,
        hop_limit: 64,
        packet_life_time: 18,
        rate: 7,
        ..Default::default()
    }
}

impl FakeDaemon {
    /// Serves device `name` in `dir`, owning the addresses `addrs`.
    pub fn start(dir: &Path, name: &str, addrs: Vec<IpAddr>, guid_low: u64) -> FakeDaemon {
        let path = dir.join(format!("{name}.sock"));
        let _ = std::fs::remove_file(&path);
        let listener = seqpacket_listener(&path);
        let state = Arc::new(Mutex::new(State {
            next_id: 100,
            ..Default::default()
        }));
        let node_guid = GUID_BASE | guid_low;
        let st = state.clone();
        std::thread::spawn(move || loop {
            // SAFETY: accept on our listening socket; NULL address out.
            let c = unsafe {
                libc::accept4(
                    listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if c < 0 {
                return;
            }
            // SAFETY: accept4 returned a fresh descriptor.
            let conn = unsafe { OwnedFd::from_raw_fd(c) };
            let st = st.clone();
            let addrs = addrs.clone();
            std::thread::spawn(move || serve(conn, st, addrs, node_guid));
        });
        FakeDaemon { state, node_guid }
    }

    /// Writes `r` (with the channel's tag) to channel `channel`.
    pub fn emit(&self, channel: u32, mut r: CmEventRecord) {
        let st = self.state.lock().unwrap();
        let (tag, fd) = st.channels.get(&channel).expect("attached channel");
        r.tag = *tag;
        fdpass::send_msg(fd.as_fd(), &proto::encode(&r).unwrap(), &[]).unwrap();
    }

    /// The channel daemon id `id` reports to.
    pub fn channel_of(&self, id: u32) -> u32 {
        self.state.lock().unwrap().ids[&id]
    }

    pub fn hellos(&self) -> usize {
        self.state.lock().unwrap().hellos
    }

    pub fn log(&self) -> Vec<CmRequest> {
        self.state.lock().unwrap().log.clone()
    }
}

fn seqpacket_listener(path: &Path) -> OwnedFd {
    // A std listener is SOCK_STREAM; build the seqpacket one by hand.
    drop(UnixListener::bind(path).unwrap());
    std::fs::remove_file(path).unwrap();
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0);
    // SAFETY: fresh descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr
        .sun_path
        .iter_mut()
        .zip(path.as_os_str().as_encoded_bytes())
    {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: addr is a valid sockaddr_un of len bytes.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    assert_eq!(r, 0, "bind {}", path.display());
    // SAFETY: listen on our bound socket.
    assert_eq!(unsafe { libc::listen(fd.as_raw_fd(), 16) }, 0);
    fd
}

fn serve(conn: OwnedFd, st: Arc<Mutex<State>>, addrs: Vec<IpAddr>, guid: u64) {
    let mut buf = vec![0u8; MAX_MSG];
    loop {
        let Ok((n, mut fds)) = fdpass::recv_msg(conn.as_fd(), &mut buf, 0) else {
            return;
        };
        if n == 0 {
            return;
        }
        let resp = match proto::decode::<Request>(&buf[..n]) {
            Ok(Request::CmHello { .. }) => {
                st.lock().unwrap().hellos += 1;
                Response::Hello {
                    device: "fake".into(),
                    client_id: 1,
                    max_inline_data: 0,
                }
            }
            Ok(Request::Cm(req)) => {
                let mut s = st.lock().unwrap();
                s.log.push(req.clone());
                match answer(&mut s, req, &mut fds, &addrs, guid) {
                    Ok(r) => Response::Cm(r),
                    Err(errno) => Response::Error {
                        errno,
                        msg: "fake".into(),
                    },
                }
            }
            _ => Response::Error {
                errno: libc::EINVAL,
                msg: "fake: unexpected".into(),
            },
        };
        if fdpass::send_msg(conn.as_fd(), &proto::encode(&resp).unwrap(), &[]).is_err() {
            return;
        }
    }
}

fn answer(
    s: &mut State,
    req: CmRequest,
    fds: &mut Vec<OwnedFd>,
    addrs: &[IpAddr],
    guid: u64,
) -> Result<CmResponse, i32> {
    Ok(match req {
        CmRequest::AttachChannel { channel, tag } => {
            let fd = fds.pop().ok_or(libc::EINVAL)?;
            s.channels.insert(channel, (tag, fd));
            CmResponse::Ok
        }
        CmRequest::DetachChannel { channel } => {
            s.channels.remove(&channel);
            CmResponse::Ok
        }
        CmRequest::Bind { channel, addr, .. } => {
            if !addr.ip().is_unspecified() && !addrs.contains(&addr.ip()) {
                return Err(libc::ENODEV);
            }
            if !s.channels.contains_key(&channel) {
                return Err(libc::EINVAL);
            }
            s.next_id += 1;
            let id = s.next_id;
            s.ids.insert(id, channel);
            let mut bound = addr;
            if bound.port() == 0 {
                bound.set_port(40000 + id as u16);
            }
            CmResponse::Bound {
                id,
                addr: bound,
                route: route(guid, bound, None),
            }
        }
        CmRequest::Resolve { id, dst } => {
            s.ids.get(&id).ok_or(libc::ENOENT)?;
            if dst.ip() == IpAddr::from([127, 0, 0, 99]) {
                return Err(libc::EHOSTUNREACH);
            }
            let src = SocketAddr::new(addrs[0], 0);
            CmResponse::Route(route(guid, src, Some(dst)))
        }
        CmRequest::InitQpAttr { state, .. } => CmResponse::QpAttr {
            mask: 0x39,
            attr: QpAttr {
                qp_state: state,
                port_num: 1,
                pkey_index: 0,
                ..Default::default()
            },
        },
        CmRequest::Migrate { id, channel } => {
            s.ids.insert(id, channel);
            CmResponse::Ok
        }
        CmRequest::Destroy { id } => {
            s.ids.remove(&id);
            CmResponse::Ok
        }
        _ => CmResponse::Ok,
    })
}

/// A fresh runtime directory for one test.
pub fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "rxu-ucma-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
