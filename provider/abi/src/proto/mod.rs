//! The control protocol between clients and `rxud` (the slow path).
//!
//! Shared by the daemon, the client library and the `rxu` tool.
//!
//! Transport: a Unix `SOCK_SEQPACKET` socket (`<runtime dir>/<device>.sock`,
//! mode 0600). Seqpacket keeps message boundaries and carries SCM_RIGHTS,
//! so no framing layer is needed. Each message is one datagram holding a
//! postcard-encoded [`Request`] (client -> daemon) or [`Response`]
//! (daemon -> client), at most [`MAX_MSG`] bytes; file descriptors travel
//! in the same datagram as SCM_RIGHTS, in the order each variant's doc
//! lists. Strictly request/response: the daemon never sends unsolicited
//! messages on this socket (events go to the sockets in `Hello` and
//! `CreateCq`).
//!
//! Handles (pd, mr, cq, srq, qp) are daemon-assigned numbers scoped to the
//! connection: a handle of another client is "no such object" (ENOENT /
//! EINVAL), never a way in — except PDs and MRs between connections that
//! presented the same `cmd_fd` open file (BindCmdFd / ImportContext:
//! `ibv_import_device`). QP handles are QP numbers (24 bit); PD numbers
//! and MR handles are unique in the device.
//!
//! `user_handle` values are opaque to the daemon: it writes them back in
//! events (the libibverbs provider passes its `struct ibv_cq *` /
//! `struct ibv_qp *` addresses, as the kernel's uverbs does).

pub mod abi;
pub mod attr;
pub mod cm;
pub mod fdpass;

use serde::{Deserialize, Serialize};

/// Protocol version; `Hello` with another version is refused.
pub const PROTO_VERSION: u32 = 1;
/// Largest encoded message.
pub const MAX_MSG: usize = 16 * 1024;
/// Most file descriptors one message carries.
pub const MAX_FDS: usize = 4;

/// Transport service of a QP (the shared vocabulary's).
pub use transport::verbs::QpType;

pub use attr::{AhAttr, QpAttr, QpCap};

