//! The CM messages as plain values. [`parse`] and [`emit`] convert between
//! these and the 256-byte MAD.

/// Every MAD is 256 bytes (24-byte header + 232-byte data area).
pub const MAD_LEN: usize = 256;
/// Length of the common MAD header.
pub const MAD_HDR_LEN: usize = 24;
/// `IB_MGMT_BASE_VERSION`.
pub const BASE_VERSION: u8 = 1;
/// `IB_MGMT_CLASS_CM`.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// `IB_CM_CLASS_VERSION`.
pub const CM_CLASS_VERSION: u8 = 2;
/// `IB_MGMT_METHOD_SEND`: every CM message uses it.
pub const METHOD_SEND: u8 = 0x03;
/// The GSI QP's number and Q_Key.
pub const GSI_QPN: u32 = 1;
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Private-data sizes of each message (`enum ib_cm_data_size`).
pub const REQ_PRIVATE: usize = 92;
pub const MRA_PRIVATE: usize = 222;
pub const REJ_PRIVATE: usize = 148;
pub const REP_PRIVATE: usize = 196;
pub const RTU_PRIVATE: usize = 224;
pub const DREQ_PRIVATE: usize = 220;
pub const DREP_PRIVATE: usize = 224;
pub const SIDR_REQ_PRIVATE: usize = 216;
pub const SIDR_REP_PRIVATE: usize = 136;
pub const REJ_ARI: usize = 72;
pub const SIDR_REP_INFO: usize = 72;

/// Attribute IDs of the CM class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttrId {
    Req = 0x0010,
    Mra = 0x0011,
    Rej = 0x0012,
    Rep = 0x0013,
    Rtu = 0x0014,
    Dreq = 0x0015,
    Drep = 0x0016,
    SidrReq = 0x0017,
    SidrRep = 0x0018,
    Lap = 0x0019,
    Apr = 0x001A,
}

/// One path of a REQ (primary or alternate), CM offsets 52..96 / 96..140.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReqPath {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits.
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits.
    pub local_ack_timeout: u8,
}

/// REQ (0x0010).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Req {
    pub local_comm_id: u32,
    /// ECE vendor ID (24 bits; 0 when absent).
    pub vendor_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub responder_resources: u8,
    /// 24 bits.
    pub local_eecn: u32,
    pub initiator_depth: u8,
    /// 24 bits.
    pub remote_eecn: u32,
    /// 5 bits.
    pub remote_cm_response_timeout: u8,
    /// 2 bits: 0 RC, 1 UC, 3 XRC.
    pub transport_type: u8,
    pub flow_control: bool,
    /// 24 bits.
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub pkey: u16,
    /// 4 bits, IB enum (1 = 256 .. 5 = 4096).
    pub path_mtu: u8,
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    pub srq: bool,
    /// 3 bits.
    pub extended_transport: u8,
    pub primary: ReqPath,
    pub alternate: ReqPath,
    pub private_data: [u8; REQ_PRIVATE],
}

/// REP (0x0013).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// 24 bits.
    pub local_eecn: u32,
    /// 24 bits.
    pub starting_psn: u32,
    /// ECE vendor ID, 24 bits (sent as the H, M and L bytes).
    pub vendor_id: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits.
    pub failover_accepted: u8,
    pub flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: [u8; REP_PRIVATE],
}

/// RTU (0x0014).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rtu {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; RTU_PRIVATE],
}

/// Which message a REJ or MRA answers.
pub mod msg_ref {
    pub const REQ: u8 = 0;
    pub const REP: u8 = 1;
    pub const OTHER: u8 = 2;
}

/// REJ reasons rdma_cm uses (`enum ib_cm_rej_reason`).
pub mod rej_reason {
    pub const NO_QP: u16 = 1;
    pub const TIMEOUT: u16 = 4;
    pub const INVALID_SERVICE_ID: u16 = 8;
    pub const STALE_CONN: u16 = 10;
    pub const INVALID_GID: u16 = 12;
    pub const CONSUMER_DEFINED: u16 = 28;
    pub const VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;
}

/// REJ (0x0012).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rej {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits, [`msg_ref`].
    pub msg_rejected: u8,
    /// 7 bits.
    pub reject_info_len: u8,
    pub reason: u16,
    pub ari: [u8; REJ_ARI],
    pub private_data: [u8; REJ_PRIVATE],
}

/// MRA (0x0011).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mra {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits, [`msg_ref`].
    pub msg_mraed: u8,
    /// 5 bits.
    pub service_timeout: u8,
    pub private_data: [u8; MRA_PRIVATE],
}

/// DREQ (0x0015).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dreq {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 24 bits: the receiver ignores a DREQ whose remote QPN is not its QP.
    pub remote_qpn: u32,
    pub private_data: [u8; DREQ_PRIVATE],
}

/// DREP (0x0016).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Drep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; DREP_PRIVATE],
}

/// SIDR_REQ (0x0017).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrReq {
    pub request_id: u32,
    pub pkey: u16,
    pub service_id: u64,
    pub private_data: [u8; SIDR_REQ_PRIVATE],
}

/// SIDR_REP status values.
pub mod sidr_status {
    pub const OK: u8 = 0;
    pub const UNSUPPORTED: u8 = 1;
    pub const REJECT: u8 = 2;
    pub const NO_QP: u8 = 3;
    pub const REDIRECT: u8 = 4;
    pub const VERSION: u8 = 5;
}

/// SIDR_REP (0x0018).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrRep {
    pub request_id: u32,
    pub status: u8,
    pub add_info_len: u8,
    /// 24 bits (VendorID_H 16 + VendorID_L 8).
    pub vendor_id: u32,
    /// 24 bits.
    pub qpn: u32,
    pub service_id: u64,
    pub qkey: u32,
    pub add_info: [u8; SIDR_REP_INFO],
    pub private_data: [u8; SIDR_REP_PRIVATE],
}

/// One CM message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmMsg {
    Req(Box<Req>),
    Rep(Box<Rep>),
    Rtu(Box<Rtu>),
    Rej(Box<Rej>),
    Mra(Box<Mra>),
    Dreq(Box<Dreq>),
    Drep(Box<Drep>),
    SidrReq(Box<SidrReq>),
    SidrRep(Box<SidrRep>),
}

/// A CM MAD: the header fields that vary, and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmMad {
    /// TransactionID: new for REQ / DREQ / SIDR_REQ, echoed by answers.
    pub tid: u64,
    /// AttributeModifier (ECE attr_mod on newer kernels, else 0).
    pub attr_mod: u32,
    pub msg: CmMsg,
}
