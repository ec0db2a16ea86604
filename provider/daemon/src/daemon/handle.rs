//! Request dispatch, and the requests with no object of their own to
//! manage: Hello, queries, PDs and MRs. Errors carry the errno rdma-core
//! users get from the kernel for the same mistake: EINVAL for a bad
//! argument or an unknown handle passed to a call, ENOENT for destroying
//! an unknown handle, EBUSY for destroying something still in use,
//! ENOMEM at a device limit.

use std::os::fd::{AsFd, OwnedFd};

use transport::engine::Endpoint;
use transport::qp::access;

use crate::mem::{DeviceMemory, RegError};
use rxu_abi::proto::cm::CmRequest;
use rxu_abi::proto::{Request, Response, PROTO_VERSION};
use rxu_abi::ring::Doorbell;

use super::counters::DaemonCounters;
use super::device::Device;
use super::log::{debug, info};
use super::objects::{Objects, Parts};
use super::port::Port;
use super::quota::Kind;
use super::reply::{refuse, Handled, Refused, Reply};
use super::session::Mr;
use super::{admin, advise, charge, cq, fdcheck, mr, mw, qp, share, srq, sys, xrc};

impl Device {
    /// Handles one request of session `id` (which must exist). `fds` are
    /// the descriptors that came with it.
    pub fn handle(&mut self, id: u32, req: Request, fds: Vec<OwnedFd>) -> Reply {
        self.counters.requests += 1;
        let Some(s) = self.objects.session(id) else {
            return Reply {
                resp: error_response(libc::EINVAL, "no such session"),
                fds: Vec::new(),
                close: true,
            };
        };
        let (ready, admin, cm_only) = (s.ready, s.admin, s.cm_only);
        let res = if !ready {
            match req {
                Request::Hello {
                    version,
                    pid,
                    admin,
                } => hello(
                    &mut self.objects,
                    &mut self.endpoint,
                    &self.port,
                    id,
                    Hello {
                        version,
                        pid,
                        admin,
                        fds,
                    },
                ),
                Request::CmHello { version, pid } => cm_hello(&mut self.objects, id, version, pid),
                _ => refuse(libc::EPROTO, "the first request must be Hello"),
            }
        } else {
            if cm_only {
                self.dispatch_cm(id, req, fds)
            } else {
                self.dispatch(id, admin, req, fds)
            }
        };
        match res {
            Ok(r) => r,
            Err(Refused { errno, msg }) => {
                self.counters.requests_refused += 1;
                debug!("client {id}: refused ({errno}): {msg}");
                Reply {
                    resp: error_response(errno, &msg),
                    fds: Vec::new(),
                    // A connection that never said Hello properly is of no use.
                    close: !ready,
                }
            }
        }
    }

    /// A connection of the ucma emulator: rdma_cm requests and queries.
    fn dispatch_cm(&mut self, id: u32, req: Request, fds: Vec<OwnedFd>) -> Handled {
        match req {
            Request::Cm(r) => {
                let s = self.objects.session_mut(id)?;
                let (peer, net_bind_service) = (s.pid, s.net_bind_service);
                for fd in &fds {
                    fdcheck::event_socket(fd.as_fd(), peer, "the rdma_cm event channel")?;
                }
                // Ids, joins and channels as the CM counts them (incoming
                // connection requests make ids too), then the new one.
                self.sync_cm_quota(id);
                let q = &self.objects.quota;
                match &r {
                    CmRequest::Bind { addr, .. } => {
                        q.check(id, Kind::CmIds, 1)?;
                        super::cm::check_port_privilege(addr.port(), net_bind_service)?;
                    }
                    CmRequest::JoinMcast { .. } => q.check(id, Kind::McastJoins, 1)?,
                    CmRequest::AttachChannel { .. } => q.check(id, Kind::Fds, 1)?,
                    _ => {}
                }
                let now = std::time::Instant::now();
                let reply = self.cm.handle(now, id, r, fds, &self.port);
                self.cm.flush(&mut self.endpoint);
                self.settle_cm_joins();
                self.sync_cm_quota(id);
                reply
            }
            Request::QueryDevice => Ok(Reply::ok(Response::Device(self.objects.attr().clone()))),
            Request::QueryPort { port: 1 } => {
                Ok(Reply::ok(Response::Port(self.port.attr().clone())))
            }
            _ => refuse(
                libc::EPERM,
                "an rdma_cm connection only sends rdma_cm requests and queries",
            ),
        }
    }

