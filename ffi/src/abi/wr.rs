//! Work requests and completions (`verbs.h`, unchanged since rdma-core 39).

use std::ffi::{c_int, c_void};

use super::objects::{IbvAh, IbvMw, IbvMwBindInfo};

/// `struct ibv_sge` (16): the client library's `Sge` has the same layout
/// (asserted in `abi::layout`), so C arrays are viewed as `&[Sge]`.
pub type IbvSge = rxu_client::Sge;

/// `struct ibv_data_buf` (16).
#[repr(C)]
pub struct IbvDataBuf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_wc` (48).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvWc {
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: c_int,
    /// `enum ibv_wc_opcode`.
    pub opcode: c_int,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// `__be32 imm_data` or (IBV_WC_WITH_INV) `invalidated_rkey`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_int,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `wr.rdma` / `wr.atomic` / `wr.ud` of `struct ibv_send_wr`, as three
/// views of the same 32 bytes at offset 40.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvSendWrRemote {
    /// rdma/atomic: `remote_addr`; ud: `struct ibv_ah *`.
    pub addr_or_ah: u64,
    /// rdma: `rkey` (low 4 bytes); atomic: `compare_add`; ud: `remote_qpn`
    /// (low 4 bytes) and `remote_qkey` (high 4 bytes).
    pub word1: u64,
    /// atomic: `swap`.
    pub swap: u64,
    /// atomic: `rkey` (low 4 bytes).
    pub atomic_rkey: u64,
}

/// `struct ibv_send_wr` (128).
#[repr(C)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`.
    pub opcode: c_int,
    pub send_flags: u32,
    /// `__be32 imm_data` or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: IbvSendWrRemote,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    /// `bind_mw` / `tso` union (48 bytes).
    pub bind_mw_or_tso: [u64; 6],
}

impl IbvSendWr {
    pub fn rdma_rkey(&self) -> u32 {
        self.wr.word1 as u32
    }
    pub fn ud_ah(&self) -> *mut IbvAh {
        self.wr.addr_or_ah as usize as *mut IbvAh
    }
    pub fn ud_remote_qpn(&self) -> u32 {
        self.wr.word1 as u32
    }
    pub fn ud_remote_qkey(&self) -> u32 {
        (self.wr.word1 >> 32) as u32
    }
    /// `bind_mw.mw` (offset 80).
    pub fn bind_mw(&self) -> *mut IbvMw {
        self.bind_mw_or_tso[0] as usize as *mut IbvMw
    }
    /// `bind_mw.rkey` (offset 88): the key after the bind.
    pub fn bind_rkey(&self) -> u32 {
        self.bind_mw_or_tso[1] as u32
    }
    /// `bind_mw.bind_info` (offset 96).
    pub fn bind_info(&self) -> IbvMwBindInfo {
        let w = &self.bind_mw_or_tso;
        IbvMwBindInfo {
            mr: w[2] as usize as *mut super::objects::IbvMr,
            addr: w[3],
            length: w[4],
            mw_access_flags: w[5] as u32,
        }
    }
}

/// `struct ibv_recv_wr` (32).
#[repr(C)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}
