//! The `rxu` command-line tool.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use provider::decode::{self, DecodeError};

#[derive(Parser)]
#[command(
    name = "rxu",
    version,
    about = "rxu: a software RDMA NIC (RoCEv2 over UDP)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the RoCE packets of a pcap/pcapng capture, one line each, and
    /// check every ICRC. Exit status: 0 all good, 1 a RoCE packet has a bad
    /// ICRC or does not parse, 2 the file cannot be read.
    Decode {
        /// Capture file (pcap or pcapng; Ethernet, VLAN, SLL, SLL2, raw IP).
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Decode { file } => decode_cmd(&file),
    }
}

fn decode_cmd(file: &std::path::Path) -> ExitCode {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let res = decode::decode_path(file, &mut out);
    let flushed = out.flush();
    match res {
        Ok(s) => {
            if s.truncated {
                eprintln!(
                    "rxu decode: warning: {}: capture ends inside a record",
                    file.display()
                );
            }
            if let Err(e) = flushed {
                return output_failed(&e);
            }
            if s.failed() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(DecodeError::Output(e)) => output_failed(&e),
        Err(e) => {
            eprintln!("rxu decode: {}: {e}", file.display());
            ExitCode::from(2)
        }
    }
}

/// `rxu decode f | head` closes the pipe early: not worth a message.
fn output_failed(e: &io::Error) -> ExitCode {
    if e.kind() != io::ErrorKind::BrokenPipe {
        eprintln!("rxu decode: writing output: {e}");
    }
    ExitCode::from(2)
}
