//! The out-of-band control channel: one line per message, over TCP on
//! loopback or over stdin/stdout relayed by whoever started both peers.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::args::Link;

pub struct Ctl {
    reader: BufReader<Box<dyn Read>>,
    writer: Box<dyn Write>,
    /// stdio lines carry a `CTL ` prefix so they stand out from RESULT.
    prefix: &'static str,
    /// The TCP link, for noticing the peer's death without reading.
    tcp: Option<TcpStream>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Peek {
    Nothing,
    Data,
    Closed,
}

fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what}: timed out"))
}

impl Ctl {
    pub fn open(link: &Link, timeout: Duration) -> io::Result<Ctl> {
        let deadline = Instant::now() + timeout;
        let stream = match link {
            Link::Stdio => {
                return Ok(Ctl {
                    reader: BufReader::new(Box::new(io::stdin())),
                    writer: Box::new(io::stdout()),
                    prefix: "CTL ",
                    tcp: None,
                })
            }
            Link::Listen(addr) => {
                let l = TcpListener::bind(addr.as_str())?;
                println!("LISTEN {}", l.local_addr()?);
                io::stdout().flush()?;
                l.set_nonblocking(true)?;
                loop {
                    match l.accept() {
                        Ok((s, _)) => break s,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            if Instant::now() >= deadline {
                                return Err(timed_out("waiting for the client"));
                            }
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            Link::Connect(addr) => loop {
                match TcpStream::connect(addr.as_str()) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() >= deadline => return Err(e),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            },
        };
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        Ok(Ctl {
            reader: BufReader::new(Box::new(stream.try_clone()?)),
            writer: Box::new(stream.try_clone()?),
            prefix: "",
            tcp: Some(stream),
        })
    }

    /// What the TCP link holds, looked at without consuming.
    fn peek(&self) -> Peek {
        let Some(s) = &self.tcp else {
            return Peek::Nothing;
        };
        if s.set_nonblocking(true).is_err() {
            return Peek::Nothing;
        }
        let mut b = [0u8; 1];
        let p = match s.peek(&mut b) {
            Ok(0) => Peek::Closed,
            Ok(_) => Peek::Data,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                Peek::Nothing
            }
            Err(_) => Peek::Closed,
        };
        let _ = s.set_nonblocking(false);
        p
    }

    /// Whether the peer closed the TCP link with nothing left to read (it
    /// exited or was killed: the kernel closes its sockets). Always false
    /// over stdio, where the relay decides.
    pub fn peer_closed(&mut self) -> bool {
        self.reader.buffer().is_empty() && self.peek() == Peek::Closed
    }

    /// The next control line if one has arrived, without waiting for one
    /// (over stdio only lines already buffered count). EOF is an error.
    pub fn try_recv(&mut self) -> io::Result<Option<String>> {
        if self.reader.buffer().is_empty() && self.peek() == Peek::Nothing {
            return Ok(None);
        }
        self.recv().map(Some)
    }

    pub fn send(&mut self, line: &str) -> io::Result<()> {
        writeln!(self.writer, "{}{line}", self.prefix)?;
        self.writer.flush()
    }

    /// The next control line (without prefix). EOF is an error: the peer
    /// is gone.
    pub fn recv(&mut self) -> io::Result<String> {
        // Bounded: a relay that forwards other lines gets 10k of them.
        for _ in 0..10_000 {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "peer closed the control channel",
                ));
            }
            if let Some(rest) = line.trim_end().strip_prefix(self.prefix) {
                return Ok(rest.to_string());
            }
        }
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "no control line",
        ))
    }

    /// Receives a line starting with `word`; returns the rest.
    pub fn expect(&mut self, word: &str) -> io::Result<String> {
        let line = self.recv()?;
        match line.strip_prefix(word) {
            Some(rest) => Ok(rest.trim().to_string()),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("expected {word}, got {line:?}"),
            )),
        }
    }
}

/// What each side tells the other about its QP(s) and buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    pub qpn: u32,
    /// Every QP, `qpn` first (multi-QP workloads; one entry otherwise).
    pub qpns: Vec<u32>,
    pub psn: u32,
    pub gid: [u8; 16],
    pub rkey: u32,
    pub addr: u64,
    pub len: u64,
}

impl PeerInfo {
    pub fn line(&self) -> String {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        let mut line = format!(
            "INFO qpn={} psn={} gid={gid} rkey={} addr={} len={}",
            self.qpn, self.psn, self.rkey, self.addr, self.len
        );
        if self.qpns.len() > 1 {
            let list: Vec<String> = self.qpns.iter().map(u32::to_string).collect();
            line += &format!(" qpns={}", list.join(","));
        }
        line
    }

    /// One QP's info.
    pub fn single(qpn: u32, psn: u32, gid: [u8; 16], rkey: u32, addr: u64, len: u64) -> PeerInfo {
        PeerInfo {
            qpn,
            qpns: vec![qpn],
            psn,
            gid,
            rkey,
            addr,
            len,
        }
    }

    /// Parses the part after `INFO`.
    pub fn parse(s: &str) -> Result<PeerInfo, String> {
        let mut p = PeerInfo {
            qpn: 0,
            qpns: Vec::new(),
            psn: 0,
            gid: [0; 16],
            rkey: 0,
            addr: 0,
            len: 0,
        };
        let bad = |k: &str| format!("bad {k} in {s:?}");
        for kv in s.split_whitespace() {
            let (k, v) = kv.split_once('=').ok_or_else(|| bad(kv))?;
            match k {
                "qpn" => p.qpn = v.parse().map_err(|_| bad(k))?,
                "psn" => p.psn = v.parse().map_err(|_| bad(k))?,
                "rkey" => p.rkey = v.parse().map_err(|_| bad(k))?,
                "addr" => p.addr = v.parse().map_err(|_| bad(k))?,
                "len" => p.len = v.parse().map_err(|_| bad(k))?,
                "qpns" => {
                    p.qpns = v
                        .split(',')
                        .map(|n| n.parse().map_err(|_| bad(k)))
                        .collect::<Result<_, _>>()?
                }
                "gid" => {
                    if v.len() != 32 {
                        return Err(bad(k));
                    }
                    for (i, b) in p.gid.iter_mut().enumerate() {
                        *b = u8::from_str_radix(&v[2 * i..2 * i + 2], 16).map_err(|_| bad(k))?;
                    }
                }
                _ => return Err(bad(k)),
            }
        }
        if p.qpns.is_empty() {
            p.qpns.push(p.qpn);
        }
        if p.qpns[0] != p.qpn {
            return Err(bad("qpns"));
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_round_trip() {
        let mut i = PeerInfo {
            qpn: 0x11,
            qpns: vec![0x11],
            psn: 0xabcdef,
            gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 9],
            rkey: 0xdead_beef,
            addr: 0x7f00_0000_1000,
            len: 65536,
        };
        let line = i.line();
        assert_eq!(
            PeerInfo::parse(line.strip_prefix("INFO").unwrap()).unwrap(),
            i
        );
        i.qpns = vec![0x11, 0x12, 0x40];
        let line = i.line();
        assert!(line.ends_with(" qpns=17,18,64"), "{line}");
        assert_eq!(
            PeerInfo::parse(line.strip_prefix("INFO").unwrap()).unwrap(),
            i
        );
        assert!(PeerInfo::parse("qpn=1 qpns=2,1").is_err());
        assert!(PeerInfo::parse("qpn=x").is_err());
        assert!(PeerInfo::parse("gid=00").is_err());
    }
}
