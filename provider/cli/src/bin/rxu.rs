//! The `rxu` command-line tool.

use std::io::{self, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Parser, Subcommand};
use rxu_cli::cli::{self, down::DownOpts, up::UpOpts, CliError};
use rxu_cli::decode::{self, DecodeError};

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
    /// ICRC or does not parse, 2 the file cannot be read. Packets between
    /// QPs of one device take the intra-device shortcut and are in no
    /// capture unless the device is up with --force-udp.
    Decode {
        /// Capture file (pcap or pcapng; Ethernet, VLAN, SLL, SLL2, raw IP).
        file: PathBuf,
    },
    /// Bring a device up: start its daemon rxud, write the device node
    /// libibverbs finds, and print the shell lines that let verbs programs
    /// see it: eval "$(rxu up --netdev lo)"
    #[command(group(ArgGroup::new("where").required(true).multiple(true).args(["netdev", "addr"])))]
    Up {
        /// Use this network interface's addresses (the first IPv4 one is
        /// GID 0).
        #[arg(long, value_name = "IFNAME")]
        netdev: Option<String>,
        /// Use this one local address (its interface is found; any
        /// 127.0.0.0/8 address is on lo).
        #[arg(long, value_name = "IP")]
        addr: Option<IpAddr>,
        /// Device name (the ibdev name verbs programs see).
        #[arg(long, default_value = "rxu0")]
        name: String,
        /// UDP port for RoCEv2.
        #[arg(long, default_value_t = cli::up::ROCE_PORT)]
        port: u16,
        /// Send packets between QPs of this device through its UDP socket
        /// too, instead of handing them over inside the daemon (the
        /// intra-device shortcut, as the kernel's rxe_loopback). Captures
        /// on the interface see such packets only with this switch;
        /// `rxu stats` shows the path (loopback=1: shortcut).
        #[arg(long)]
        force_udp: bool,
        /// Serve only this user (and root). Without it a device root
        /// brings up serves every user, as the kernel's uverbs nodes do.
        #[arg(long)]
        owner_only: bool,
    },
    /// Stop a device's daemon and remove its device node. Refused while
    /// programs have it open, unless --force.
    Down {
        /// Device name.
        #[arg(long, default_value = "rxu0")]
        name: String,
        /// Stop even with programs using the device (their QPs go to error).
        #[arg(long)]
        force: bool,
        /// Every device that is up.
        #[arg(long, conflicts_with = "name")]
        all: bool,
    },
    /// Print the shell lines (as `rxu up` does) for the devices that are up:
    /// eval "$(rxu env)"
    Env,
    /// Show each device: addresses, netdev, state, daemon, clients and QPs.
    Status,
    /// Run a command where /sys/class/infiniband, /sys/class/infiniband_verbs
    /// and /sys/class/misc/rdma_cm show rxu's devices beside the kernel's
    /// (a private mount namespace), with rxu's environment: for tools that
    /// read /sys directly. rxu exec -- ibdev2netdev
    Exec {
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// `rxu exec` of $SHELL: an interactive shell with that view.
    Shell,
    /// One line per device in ibdev2netdev's form: `rxu0 port 1 ==> lo (Up)`.
    /// (Installed as `ibdev2netdev` — a symlink to rxu — it answers as that
    /// script does, for device managers that run it.)
    Ibdev2netdev {
        /// Accepted for compatibility (ibdev2netdev -v); same output.
        #[arg(short = 'v')]
        verbose: bool,
    },
    /// Show a device's counters (device-wide and per QP): memory
    /// registrations, objects in use, port, transport.
    Stats {
        /// Device name.
        #[arg(long, default_value = "rxu0")]
        name: String,
        /// Every device that is up.
        #[arg(long, conflicts_with = "name")]
        all: bool,
        /// One JSON object (with --all: a JSON array of them).
        #[arg(long, conflicts_with = "prometheus")]
        json: bool,
        /// The Prometheus text exposition format (rxu_* metrics labelled
        /// by device), for a scraper or a textfile collector.
        #[arg(long)]
        prometheus: bool,
    },
}

