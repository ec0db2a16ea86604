//! Stand-in for `wire::CmaHeader` and the service-ID helpers until the
//! cm-wire branch lands (same names and shapes; deleted on merge).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub(crate) const CMA_HDR_LEN: usize = 36;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmaHeader {
    pub src_port: u16,
    pub src: IpAddr,
    pub dst: IpAddr,
}

impl CmaHeader {
    pub fn parse(b: &[u8]) -> Result<CmaHeader, ()> {
        if b.len() < CMA_HDR_LEN || b[0] != 0 {
            return Err(());
        }
        let ver = b[1] >> 4;
        let addr = |o: usize| -> IpAddr {
            if ver == 4 {
                IpAddr::V4(Ipv4Addr::new(b[o + 12], b[o + 13], b[o + 14], b[o + 15]))
            } else {
                let mut a = [0u8; 16];
                a.copy_from_slice(&b[o..o + 16]);
                IpAddr::V6(Ipv6Addr::from(a))
            }
        };
        if ver != 4 && ver != 6 {
            return Err(());
        }
        Ok(CmaHeader {
            src_port: u16::from_be_bytes([b[2], b[3]]),
            src: addr(4),
            dst: addr(20),
        })
    }

    pub fn emit(&self, b: &mut [u8]) {
        b[..CMA_HDR_LEN].fill(0);
        b[1] = if self.src.is_ipv4() { 0x40 } else { 0x60 };
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        for (o, a) in [(4, self.src), (20, self.dst)] {
            match a {
                IpAddr::V4(v4) => b[o + 12..o + 16].copy_from_slice(&v4.octets()),
                IpAddr::V6(v6) => b[o..o + 16].copy_from_slice(&v6.octets()),
            }
        }
    }
}

pub fn service_id(ps: u16, port: u16) -> u64 {
    ((ps as u64) << 16) | port as u64
}

pub fn ps_of(sid: u64) -> Option<u16> {
    (sid >> 32 == 0).then_some((sid >> 16) as u16)
}

pub fn port_of(sid: u64) -> u16 {
    sid as u16
}