    fn sync_cm_quota(&mut self, id: u32) {
        let (ids, joins, channels) = self.cm.usage(id);
        let q = &mut self.objects.quota;
        q.set(id, Kind::CmIds, ids);
        q.set(id, Kind::McastJoins, joins);
        q.set(id, Kind::Fds, channels);
    }

    fn dispatch(&mut self, id: u32, admin: bool, req: Request, fds: Vec<OwnedFd>) -> Handled {
        let admin_ok = matches!(
            req,
            Request::Status
                | Request::Stats
                | Request::Chunk { .. }
                | Request::Shutdown { .. }
                | Request::QueryDevice
                | Request::QueryPort { .. }
        );
        if admin && !admin_ok {
            return refuse(
                libc::EPERM,
                "admin connections only query and manage the daemon",
            );
        }
        let takes_fds = matches!(
            req,
            Request::CreateCq { channel: true, .. }
                | Request::BindCmdFd
                | Request::ImportContext
                | Request::OpenXrcd { .. }
        );
        if !fds.is_empty() && !takes_fds {
            return refuse(libc::EINVAL, "unexpected file descriptors");
        }
        if !admin {
            // Work requests posted before this call are taken (and what
            // they send is sent) first, so the call sees them in program
            // order (a modify_qp after a post_recv, a destroy after a post).
            self.take_posted(id);
            self.deliver();
        }
        // A QP or SRQ modified (reset, a new ring) is watched again.
        let wake = match req {
            Request::ModifyQp { qp, .. } => Some((Some(qp), None)),
            Request::ModifySrq { srq, .. } => Some((None, Some(srq))),
            _ => None,
        };
        // Per-client and per-uid limits (`quota.rs`), applied on success.
        let pending = charge::before(&self.objects, id, &req)?;
        let (o, e, port) = (&mut self.objects, &mut self.endpoint, &self.port);
        let counters = &mut self.counters;
        let r = match req {
            Request::Hello { .. } | Request::CmHello { .. } => {
                refuse(libc::EINVAL, "Hello was already accepted")
            }
            Request::Cm(_) => refuse(
                libc::EPERM,
                "rdma_cm requests come on a connection opened with CmHello",
            ),
            Request::QueryDevice => Ok(Reply::ok(Response::Device(o.attr().clone()))),
            Request::QueryPort { port: n } => {
                if n != 1 {
                    return refuse(libc::EINVAL, format!("no port {n} (the device has port 1)"));
                }
                Ok(Reply::ok(Response::Port(port.attr().clone())))
            }
            Request::AllocPd => alloc_pd(o, id),
            Request::DeallocPd { pd } => dealloc_pd(o, id, pd),
            Request::RegMr {
                pd,
                addr,
                len,
                iova,
                access,
            } => reg_mr(
                o,
                e,
                counters,
                id,
                MrRequest {
                    pd,
                    addr,
                    len,
                    iova,
                    access,
                },
            ),
            Request::DeregMr { mr } => dereg_mr(o, e, counters, id, mr),
            Request::ReregMr {
                mr: h,
                flags,
                pd,
                addr,
                len,
                access,
            } => mr::reregister(
                o,
                e,
                id,
                mr::Rereg {
                    mr: h,
                    flags,
                    pd,
                    addr,
                    len,
                    access,
                },
            ),
            Request::AllocMw { pd, mw_type } => mw::alloc(o, e, id, pd, mw_type),
            Request::DeallocMw { mw } => mw::dealloc(o, e, id, mw),
            Request::CreateCq {
                cqe,
                comp_vector,
                user_handle,
                channel,
                timestamps,
            } => cq::create(
                o,
                id,
                cq::NewCq {
                    cqe,
                    comp_vector,
                    user_handle,
                    channel,
                    timestamps,
                },
                fds,
            ),
            Request::ResizeCq { cq, cqe } => cq::resize(o, id, cq, cqe),
            Request::DestroyCq { cq } => cq::destroy(o, id, cq),
            Request::CreateSrq {
                pd,
                max_wr,
                max_sge,
                srq_limit,
                user_handle,
            } => srq::create(
                o,
                e,
                id,
                srq::SrqRequest {
                    pd,
                    max_wr,
                    max_sge,
                    srq_limit,
                    user_handle,
                },
            ),
            Request::ModifySrq {
                srq,
                mask,
                max_wr,
                srq_limit,
            } => srq::modify(o, e, id, srq, (mask, max_wr, srq_limit)),
            Request::QuerySrq { srq } => srq::query(o, id, srq),
            Request::DestroySrq { srq } => srq::destroy(o, e, id, srq),
            Request::CreateQp {
                pd,
                qp_type,
                send_cq,
                recv_cq,
                srq,
                cap,
                sq_sig_all,
                user_handle,
            } => qp::create(
                o,
                e,
                counters,
                port,
                id,
                qp::QpRequest {
                    pd,
                    qp_type,
                    send_cq,
                    recv_cq,
                    srq,
                    cap,
                    sq_sig_all,
                    user_handle,
                },
            ),
            Request::ModifyQp { qp, mask, attr } => {
                qp::modify(o, e, counters, port, id, qp, (mask, &attr))
            }
            Request::QueryQp { qp, mask: _ } => qp::query(o, e, id, qp),
            Request::DestroyQp { qp } => {
                let r = qp::destroy(o, e, counters, id, qp);
                // A destroyed QP left its groups.
                let _ = self.sync_groups();
                r
            }
            Request::OpenXrcd { oflags } => xrc::open(o, id, oflags, fds),
            Request::CloseXrcd { xrcd } => xrc::close(o, id, xrcd),
            Request::CreateXrcSrq {
                pd,
                xrcd,
                cq,
                max_wr,
                max_sge,
                srq_limit,
                user_handle,
            } => srq::create_in(
                o,
                e,
                id,
                srq::SrqRequest {
                    pd,
                    max_wr,
                    max_sge,
                    srq_limit,
                    user_handle,
                },
                Some((xrcd, cq)),
            ),
            Request::CreateXrcTgtQp { xrcd, user_handle } => {
                xrc::create_tgt_qp(o, e, counters, port, id, (xrcd, user_handle))
            }
            Request::OpenXrcTgtQp {
                xrcd,
                qpn,
                user_handle,
            } => xrc::open_tgt_qp(o, id, (xrcd, qpn, user_handle)),
            Request::AttachMcast { qp, gid, lid: _ } => self.mcast(id, qp, gid, true),
            Request::DetachMcast { qp, gid, lid: _ } => self.mcast(id, qp, gid, false),
            Request::BindCmdFd => share::bind_cmd_fd(o, id, fds),
            Request::ImportContext => share::import_context(o, id, fds),
            Request::ImportPd { pd } => share::import_pd(o, id, pd),
            Request::ImportMr { mr } => share::import_mr(o, id, mr),
            Request::AdviseMr {
                pd,
                advice,
                flags,
                ranges,
            } => advise::advise_mr(o, e, id, pd, (advice, flags), &ranges),
            Request::Status => {
                let r = admin::restrict(self.status(), self.viewer(id));
                admin::paged(&mut self.objects, id, r)
            }
            Request::Stats => {
                let r = admin::restrict(self.stats(), self.viewer(id));
                admin::paged(&mut self.objects, id, r)
            }
            Request::Shutdown { force } => {
                let r = admin::shutdown(o, id, admin, force);
                self.shutdown |= r.is_ok();
                r
            }
            Request::Chunk { offset } => admin::chunk(o, id, offset),
        };
        charge::after(&mut self.objects, pending, r.is_ok());
        if let Some((qp, srq)) = wake {
            self.watch(id, qp, srq);
        }
        r
    }

