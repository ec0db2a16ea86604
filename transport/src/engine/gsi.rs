//! QP1, the General Services Interface, as far as RoCEv2 needs it: the
//! UD datagrams that carry connection-manager MADs. The endpoint does not
//! interpret MADs (the CM is the daemon's `rxu-cm`): it hands received
//! ones out whole and sends the ones it is given, as UD SEND_ONLY packets
//! from QP 1 with the GSI Q_Key, the way the kernel's rxe sends for its
//! GSI QP.

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::net::IpAddr;

use crate::qp::udp_sport::udp_sport;
use crate::qp::Transmit;
use crate::wire::packet::emit_packet;
use crate::wire::{Bth, Deth, Headers, Opcode, Packet};
use crate::Psn;

/// The GSI QP's number.
pub const GSI_QPN: u32 = 1;
/// The GSI Q_Key (`IB_QP1_QKEY`): rxe drops QP1 packets with any other.
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The default P_Key, the one every CM MAD carries.
const DEFAULT_PKEY: u16 = 0xFFFF;
/// Received MADs kept until the daemon takes them; more are dropped
/// (a flood must not grow memory; the CM retransmits what matters).
const RX_QUEUE: usize = 1024;
/// MADs waiting to be sent, same reasoning.
const TX_QUEUE: usize = 1024;

/// A datagram that reached QP 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GsiDatagram {
    /// The sender's IP address: replies go there, to QP 1.
    pub src: IpAddr,
    /// The local address it was sent to.
    pub dst: IpAddr,
    /// BTH source of the reply: the DETH source QP.
    pub src_qpn: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// The UD payload (a MAD: 256 bytes from a conforming sender).
    pub payload: Vec<u8>,
}

/// A MAD to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GsiSend {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub dst_qpn: u32,
    pub payload: Vec<u8>,
}

/// QP 1's two queues.
#[derive(Debug, Default)]
pub(crate) struct Gsi {
    rx: VecDeque<GsiDatagram>,
    tx: VecDeque<GsiSend>,
    psn: u32,
    /// Received datagrams that were not GSI UD SEND_ONLY with the GSI
    /// Q_Key, or found the queue full.
    pub dropped: u64,
}

/// Why a datagram to QP 1 was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GsiDrop {
    NotUdSend,
    WrongQkey,
    QueueFull,
}

impl Gsi {
    /// Takes a parsed packet whose BTH DestQP is 1.
    pub(crate) fn receive(
        &mut self,
        pkt: &Packet<'_>,
        src: IpAddr,
        dst: IpAddr,
        hop_limit: u8,
        traffic_class: u8,
    ) -> Result<(), GsiDrop> {
        let deth = match self.classify(pkt) {
            Ok(d) => d,
            Err(e) => {
                self.dropped += 1;
                return Err(e);
            }
        };
        self.rx.push_back(GsiDatagram {
            src,
            dst,
            src_qpn: deth.src_qpn,
            hop_limit,
            traffic_class,
            payload: pkt.payload.to_vec(),
        });
        Ok(())
    }

    fn classify(&self, pkt: &Packet<'_>) -> Result<Deth, GsiDrop> {
        if pkt.opcode() != Opcode::UD_SEND_ONLY {
            return Err(GsiDrop::NotUdSend);
        }
        let Some(deth) = pkt.hdr.deth else {
            return Err(GsiDrop::NotUdSend);
        };
        if deth.qkey != GSI_QKEY {
            return Err(GsiDrop::WrongQkey);
        }
        if self.rx.len() >= RX_QUEUE {
            return Err(GsiDrop::QueueFull);
        }
        Ok(deth)
    }

    pub(crate) fn poll_received(&mut self) -> Option<GsiDatagram> {
        self.rx.pop_front()
    }

    /// Queues a MAD; false (and counted as dropped) when the queue is full.
    pub(crate) fn send(&mut self, s: GsiSend) -> bool {
        if self.tx.len() >= TX_QUEUE {
            self.dropped += 1;
            return false;
        }
        self.tx.push_back(s);
        true
    }

    pub(crate) fn has_transmit(&self) -> bool {
        !self.tx.is_empty()
    }

    /// Writes the next MAD as a packet into `buf` (room for the ICRC
    /// left); returns what the sink needs, or None when nothing is queued
    /// or the buffer is too small (the MAD stays queued).
    pub(crate) fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(Transmit, IpAddr)> {
        let s = self.tx.front()?;
        let hdr = Headers {
            bth: Bth {
                opcode: Opcode::UD_SEND_ONLY,
                pkey: DEFAULT_PKEY,
                dest_qpn: s.dst_qpn,
                psn: Psn::new(self.psn),
                ..Bth::default()
            },
            deth: Some(Deth {
                qkey: GSI_QKEY,
                src_qpn: GSI_QPN,
            }),
            ..Headers::default()
        };
        let len = emit_packet(&hdr, &s.payload, buf).ok()?;
        let s = self.tx.pop_front()?;
        self.psn = self.psn.wrapping_add(1) & 0xFF_FFFF;
        let t = Transmit {
            len,
            dst: s.dst,
            src_port: udp_sport(0, GSI_QPN, s.dst_qpn),
        };
        Some((t, s.src))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

    #[test]
    fn a_sent_mad_is_received_whole() {
        let mut tx = Gsi::default();
        let mad: Vec<u8> = (0..=255u8).collect();
        assert!(tx.send(GsiSend {
            src: A,
            dst: B,
            dst_qpn: GSI_QPN,
            payload: mad.clone(),
        }));
        let mut buf = [0u8; 512];
        let (t, src) = tx.poll_transmit(&mut buf).unwrap();
        assert_eq!((t.dst, src, t.len), (B, A, 12 + 8 + 256 + 4));
        assert!(!tx.has_transmit());
        let pkt = Packet::parse(&buf[..t.len]).unwrap();
        assert_eq!(pkt.hdr.bth.dest_qpn, 1);
        assert_eq!(pkt.hdr.bth.pkey, 0xFFFF);
        let deth = pkt.hdr.deth.unwrap();
        assert_eq!((deth.qkey, deth.src_qpn), (GSI_QKEY, 1));
        let mut rx = Gsi::default();
        rx.receive(&pkt, A, B, 64, 0).unwrap();
        let d = rx.poll_received().unwrap();
        assert_eq!((d.src, d.dst, d.src_qpn, d.payload), (A, B, 1, mad));
    }

    #[test]
    fn wrong_qkey_and_full_queues_drop_and_count() {
        let mut tx = Gsi::default();
        tx.send(GsiSend {
            src: A,
            dst: B,
            dst_qpn: 1,
            payload: vec![0; 256],
        });
        let mut buf = [0u8; 512];
        let (t, _) = tx.poll_transmit(&mut buf).unwrap();
        // DETH Q_Key sits right after the 12-byte BTH.
        buf[12..16].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        let pkt = Packet::parse(&buf[..t.len]).unwrap();
        let mut rx = Gsi::default();
        assert_eq!(rx.receive(&pkt, A, B, 64, 0), Err(GsiDrop::WrongQkey));
        assert_eq!(rx.dropped, 1);
        for _ in 0..TX_QUEUE {
            assert!(tx.send(GsiSend {
                src: A,
                dst: B,
                dst_qpn: 1,
                payload: vec![0; 256],
            }));
        }
        assert!(!tx.send(GsiSend {
            src: A,
            dst: B,
            dst_qpn: 1,
            payload: vec![0; 256],
        }));
        assert_eq!(tx.dropped, 1);
    }
}
