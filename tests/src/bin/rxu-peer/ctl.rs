//! The out-of-band control channel: one line per message, over TCP on
//! loopback or over stdin/stdout relayed by whoever started both peers.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::args::Link;

pub struct Ctl {
    reader: Box<dyn BufRead>,
    writer: Box<dyn Write>,
    /// stdio lines carry a `CTL ` prefix so they stand out from RESULT.
    prefix: &'static str,
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
                    reader: Box::new(BufReader::new(io::stdin())),
                    writer: Box::new(io::stdout()),
                    prefix: "CTL ",
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
            reader: Box::new(BufReader::new(stream.try_clone()?)),
            writer: Box::new(stream),
            prefix: "",
        })
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

/// What each side tells the other about its QP and buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    pub qpn: u32,
    pub psn: u32,
    pub gid: [u8; 16],
    pub rkey: u32,
    pub addr: u64,
    pub len: u64,
}

impl PeerInfo {
    pub fn line(&self) -> String {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "INFO qpn={} psn={} gid={gid} rkey={} addr={} len={}",
            self.qpn, self.psn, self.rkey, self.addr, self.len
        )
    }

    /// Parses the part after `INFO`.
    pub fn parse(s: &str) -> Result<PeerInfo, String> {
        let mut p = PeerInfo {
            qpn: 0,
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
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_round_trip() {
        let i = PeerInfo {
            qpn: 0x11,
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
        assert!(PeerInfo::parse("qpn=x").is_err());
        assert!(PeerInfo::parse("gid=00").is_err());
    }
}