    /// Watches QP `qp` and/or SRQ `srq` of session `id` again (their
    /// rings' flags lowered; parked again once idle).
    fn watch(&mut self, id: u32, qp: Option<u32>, srq: Option<u32>) {
        let now = std::time::Instant::now();
        let Some(Parts { s, ready, .. }) = self.objects.parts(id) else {
            return;
        };
        if let Some(q) = qp.and_then(|q| s.qps.get_mut(&q)) {
            ready.wake_qp(id, q, now);
        }
        if let Some((h, q)) = srq.and_then(|h| Some((h, s.srqs.get_mut(&h)?))) {
            ready.wake_srq(id, h, q, now);
        }
    }
}

/// What a Hello carries.
struct Hello {
    version: u32,
    pid: u32,
    admin: bool,
    fds: Vec<OwnedFd>,
}

/// Accepts an rdma_cm client: no fds, no memory; its ids live in the CM.
fn cm_hello(objects: &mut Objects, id: u32, version: u32, pid: u32) -> Handled {
    if version != PROTO_VERSION {
        return refuse(
            libc::EPROTONOSUPPORT,
            format!("protocol version {version}, the daemon speaks {PROTO_VERSION}"),
        );
    }
    let s = objects.session_mut(id)?;
    // Identity is the pid SO_PEERCRED gave at accept; the claim is logged.
    if s.pid != pid {
        debug!(
            "client {id}: CmHello says pid {pid}, the socket says {}",
            s.pid
        );
    }
    s.cm_only = true;
    s.ready = true;
    let pid = s.pid;
    objects.quota.hello(id);
    debug!("client {id} (pid {pid}): rdma_cm connection");
    Ok(Reply::ok(Response::Hello {
        device: String::new(),
        client_id: id,
        max_inline_data: 0,
    }))
}

