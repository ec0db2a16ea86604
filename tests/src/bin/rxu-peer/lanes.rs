//! Several RC QPs ("lanes") of one process on one CQ and one registered
//! buffer, each connected to the peer's lane of the same index.

use rxu_client::*;

use crate::ctl::PeerInfo;
use crate::peer::{e, Res, ALL_ACCESS};

pub struct Lanes {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub qps: Vec<Qp>,
    pub buf: MrBuf,
    /// Lane `q` sends from `psn + q`.
    pub psn: u32,
}

impl Lanes {
    /// `n` QPs of `cap`, a CQ of `cqe`, `buf_len` bytes registered with
    /// full access. QP `q` has user_handle `q + 1` (async events name it).
    pub fn new(device: &str, n: usize, cap: QpCap, cqe: u32, buf_len: usize) -> Res<Lanes> {
        let ctx = Context::open(device).map_err(e("open device"))?;
        let pd = Pd::alloc(&ctx).map_err(e("alloc_pd"))?;
        let cq = Cq::create(&ctx, cqe, 0, None, 0).map_err(e("create_cq"))?;
        let mut qps = Vec::with_capacity(n);
        for q in 0..n {
            let mut init = QpInit::new(QpType::Rc, &cq, &cq, cap);
            init.user_handle = q as u64 + 1;
            qps.push(Qp::create(&pd, &init).map_err(e("create_qp"))?);
        }
        let buf = MrBuf::new(&pd, buf_len.max(1), ALL_ACCESS).map_err(e("reg_mr"))?;
        let psn = (std::process::id() << 8) & 0xff_ff00;
        Ok(Lanes {
            ctx,
            pd,
            cq,
            qps,
            buf,
            psn,
        })
    }

    pub fn info(&self) -> Res<PeerInfo> {
        Ok(PeerInfo {
            qpn: self.qps[0].qpn(),
            qpns: self.qps.iter().map(Qp::qpn).collect(),
            psn: self.psn,
            gid: self.ctx.query_gid(0).map_err(e("query_gid"))?,
            rkey: self.buf.rkey(),
            addr: self.buf.addr(),
            len: self.buf.len() as u64,
        })
    }

    /// Lane `q` to the peer's lane `q`, RESET to RTS.
    pub fn connect(&self, remote: &PeerInfo, opts: &ConnectOpts) -> Res<()> {
        if remote.qpns.len() != self.qps.len() {
            return Err(format!(
                "peer has {} QPs, we have {}",
                remote.qpns.len(),
                self.qps.len()
            ));
        }
        for (q, (qp, &rqpn)) in self.qps.iter().zip(&remote.qpns).enumerate() {
            let ep = QpEndpoint {
                qpn: rqpn,
                psn: (remote.psn + q as u32) & 0xff_ffff,
                gid: remote.gid,
            };
            qp.connect((self.psn + q as u32) & 0xff_ffff, &ep, opts)
                .map_err(e("modify_qp to RTS"))?;
        }
        Ok(())
    }
}