/// A request from a client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// First message. fds: [0] the client's `/proc/self/mem` (opened
    /// O_RDWR) through which the daemon reaches registered memory, [1] the
    /// write end of the async event socket (SOCK_SEQPACKET; the daemon
    /// writes 16-byte `ib_uverbs_async_event_desc` records), [2] the
    /// client's doorbell eventfd (rung after posting when a ring's
    /// consumer-sleeping flag is set). `admin` clients (the rxu tool)
    /// send no fds and may only use Status / Stats / Shutdown / Query*.
    Hello {
        version: u32,
        pid: u32,
        admin: bool,
    },
    QueryDevice,
    QueryPort {
        port: u8,
    },
    AllocPd,
    DeallocPd {
        pd: u32,
    },
    /// Register `[addr, addr+len)` of the client's memory; `iova` is the
    /// address remote peers use (== addr unless reg_mr with iova).
    RegMr {
        pd: u32,
        addr: u64,
        len: u64,
        iova: u64,
        access: u32,
    },
    DeregMr {
        mr: u32,
    },
    /// `ibv_rereg_mr`: `flags` are IBV_REREG_MR_CHANGE_TRANSLATION (1:
    /// `addr`, `len`), _CHANGE_PD (2: `pd`), _CHANGE_ACCESS (4:
    /// `access`); the keys stay. Answered with `Response::Mr`.
    ReregMr {
        mr: u32,
        flags: u32,
        pd: u32,
        addr: u64,
        len: u64,
        access: u32,
    },
    /// `ibv_alloc_mw`: `mw_type` is the `ibv_mw_type` (1 or 2).
    AllocMw {
        pd: u32,
        mw_type: u32,
    },
    DeallocMw {
        mw: u32,
    },
    /// fds: [0] optional write end of the completion channel socket
    /// (8-byte records carrying `user_handle`), present iff `channel`.
    /// `timestamps`: every entry carries its completion times (ring slots
    /// of [`abi::CQE_STAMPED_SIZE`] bytes instead of [`abi::CQE_SIZE`]).
    CreateCq {
        cqe: u32,
        comp_vector: u32,
        user_handle: u64,
        channel: bool,
        timestamps: bool,
    },
    /// Grows or shrinks the CQ; the reply carries a new ring.
    ResizeCq {
        cq: u32,
        cqe: u32,
    },
    DestroyCq {
        cq: u32,
    },
    CreateSrq {
        pd: u32,
        max_wr: u32,
        max_sge: u32,
        srq_limit: u32,
        user_handle: u64,
    },
    /// mask: IBV_SRQ_MAX_WR 1, IBV_SRQ_LIMIT 2. With MAX_WR the reply is
    /// `Srq` with the resized ring (the client, which must not post
    /// meanwhile, produces into it from then on); otherwise `Ok`.
    ModifySrq {
        srq: u32,
        mask: u32,
        max_wr: u32,
        srq_limit: u32,
    },
    QuerySrq {
        srq: u32,
    },
    DestroySrq {
        srq: u32,
    },
    CreateQp {
        pd: u32,
        qp_type: QpType,
        send_cq: u32,
        recv_cq: u32,
        srq: Option<u32>,
        cap: QpCap,
        sq_sig_all: bool,
        user_handle: u64,
    },
    ModifyQp {
        qp: u32,
        mask: u32,
        attr: QpAttr,
    },
    QueryQp {
        qp: u32,
        mask: u32,
    },
    DestroyQp {
        qp: u32,
    },
    /// Devices, clients and QPs, for `rxu status`.
    Status,
    /// Counters, for `rxu stats`.
    Stats,
    /// The bytes from `offset` on of the last reply that came as a
    /// [`Response::Chunk`] (too large for one message).
    Chunk {
        offset: u64,
    },
    /// Stop the daemon; refused while clients are open unless `force`.
    Shutdown {
        force: bool,
    },
    /// First message of an rdma_cm client (the ucma emulator): no fds; it
    /// may then send only `Cm` requests and queries.
    CmHello {
        version: u32,
        pid: u32,
    },
    /// rdma_cm requests ([`cm`]).
    Cm(cm::CmRequest),
    /// `ibv_attach_mcast`: UD QP `qp` receives what is sent to the
    /// multicast group of `gid` (RoCEv2: IPv4-mapped `::ffff:a.b.c.d`,
    /// a.b.c.d in 224.0.0.0/4); `lid` is ignored on RoCE.
    AttachMcast {
        qp: u32,
        gid: [u8; 16],
        lid: u16,
    },
    /// `ibv_detach_mcast`.
    DetachMcast {
        qp: u32,
        gid: [u8; 16],
        lid: u16,
    },
    /// The context's `cmd_fd`. fds: [0] a copy of it. A later
    /// `ImportContext` presenting the same open file (from this process
    /// or one it was passed to) shares this session's PDs and MRs.
    BindCmdFd,
    /// `ibv_import_device`. fds: [0] the imported `cmd_fd`. This session
    /// joins the context opened on that file (EINVAL: none on this
    /// device): its PDs can be imported and its MRs queried, and its PDs
    /// and MRs outlive it while a session of the group remains.
    ImportContext,
    /// `ibv_import_pd`: PD `pd` of the group may be used by this session.
    ImportPd {
        pd: u32,
    },
    /// `ibv_import_mr`: the keys and length of MR `mr` of the group
    /// ([`Response::ImportedMr`]).
    ImportMr {
        mr: u32,
    },
    /// `ibv_advise_mr`: `advice` is an `enum ibv_advise_mr_advice`,
    /// `flags` `IBV_ADVISE_MR_FLAG_*`; the ranges are lkeys of on-demand
    /// regions of `pd`.
    AdviseMr {
        pd: u32,
        advice: u32,
        flags: u32,
        ranges: Vec<MrRange>,
    },
    /// `ibv_open_xrcd`. fds: [0] the file that names a domain shared
    /// between processes (by its inode), absent for a private domain;
    /// `oflags`: O_CREAT (create if the file names none yet), O_EXCL
    /// (fail if it does). Answered with `Response::Xrcd`.
    OpenXrcd {
        oflags: u32,
    },
    /// `ibv_close_xrcd`: EBUSY while this session's XRC SRQs or XRC
    /// target QPs use it.
    CloseXrcd {
        xrcd: u32,
    },
    /// `ibv_create_srq_ex` with IBV_SRQT_XRC: an SRQ of XRC domain
    /// `xrcd` completing on CQ `cq`. Answered with `Response::XrcSrq`.
    CreateXrcSrq {
        pd: u32,
        xrcd: u32,
        cq: u32,
        max_wr: u32,
        max_sge: u32,
        srq_limit: u32,
        user_handle: u64,
    },
    /// `ibv_create_qp_ex` with IBV_QPT_XRC_RECV: a target QP of domain
    /// `xrcd` (no PD, CQ or queues). Answered with `Response::Qp`, whose
    /// one fd is an SQ ring of one slot nothing is ever posted to.
    CreateXrcTgtQp {
        xrcd: u32,
        user_handle: u64,
    },
    /// `ibv_open_qp`: XRC target QP `qpn` of domain `xrcd` (which this
    /// session must have open), made by this or another process; it lives
    /// while any session holds it. Answered as `CreateXrcTgtQp`.
    OpenXrcTgtQp {
        xrcd: u32,
        qpn: u32,
        user_handle: u64,
    },
}