fn hello(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    port: &Port,
    id: u32,
    h: Hello,
) -> Handled {
    let Hello {
        version,
        pid,
        admin,
        fds,
    } = h;
    if version != PROTO_VERSION {
        return refuse(
            libc::EPROTONOSUPPORT,
            format!("protocol version {version}, the daemon speaks {PROTO_VERSION}"),
        );
    }
    let max_inline = objects.attr().max_inline_data;
    let allow_own_mem = objects.allow_own_mem();
    let s = objects.session_mut(id)?;
    // Identity is the pid SO_PEERCRED gave at accept (0 when the daemon
    // cannot see the client's process); the claim is only logged.
    let peer = s.pid;
    if peer != pid {
        debug!("client {id}: Hello says pid {pid}, the socket says {peer}");
    }
    if admin {
        if !fds.is_empty() {
            return refuse(libc::EINVAL, "admin Hello carries no file descriptors");
        }
        s.admin = true;
    } else {
        let [mem, async_sock, bell]: [OwnedFd; 3] =
            fds.try_into().map_err(|v: Vec<OwnedFd>| Refused {
                errno: libc::EINVAL,
                msg: format!(
                    "Hello needs 3 file descriptors (mem, async socket, doorbell), got {}",
                    v.len()
                ),
            })?;
        fdcheck::event_socket(async_sock.as_fd(), peer, "the async event socket")?;
        fdcheck::eventfd(bell.as_fd(), "the doorbell")?;
        let bell = Doorbell::from_fd(bell).map_err(|e| Refused {
            errno: libc::EINVAL,
            msg: format!("doorbell: {e}"),
        })?;
        if !allow_own_mem && sys::is_own_mem(mem.as_fd()) {
            return refuse(libc::EINVAL, "the memory fd is the daemon's own");
        }
        fdcheck::memory(mem.as_fd(), peer)?;
        s.async_sock = Some(async_sock);
        s.bell = Some(bell);
        endpoint.memory_mut().add_client(id, mem);
        // Its memory, async socket and doorbell stay open here.
        objects.quota.add(id, Kind::Fds, 3);
    }
    objects.quota.hello(id);
    let s = objects.session_mut(id)?;
    s.ready = true;
    info!(
        "client {id} (pid {}){} connected",
        s.pid,
        if admin { " [admin]" } else { "" }
    );
    Ok(Reply::ok(Response::Hello {
        device: port.name().to_owned(),
        client_id: id,
        max_inline_data: max_inline,
    }))
}

fn alloc_pd(objects: &mut Objects, id: u32) -> Handled {
    if objects.count(|s| s.pds.len()) >= objects.attr().max_pd as usize {
        return refuse(libc::ENOMEM, "device PD limit reached");
    }
    let pd = objects.alloc_pd();
    objects.session_mut(id)?.pds.insert(pd);
    Ok(Reply::ok(Response::Pd { pd }))
}

