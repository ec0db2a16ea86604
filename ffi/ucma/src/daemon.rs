//! The process's connections to the rxu daemons, one per device, made on
//! first use: `<runtime dir>/<device>.sock`, `CmHello` first, then one
//! `Cm` request and its response at a time (the caller serialises).
//! A device is known by its index here, which is also the `tag` its
//! daemon writes in event records.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use rxu_abi::paths;
use rxu_abi::proto::cm::{CmRequest, CmResponse};
use rxu_abi::proto::{self, fdpass, Request, Response, MAX_MSG, PROTO_VERSION};

use crate::command::Errno;

struct Device {
    name: String,
    ctl: Option<OwnedFd>,
}

/// The daemons of the devices in one runtime directory.
pub struct Daemons {
    dir: PathBuf,
    devs: Vec<Device>,
}

impl Daemons {
    pub fn new(dir: PathBuf) -> Self {
        Daemons {
            dir,
            devs: Vec::new(),
        }
    }

    /// Looks for new devices (sockets in the runtime directory) and returns
    /// how many are known. Indexes of known devices do not change.
    pub fn refresh(&mut self) -> usize {
        let mut names: Vec<String> = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let n = e.file_name().into_string().ok()?;
                    n.strip_suffix(".sock").map(str::to_owned)
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        names.sort();
        for n in names {
            if !self.devs.iter().any(|d| d.name == n) {
                self.devs.push(Device { name: n, ctl: None });
            }
        }
        self.devs.len()
    }

    pub fn count(&self) -> usize {
        self.devs.len()
    }

    pub fn name(&self, dev: usize) -> &str {
        self.devs.get(dev).map_or("", |d| d.name.as_str())
    }

    fn connect(&mut self, dev: usize) -> Result<BorrowedFd<'_>, Errno> {
        let d = self.devs.get_mut(dev).ok_or(libc::ENODEV)?;
        if d.ctl.is_none() {
            let path = self.dir.join(format!("{}.sock", d.name));
            // The directory and the daemon's credentials are checked
            // before anything (event sockets later) is sent: a socket
            // another user planted gets nothing. The refusal is said once
            // on stderr, as libibverbs reports a provider's refusals.
            let ctl = paths::connect_trusted(&self.dir, &path).map_err(|e| {
                if e.is_not_found() {
                    return libc::ENODEV;
                }
                if let paths::TrustError::Io { .. } = e {
                    return libc::ENODEV;
                }
                eprintln!("librxu-ucma: {e}");
                e.errno()
            })?;
            let hello = Request::CmHello {
                version: PROTO_VERSION,
                pid: std::process::id(),
            };
            // A daemon without the CM (or an older one) refuses CmHello:
            // its device does not serve rdma_cm.
            match exchange(ctl.as_fd(), &hello, &[]) {
                Ok(Response::Hello { .. }) => d.ctl = Some(ctl),
                _ => return Err(libc::ENODEV),
            }
        }
        d.ctl.as_ref().map(|c| c.as_fd()).ok_or(libc::ENODEV)
    }

    /// One request to the daemon of `dev`. A daemon that cannot be reached
    /// is ENODEV (and is reconnected next time).
    pub fn call(
        &mut self,
        dev: usize,
        req: CmRequest,
        fds: &[BorrowedFd<'_>],
    ) -> Result<CmResponse, Errno> {
        let ctl = self.connect(dev)?;
        let r = exchange(ctl, &Request::Cm(req), fds);
        if r == Err(libc::ENODEV) {
            if let Some(d) = self.devs.get_mut(dev) {
                d.ctl = None;
            }
        }
        match r? {
            Response::Cm(c) => Ok(c),
            Response::Ok => Ok(CmResponse::Ok),
            _ => Err(libc::EPROTO),
        }
    }
}

/// Sends one request and reads its response; a daemon error is its errno,
/// a broken connection ENODEV.
fn exchange(ctl: BorrowedFd<'_>, req: &Request, fds: &[BorrowedFd<'_>]) -> Result<Response, Errno> {
    let bytes = proto::encode(req).map_err(|_| libc::EINVAL)?;
    fdpass::send_msg(ctl, &bytes, fds).map_err(|_| libc::ENODEV)?;
    let mut buf = vec![0u8; MAX_MSG];
    let (n, _fds) = fdpass::recv_msg(ctl, &mut buf, 0).map_err(|_| libc::ENODEV)?;
    if n == 0 {
        return Err(libc::ENODEV);
    }
    match proto::decode::<Response>(&buf[..n]).map_err(|_| libc::EPROTO)? {
        Response::Error { errno, .. } => Err(if errno > 0 { errno } else { libc::EIO }),
        r => Ok(r),
    }
}
