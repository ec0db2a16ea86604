//! Address handles: client-side (the destination travels in each UD send
//! slot); creating one asks the daemon only for the port's GID table, to
//! check the source GID as the kernel does.

use super::error::{Error, Result};
use super::pd::{AhUse, Pd};
use super::wc::Wc;
use rxu_abi::proto::AhAttr;
use transport::qp::wc_flags;

/// An address handle: where UD sends go.
#[derive(Clone)]
pub struct Ah {
    attr: AhAttr,
    /// Keeps the PD (and so the connection) alive as `ibv_ah` does, and
    /// counts in it (dealloc_pd is EBUSY while AHs exist).
    _pd: Option<AhUse>,
}

impl std::fmt::Debug for Ah {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ah").field("attr", &self.attr).finish()
    }
}

impl Ah {
    /// Creates an AH in `pd`, checked as the kernel's `rdma_create_ah`:
    /// port 1 only, a GRH (`is_global`: RoCE addresses by GID), and a
    /// source GID in the table (EINVAL outside it, ENODATA for an empty
    /// entry).
    pub fn new(pd: &Pd, attr: AhAttr) -> Result<Ah> {
        if attr.port_num != 1 {
            return Err(Error::Invalid("no such port"));
        }
        if !attr.is_global {
            return Err(Error::Invalid(
                "RoCE address handles need a GRH (is_global)",
            ));
        }
        let port = pd.context().query_port(1)?;
        match port.gid_entry(attr.sgid_index.into()) {
            Ok(_) => {}
            Err(libc::ENODATA) => return Err(Error::NoGid(attr.sgid_index.into())),
            Err(_) => return Err(Error::Invalid("sgid_index outside the GID table")),
        }
        Ok(Ah {
            attr,
            _pd: Some(AhUse::new(pd)),
        })
    }

    /// An AH back to the sender of a received UD message, as
    /// `ibv_create_ah_from_wc`: the source GID the daemon put in the
    /// completion becomes the destination.
    pub fn from_wc(pd: &Pd, wc: &Wc, sgid_index: u8) -> Result<Ah> {
        if wc.wc_flags & wc_flags::GRH == 0 && wc.src_gid == [0; 16] {
            return Err(Error::Invalid("completion carries no source address"));
        }
        Ah::new(
            pd,
            AhAttr {
                dgid: wc.src_gid,
                sgid_index,
                hop_limit: 64,
                is_global: true,
                port_num: 1,
                ..Default::default()
            },
        )
    }

    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }

    #[cfg(test)]
    pub(crate) fn for_tests(attr: AhAttr) -> Ah {
        Ah { attr, _pd: None }
    }
}