fn main() -> ExitCode {
    // Busybox style: a symlink named ibdev2netdev runs that subcommand.
    let argv0 = std::env::args_os().next().unwrap_or_default();
    if std::path::Path::new(&argv0).file_name() == Some("ibdev2netdev".as_ref()) {
        return ibdev2netdev_cmd();
    }
    match Cli::parse().command {
        Command::Decode { file } => decode_cmd(&file),
        Command::Up {
            netdev,
            addr,
            name,
            port,
            force_udp,
            owner_only,
        } => up_cmd(&UpOpts {
            name,
            netdev,
            addr,
            port,
            force_udp,
            owner_only,
        }),
        Command::Down { name, force, all } => {
            report("down", cli::down::run(&DownOpts { name, force, all }))
        }
        Command::Env => env_cmd(),
        Command::Status => status_cmd(),
        Command::Exec { command } => exec_cmd(&command),
        Command::Shell => exec_cmd(&cli::exec::shell_argv()),
        Command::Ibdev2netdev { verbose: _ } => ibdev2netdev_cmd(),
        Command::Stats {
            name,
            all,
            json,
            prometheus,
        } => stats_cmd(&name, all, json, prometheus),
    }
}

/// stdout carries only what the command is for (export lines, status,
/// stats); messages go to stderr.
fn report(cmd: &str, r: Result<(), CliError>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rxu {cmd}: {e}");
            ExitCode::from(1)
        }
    }
}

fn print_stdout(text: &str) -> Result<(), CliError> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(CliError::io("writing to stdout"))
}

fn exports(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

fn up_cmd(opts: &UpOpts) -> ExitCode {
    report(
        "up",
        cli::up::run(opts).and_then(|lines| print_stdout(&exports(&lines))),
    )
}

fn env_cmd() -> ExitCode {
    let up = cli::status::collect().iter().any(|d| d.live.is_some());
    if !up {
        eprintln!("rxu env: no rxu device is up (`rxu up --netdev IFNAME`)");
        return ExitCode::from(1);
    }
    report("env", print_stdout(&exports(&cli::env::export_lines())))
}

fn exec_cmd(argv: &[std::ffi::OsString]) -> ExitCode {
    match cli::exec::exec(argv) {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("rxu exec: {e}");
            // As env(1): 126 found but not run, 127 not found.
            match &e {
                CliError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    ExitCode::from(127)
                }
                _ => ExitCode::from(126),
            }
        }
    }
}

fn status_cmd() -> ExitCode {
    let all = cli::status::collect();
    if all.is_empty() {
        eprintln!("rxu status: no rxu device is up");
        return ExitCode::SUCCESS;
    }
    let text: String = all.iter().map(cli::status::render).collect();
    report("status", print_stdout(&text))
}

fn ibdev2netdev_cmd() -> ExitCode {
    let text: String = cli::status::collect()
        .iter()
        .filter_map(cli::status::ibdev2netdev_line)
        .map(|l| l + "\n")
        .collect();
    report("ibdev2netdev", print_stdout(&text))
}

fn stats_cmd(name: &str, all: bool, json: bool, prometheus: bool) -> ExitCode {
    let r = if all {
        Ok(cli::stats::fetch_all())
    } else {
        cli::stats::fetch(name).map(|s| vec![s])
    };
    let r = r.and_then(|list| {
        let text = if prometheus {
            cli::metrics::render(&list)
        } else if json && all {
            let v: Vec<_> = list.iter().map(cli::stats::to_json).collect();
            format!("{}\n", serde_json::Value::Array(v))
        } else if json {
            list.iter()
                .map(|s| format!("{}\n", cli::stats::to_json(s)))
                .collect()
        } else {
            list.iter().map(cli::stats::render_text).collect()
        };
        print_stdout(&text)
    });
    report("stats", r)
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
