//! Bringing a QP from RESET to RTS with the attributes each transport
//! needs — the dance every verbs program does, in one call.

use super::error::Result;
use super::qp::Qp;
use rxu_abi::proto::{AhAttr, QpAttr, QpType};
use transport::qp::{access, QpState};
use transport::verbs::qp_attr_mask as mask;

/// What a peer must know to connect to a QP (exchanged out of band).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpEndpoint {
    pub qpn: u32,
    /// The first PSN it sends with.
    pub psn: u32,
    pub gid: [u8; 16],
}

/// Connection parameters; `Default` suits loopback tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectOpts {
    /// Remote access the QP grants (`ibv_access_flags`).
    pub access: u32,
    /// `ibv_mtu`; 0 = the port's active MTU.
    pub path_mtu: u8,
    /// UD only.
    pub qkey: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    /// Clamped to the device's limits.
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub sgid_index: u8,
}

impl Default for ConnectOpts {
    fn default() -> Self {
        ConnectOpts {
            access: access::LOCAL_WRITE
                | access::REMOTE_WRITE
                | access::REMOTE_READ
                | access::REMOTE_ATOMIC,
            path_mtu: 0,
            qkey: 0x1111_1111,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            sgid_index: 0,
        }
    }
}

impl Qp {
    /// RESET -> INIT.
    pub fn to_init(&self, opts: &ConnectOpts) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Init as u8,
            port_num: 1,
            ..Default::default()
        };
        let mut m = mask::STATE | mask::PKEY_INDEX | mask::PORT;
        if self.qp_type() == QpType::Ud {
            a.qkey = opts.qkey;
            m |= mask::QKEY;
        } else {
            a.qp_access_flags = opts.access;
            m |= mask::ACCESS_FLAGS;
        }
        self.modify(&a, m)
    }

    /// INIT -> RTR, receiving from `remote` (ignored for UD).
    pub fn to_rtr(&self, remote: &QpEndpoint, opts: &ConnectOpts) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Rtr as u8,
            ..Default::default()
        };
        let mut m = mask::STATE;
        if self.qp_type() != QpType::Ud {
            let path_mtu = match opts.path_mtu {
                0 => self.context().query_port(1)?.active_mtu,
                v => v,
            };
            a.path_mtu = path_mtu;
            a.dest_qp_num = remote.qpn;
            a.rq_psn = remote.psn;
            a.ah = AhAttr {
                dgid: remote.gid,
                sgid_index: opts.sgid_index,
                hop_limit: 64,
                is_global: true,
                port_num: 1,
                ..Default::default()
            };
            m |= mask::AV | mask::PATH_MTU | mask::DEST_QPN | mask::RQ_PSN;
            if self.qp_type() == QpType::Rc {
                let dev = self.context().query_device()?;
                a.max_dest_rd_atomic = clamp(opts.max_dest_rd_atomic, dev.max_qp_rd_atom);
                a.min_rnr_timer = opts.min_rnr_timer;
                m |= mask::MAX_DEST_RD_ATOMIC | mask::MIN_RNR_TIMER;
            }
        }
        self.modify(&a, m)
    }

    /// RTR -> RTS, sending from `psn`.
    pub fn to_rts(&self, psn: u32, opts: &ConnectOpts) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Rts as u8,
            sq_psn: psn,
            ..Default::default()
        };
        let mut m = mask::STATE | mask::SQ_PSN;
        if self.qp_type() == QpType::Rc {
            let dev = self.context().query_device()?;
            a.timeout = opts.timeout;
            a.retry_cnt = opts.retry_cnt;
            a.rnr_retry = opts.rnr_retry;
            a.max_rd_atomic = clamp(opts.max_rd_atomic, dev.max_qp_init_rd_atom);
            m |= mask::TIMEOUT | mask::RETRY_CNT | mask::RNR_RETRY | mask::MAX_QP_RD_ATOMIC;
        }
        self.modify(&a, m)
    }

    /// RESET -> INIT -> RTR -> RTS: sends from `local_psn`, talks to
    /// `remote` (connected types).
    pub fn connect(&self, local_psn: u32, remote: &QpEndpoint, opts: &ConnectOpts) -> Result<()> {
        self.to_init(opts)?;
        self.to_rtr(remote, opts)?;
        self.to_rts(local_psn, opts)
    }
}

fn clamp(want: u8, max: u32) -> u8 {
    u32::from(want).min(max).max(u32::from(want.min(1))) as u8
}

#[cfg(test)]
mod tests {
    use super::clamp;

    #[test]
    fn clamp_keeps_at_least_one_when_asked() {
        assert_eq!(clamp(16, 4), 4);
        assert_eq!(clamp(2, 128), 2);
        assert_eq!(clamp(1, 0), 1);
        assert_eq!(clamp(0, 8), 0);
    }
}