/// `len` bytes at the client's `addr`, through `lkey` (an `ibv_sge`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MrRange {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

/// Most ranges one `AdviseMr` carries (well inside [`MAX_MSG`]).
pub const MAX_ADVISE_RANGES: usize = 256;

/// Device attributes (the fields of `struct ibv_device_attr` rxu reports).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceAttr {
    pub fw_ver: String,
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_mw: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_ee_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub atomic_cap: u32,
    pub max_ah: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    pub max_inline_data: u32,
}

/// Port attributes (the fields of `struct ibv_port_attr` rxu reports).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortAttr {
    pub state: u8,
    pub max_mtu: u8,
    pub active_mtu: u8,
    pub gid_tbl_len: u32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub pkey_tbl_len: u16,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub netdev: String,
    /// The GID table: one RoCE v2 entry per address.
    pub gids: Vec<[u8; 16]>,
}

impl PortAttr {
    /// GID `index` of this port, or the errno the kernel's GID lookup
    /// (`rdma_get_gid_attr`, behind modify_qp and create_ah) answers:
    /// EINVAL outside the table (`gid_tbl_len` entries), ENODATA for an
    /// empty entry inside it.
    pub fn gid_entry(&self, index: u32) -> Result<&[u8; 16], i32> {
        if index >= self.gid_tbl_len {
            return Err(libc::EINVAL);
        }
        self.gids.get(index as usize).ok_or(libc::ENODATA)
    }
}

/// One line of `rxu status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientStatus {
    pub pid: u32,
    pub admin: bool,
    pub pds: u32,
    pub mrs: u32,
    pub cqs: u32,
    pub srqs: u32,
    pub qps: Vec<QpStatus>,
    /// rdma_cm ids (clients of the ucma emulator).
    pub cm_ids: Vec<cm::CmIdStatus>,
    /// SO_PEERCRED's uid of the connection.
    pub uid: u32,
}

/// One kind of the daemon's per-client and per-uid quota.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaLimit {
    pub name: String,
    pub per_session: u64,
    pub per_uid: u64,
}

/// What one uid holds, in the order of the `limits` beside it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UidUse {
    pub uid: u32,
    pub used: Vec<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpStatus {
    pub qpn: u32,
    pub qp_type: u8,
    pub state: u8,
    pub dest_qpn: u32,
    pub dest: String,
}

/// A named counter value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    pub name: String,
    pub value: u64,
}

/// A reply from the daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// Generic success.
    Ok,
    /// Failure: a positive errno value and a message for the log.
    Error {
        errno: i32,
        msg: String,
    },
    /// To Hello.
    Hello {
        device: String,
        client_id: u32,
        max_inline_data: u32,
    },
    Device(DeviceAttr),
    Port(PortAttr),
    Pd {
        pd: u32,
    },
    Mr {
        mr: u32,
        lkey: u32,
        rkey: u32,
    },
    /// To AllocMw.
    Mw {
        mw: u32,
        rkey: u32,
    },
    /// fds: [0] the CQ ring (this side consumes; slot = [`abi::CQE_SIZE`],
    /// or [`abi::CQE_STAMPED_SIZE`] for a CQ with timestamps).
    Cq {
        cq: u32,
        cqe: u32,
    },
    /// fds: [0] the SRQ ring (this side produces; slot [`abi::recv_slot_size`]).
    Srq {
        srq: u32,
        max_wr: u32,
        max_sge: u32,
        srq_limit: u32,
    },
    /// fds: [0] SQ ring, [1] RQ ring (absent with an SRQ).
    Qp {
        qpn: u32,
        cap: QpCap,
        sq_slot: u32,
        rq_slot: u32,
    },
    QpAttr {
        attr: QpAttr,
        cap: QpCap,
    },
    Status {
        device: String,
        addrs: Vec<String>,
        netdev: String,
        clients: Vec<ClientStatus>,
        /// The quota's kinds and limits, and what each uid holds.
        limits: Vec<QuotaLimit>,
        uids: Vec<UidUse>,
    },
    Stats {
        device: Vec<Counter>,
        qps: Vec<(u32, Vec<Counter>)>,
    },
    /// A reply larger than [`MAX_MSG`], in pieces: `bytes` are the
    /// encoded reply's `[offset, offset + bytes.len())` of `total`; the
    /// rest comes with `Request::Chunk` ([`unchunk`]).
    Chunk {
        total: u64,
        offset: u64,
        bytes: Vec<u8>,
    },
    /// To a `Cm` request.
    Cm(cm::CmResponse),
    /// To OpenXrcd.
    Xrcd {
        xrcd: u32,
    },
    /// To CreateXrcSrq: as `Srq`, with `srqn`, the number XRC
    /// initiators name it by (`ibv_get_srq_num`). fds: [0] the SRQ ring.
    XrcSrq {
        srq: u32,
        srqn: u32,
        max_wr: u32,
        max_sge: u32,
        srq_limit: u32,
    },
    /// To ImportMr.
    ImportedMr {
        pd: u32,
        lkey: u32,
        rkey: u32,
        len: u64,
    },
}