/// Deallocates PD `pd`: one of the session's own, or one it imported
/// (which, as on a kernel, destroys the group's PD). EBUSY while any
/// session's objects use it; then no session may import or use it.
fn dealloc_pd(objects: &mut Objects, id: u32, pd: u32) -> Handled {
    let s = objects.session_mut(id)?;
    let owner = if s.pds.contains(&pd) {
        Some(id)
    } else if s.shared_pds.contains(&pd) {
        let group = s.group;
        objects.pd_owner(group, pd)
    } else {
        None
    };
    let Some(owner) = owner else {
        return refuse(libc::ENOENT, format!("no PD {pd}"));
    };
    // Only the sessions of the owner's group (one context and its
    // imports) can have objects in it: the work is in theirs only.
    let group = objects.session_mut(owner)?.group;
    let in_use = objects
        .sessions()
        .filter(|s| s.group == group)
        .any(|s| s.pd_in_use(pd));
    if in_use {
        return refuse(libc::EBUSY, format!("PD {pd} still has MRs, SRQs or QPs"));
    }
    objects.session_mut(owner)?.pds.remove(&pd);
    for s in objects.sessions_mut().filter(|s| s.group == group) {
        s.shared_pds.remove(&pd);
    }
    Ok(Reply::ok(Response::Ok))
}

/// The fields of a RegMr request.
struct MrRequest {
    pd: u32,
    addr: u64,
    len: u64,
    iova: u64,
    access: u32,
}

fn reg_mr(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    counters: &mut DaemonCounters,
    id: u32,
    r: MrRequest,
) -> Handled {
    let MrRequest {
        pd,
        addr,
        len,
        iova,
        access: acc,
    } = r;
    let max_mr = objects.attr().max_mr as usize;
    let max_size = objects.attr().max_mr_size;
    let n = objects.count(|s| s.mrs.len());
    let s = objects.session_mut(id)?;
    if !s.may_use_pd(pd) {
        return refuse(libc::EINVAL, format!("no PD {pd}"));
    }
    if len == 0 || addr.checked_add(len).is_none() || iova.checked_add(len).is_none() {
        return refuse(libc::EINVAL, "empty or wrapping memory range");
    }
    if max_size != 0 && len > max_size {
        return refuse(libc::EINVAL, "region larger than max_mr_size");
    }
    // Remote write or atomic access needs local write (as the kernel's
    // ib_check_mr_access says).
    if acc & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0 && acc & access::LOCAL_WRITE == 0 {
        return refuse(
            libc::EINVAL,
            "remote write/atomic access without local write",
        );
    }
    if n >= max_mr {
        return refuse(libc::ENOMEM, "device MR limit reached");
    }
    let keys = endpoint
        .memory_mut()
        .register(id, pd, addr, len, iova, acc)
        .map_err(|e| Refused {
            errno: e.errno(),
            msg: format!("reg_mr: {e}"),
        })?;
    // Saturating: an implicit ODP region is 2^64 - 1 bytes.
    counters.mr_bytes_registered = counters.mr_bytes_registered.saturating_add(len);
    let mr = objects.alloc_mr_handle();
    let s = objects.session_mut(id)?;
    s.mrs.insert(
        mr,
        Mr {
            pd,
            lkey: keys.lkey,
            rkey: keys.rkey,
            len,
        },
    );
    Ok(Reply::ok(Response::Mr {
        mr,
        lkey: keys.lkey,
        rkey: keys.rkey,
    }))
}

fn dereg_mr(
    objects: &mut Objects,
    endpoint: &mut Endpoint<DeviceMemory>,
    counters: &mut DaemonCounters,
    id: u32,
    mr: u32,
) -> Handled {
    // One of its own, or (as on a kernel) an imported one of its group.
    let group = objects.session_mut(id)?.group;
    let owner = objects.mr_owner(group, mr).unwrap_or(id);
    let s = objects.session_mut(owner)?;
    let Some(lkey) = s.mrs.get(&mr).map(|m| m.lkey) else {
        return refuse(libc::ENOENT, format!("no MR {mr}"));
    };
    match endpoint.memory_mut().deregister(owner, lkey) {
        Ok(()) => {}
        Err(e @ RegError::WindowsBound) => {
            return refuse(e.errno(), format!("dereg_mr: {e}"));
        }
        // The table said it was ours: the memory layer disagrees, which
        // leaves nothing to undo for the client.
        Err(e) => debug!("client {id}: deregister lkey {lkey:#x}: {e}"),
    }
    s.mrs.remove(&mr);
    counters.mr_deregistrations += 1;
    Ok(Reply::ok(Response::Ok))
}

pub fn error_response(errno: i32, msg: &str) -> Response {
    Response::Error {
        errno,
        msg: msg.to_owned(),
    }
}
