//! `rxu decode`: print RoCE packets from pcap/pcapng captures, one line per
//! packet, and check every ICRC.
//!
//! Link layers: Ethernet (any number of 802.1Q/802.1ad tags), Linux cooked
//! SLL and SLL2, raw IP, BSD null/loop. RoCEv2 is IPv4/IPv6 + UDP to port
//! 4791; RoCE v1 (EtherType 0x8915, GRH) is decoded too. Everything else is
//! counted and skipped. A UD SEND to QP1 with the GSI Q_Key is decoded
//! further as an IB CM MAD (`CM REQ ...`, or `CM ? (...)` when it is not
//! one).

mod cm;
mod gso;
mod line;
mod link;

use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::Path;

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::PcapError;

pub use line::{analyze, Flavour, FrameReport, Verdict};
pub use link::{linktype, network, Network};

/// Why a capture could not be decoded (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a pcap or pcapng file")]
    NotACapture,
    #[error("bad capture header: {0}")]
    Header(PcapError),
    #[error("corrupt capture record after frame {frame}: {err}")]
    Corrupt { frame: u64, err: PcapError },
    #[error("writing the output: {0}")]
    Output(io::Error),
}

/// Counts over a whole capture.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub frames: u64,
    pub roce_v2: u64,
    pub roce_v1: u64,
    /// Frames that are not RoCE.
    pub other: u64,
    pub bad_icrc: u64,
    pub malformed: u64,
    /// The capture ends in the middle of a record.
    pub truncated: bool,
}

impl Summary {
    /// True when some RoCE packet failed its ICRC or did not parse.
    pub fn failed(&self) -> bool {
        self.bad_icrc + self.malformed > 0
    }

    fn add(&mut self, r: &FrameReport) {
        self.frames += 1;
        match r.flavour {
            Some(Flavour::V1) => self.roce_v1 += 1,
            Some(Flavour::V2) => self.roce_v2 += 1,
            None => self.other += 1,
        }
        match r.verdict {
            Verdict::BadIcrc => self.bad_icrc += 1,
            Verdict::Malformed => self.malformed += 1,
            Verdict::Good | Verdict::Other => {}
        }
    }

    /// The closing line of the output.
    pub fn line(&self) -> String {
        format!(
            "summary: {} frames: {} RoCEv2, {} RoCEv1, {} other (skipped); {} bad ICRC, {} malformed{}",
            self.frames,
            self.roce_v2,
            self.roce_v1,
            self.other,
            self.bad_icrc,
            self.malformed,
            if self.truncated { "; capture truncated" } else { "" }
        )
    }
}

/// Decodes the capture at `path`, writing one line per RoCE packet and a
/// summary line to `out`.
pub fn decode_path(path: &Path, out: &mut dyn Write) -> Result<Summary, DecodeError> {
    let f = File::open(path)?;
    decode_reader(BufReader::new(f), out)
}

const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
const PCAP_MAGICS: [[u8; 4]; 4] = [
    [0xa1, 0xb2, 0xc3, 0xd4],
    [0xd4, 0xc3, 0xb2, 0xa1],
    [0xa1, 0xb2, 0x3c, 0x4d],
    [0x4d, 0x3c, 0xb2, 0xa1],
];

/// Decodes a pcap or pcapng stream (told apart by the first 4 bytes).
pub fn decode_reader<R: Read>(mut r: R, out: &mut dyn Write) -> Result<Summary, DecodeError> {
    let mut magic = [0u8; 4];
    r.read_exact(&mut magic).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => DecodeError::NotACapture,
        _ => DecodeError::Io(e),
    })?;
    let stream = io::Cursor::new(magic).chain(r);
    let mut s = Summary::default();
    if magic == PCAPNG_MAGIC {
        pcapng(stream, out, &mut s)?;
    } else if PCAP_MAGICS.contains(&magic) {
        pcap(stream, out, &mut s)?;
    } else {
        return Err(DecodeError::NotACapture);
    }
    writeln!(out, "{}", s.line()).map_err(DecodeError::Output)?;
    Ok(s)
}

/// Handles one frame: analyse, count, print.
fn frame(
    linktype: u32,
    data: &[u8],
    out: &mut dyn Write,
    s: &mut Summary,
) -> Result<(), DecodeError> {
    let r = analyze(s.frames + 1, network(linktype, data));
    s.add(&r);
    if let Some(l) = &r.line {
        writeln!(out, "{l}").map_err(DecodeError::Output)?;
    }
    Ok(())
}

/// Record-level errors: a cut-off last record is a truncated capture (tcpdump
/// killed mid-write); anything else is corruption.
fn record_error(err: PcapError, s: &mut Summary) -> Result<(), DecodeError> {
    match err {
        PcapError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            s.truncated = true;
            Ok(())
        }
        PcapError::IncompleteBuffer => {
            s.truncated = true;
            Ok(())
        }
        PcapError::IoError(e) => Err(DecodeError::Io(e)),
        err => Err(DecodeError::Corrupt {
            frame: s.frames,
            err,
        }),
    }
}

fn header_error(err: PcapError) -> DecodeError {
    match err {
        PcapError::IoError(e) if e.kind() != io::ErrorKind::UnexpectedEof => DecodeError::Io(e),
        err => DecodeError::Header(err),
    }
}

fn pcap<R: Read>(r: R, out: &mut dyn Write, s: &mut Summary) -> Result<(), DecodeError> {
    let mut reader = PcapReader::new(r).map_err(header_error)?;
    let lt = u32::from(reader.header().datalink);
    // Raw records: the checked form rejects orig_len > snaplen, which real
    // captures (and our own tests) do not always honour.
    while let Some(rec) = reader.next_raw_packet() {
        match rec {
            Ok(p) => frame(lt, &p.data, out, s)?,
            Err(e) => return record_error(e, s),
        }
    }
    Ok(())
}

fn pcapng<R: Read>(r: R, out: &mut dyn Write, s: &mut Summary) -> Result<(), DecodeError> {
    let mut reader = PcapNgReader::new(r).map_err(header_error)?;
    // Link type per interface of the current section.
    let mut ifaces: Vec<u32> = Vec::new();
    while let Some(block) = reader.next_block() {
        let block = match block {
            Ok(b) => b,
            Err(e) => return record_error(e, s),
        };
        match block {
            Block::SectionHeader(_) => ifaces.clear(),
            Block::InterfaceDescription(i) => ifaces.push(u32::from(i.linktype)),
            Block::EnhancedPacket(p) => {
                let lt = iface(&ifaces, p.interface_id);
                frame(lt, &p.data, out, s)?;
            }
            Block::SimplePacket(p) => frame(iface(&ifaces, 0), &p.data, out, s)?,
            Block::Packet(p) => frame(iface(&ifaces, u32::from(p.interface_id)), &p.data, out, s)?,
            _ => {}
        }
    }
    Ok(())
}

/// Link type of interface `id`; an unknown interface decodes as nothing.
fn iface(ifaces: &[u32], id: u32) -> u32 {
    usize::try_from(id)
        .ok()
        .and_then(|i| ifaces.get(i))
        .copied()
        .unwrap_or(u32::MAX)
}