/// Largest encoded reply [`unchunk`] puts together (a status of 16k QPs
/// is a few MiB).
pub const MAX_CHUNKED: u64 = 256 << 20;

/// Puts a reply that came as [`Response::Chunk`] back together, asking
/// `fetch(offset)` for each further piece; any other reply is returned
/// as it is. Bounded: each piece must advance, `total` is at most
/// [`MAX_CHUNKED`].
pub fn unchunk<E>(
    first: Response,
    mut fetch: impl FnMut(u64) -> Result<Response, E>,
    bad: impl Fn(String) -> E,
) -> Result<Response, E> {
    let Response::Chunk {
        total,
        offset: 0,
        bytes,
    } = first
    else {
        return Ok(first);
    };
    if total > MAX_CHUNKED {
        return Err(bad(format!("a reply of {total} bytes")));
    }
    let mut buf = bytes;
    while (buf.len() as u64) < total {
        let at = buf.len() as u64;
        match fetch(at)? {
            Response::Chunk { offset, bytes, .. } if offset == at && !bytes.is_empty() => {
                buf.extend_from_slice(&bytes);
            }
            Response::Error { errno, msg } => {
                return Err(bad(format!("chunk at {at}: {msg} (errno {errno})")))
            }
            other => return Err(bad(format!("chunk at {at}: unexpected {other:?}"))),
        }
    }
    if buf.len() as u64 != total {
        return Err(bad(format!("{} bytes of a {total}-byte reply", buf.len())));
    }
    postcard::from_bytes(&buf).map_err(|e| bad(e.to_string()))
}

/// Encodes a message of any size: the daemon's whole reply before it is
/// cut into [`Response::Chunk`]s.
pub fn encode_unbounded<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtoError> {
    Ok(postcard::to_stdvec(msg)?)
}

/// Encoding failures.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    #[error("message too large ({0} bytes)")]
    TooLarge(usize),
    #[error("malformed message: {0}")]
    Decode(#[from] postcard::Error),
}

/// Encodes a message into a fresh buffer.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, ProtoError> {
    let v = postcard::to_stdvec(msg)?;
    if v.len() > MAX_MSG {
        return Err(ProtoError::TooLarge(v.len()));
    }
    Ok(v)
}

/// Decodes one message; malformed input is an error, never a panic.
pub fn decode<'a, T: Deserialize<'a>>(buf: &'a [u8]) -> Result<T, ProtoError> {
    if buf.len() > MAX_MSG {
        return Err(ProtoError::TooLarge(buf.len()));
    }
    Ok(postcard::from_bytes(buf)?)
}

#[cfg(test)]
mod port_attr_tests {
    use super::PortAttr;

    #[test]
    fn gid_entries_answer_as_the_kernel_lookup() {
        let p = PortAttr {
            gid_tbl_len: 4,
            gids: vec![[1; 16], [2; 16]],
            ..PortAttr::default()
        };
        assert_eq!(p.gid_entry(1), Ok(&[2; 16]));
        // Inside the table, no address there: ENODATA.
        assert_eq!(p.gid_entry(2), Err(libc::ENODATA));
        assert_eq!(p.gid_entry(3), Err(libc::ENODATA));
        // Outside it: EINVAL.
        assert_eq!(p.gid_entry(4), Err(libc::EINVAL));
        assert_eq!(p.gid_entry(u32::MAX), Err(libc::EINVAL));
    }
}
