//! The perftest matrix on rxu: every bandwidth and latency program of
//! perftest, server and client on one device (their QPs talk through the
//! one daemon) and on two devices (127.0.8.2 and 127.0.8.3: every byte
//! crosses UDP between two daemons). RC at the default size and, for the
//! WRITE / READ / SEND programs, with `-a` (every size 2 B .. 8 MiB);
//! SEND over UD and UC, WRITE over UC; SEND with completion events (`-e`).
//!
//! Each run must exit 0 on both sides and print its result table: every
//! row with a non-zero average bandwidth (bw) or typical latency (lat),
//! and with `-a` every size from 2 to 2^23. The installed perftest (4.5
//! 0.17) has no data check of its own (`--data_validation` came later),
//! so these runs prove function and speed; bytes are checked by the
//! client and ibv_wr_* tests. Atomic programs refuse `-a` (fixed 8-byte
//! size), so they run at their size only.
//!
//! Iteration counts are small (CI has two cores for everything) and every
//! run is bounded by a time limit; a failure prints both programs' output
//! and the daemons' counters.

use std::time::Duration;

use rxu_testkit::serial;
use rxu_testkit::tools::{wait_listen, Dev, Pair, Run};

const BW: [&str; 4] = ["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_atomic_bw"];
const LAT: [&str; 4] = [
    "ib_write_lat",
    "ib_read_lat",
    "ib_send_lat",
    "ib_atomic_lat",
];
const LIMIT: Duration = Duration::from_secs(90);
/// `-a` runs move 16 MiB per iteration (bw) or twice that per round trip.
const LIMIT_ALL: Duration = Duration::from_secs(180);

/// One perftest invocation of the matrix.
struct Case {
    prog: &'static str,
    args: &'static [&'static str],
}

impl Case {
    fn bw(&self) -> bool {
        self.prog.ends_with("_bw")
    }
    fn all_sizes(&self) -> bool {
        self.args.contains(&"-a")
    }
    fn limit(&self) -> Duration {
        if self.all_sizes() {
            LIMIT_ALL
        } else {
            LIMIT
        }
    }
}

/// RC at the default size: all eight programs.
fn rc_default() -> Vec<Case> {
    BW.iter()
        .chain(LAT.iter())
        .map(|&prog| Case {
            prog,
            args: &["-x", "0", "-n", "1000"],
        })
        .collect()
}

/// RC over every size up to 8 MiB (atomics have one size).
fn rc_all_sizes() -> Vec<Case> {
    let bw = ["ib_write_bw", "ib_read_bw", "ib_send_bw"].map(|prog| Case {
        prog,
        args: &["-x", "0", "-a", "-n", "10"],
    });
    let lat = ["ib_write_lat", "ib_read_lat", "ib_send_lat"].map(|prog| Case {
        prog,
        args: &["-x", "0", "-a", "-n", "5"],
    });
    bw.into_iter().chain(lat).collect()
}

/// UD, UC and completion events. UC SEND runs three times: it used to
/// hang (lost packets) a third of the time.
fn other_transports() -> Vec<Case> {
    let uc_send: &[&str] = &["-x", "0", "-c", "UC", "-n", "1000"];
    vec![
        Case {
            prog: "ib_send_bw",
            args: &["-x", "0", "-c", "UD", "-n", "1000"],
        },
        Case {
            prog: "ib_send_bw",
            args: uc_send,
        },
        Case {
            prog: "ib_send_bw",
            args: uc_send,
        },
        Case {
            prog: "ib_send_bw",
            args: uc_send,
        },
        Case {
            prog: "ib_write_bw",
            args: &["-x", "0", "-c", "UC", "-n", "1000"],
        },
        Case {
            prog: "ib_send_bw",
            args: &["-x", "0", "-e", "-n", "1000"],
        },
        Case {
            prog: "ib_send_lat",
            args: &["-x", "0", "-e", "-n", "1000"],
        },
    ]
}

/// A row of perftest's result table: message size and the numbers after
/// the iteration count.
#[derive(Debug)]
struct Row {
    bytes: u64,
    vals: Vec<f64>,
}

/// The result table's rows: lines of at least five numbers whose first
/// is the size and second the iteration count.
fn table(out: &str) -> Vec<Row> {
    out.lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            if t.len() < 5 {
                return None;
            }
            let bytes = t[0].parse::<u64>().ok()?;
            t[1].parse::<u64>().ok()?;
            let vals = t[2..]
                .iter()
                .map(|v| v.parse::<f64>())
                .collect::<Result<Vec<_>, _>>()
                .ok()?;
            Some(Row { bytes, vals })
        })
        .collect()
}

/// What is wrong with the client's table, if anything.
fn check_table(c: &Case, out: &str) -> Result<(), String> {
    let rows = table(out);
    if rows.is_empty() {
        return Err("no result table".into());
    }
    for r in &rows {
        // bw: peak, average (MiB/s, two decimals: 0.00 for a slow run of
        // 2-byte messages), message rate (Mpps, six decimals); lat: min,
        // max, typical, ...
        let v = if c.bw() {
            let from_rate = r.vals.get(2).map(|m| m * 1e6 * r.bytes as f64 / 1048576.0);
            r.vals.get(1).zip(from_rate).map(|(&a, b)| a.max(b))
        } else {
            r.vals.get(2).copied()
        };
        if !v.is_some_and(|v| v > 0.0) {
            return Err(format!(
                "{} B: no bandwidth / latency in {:?}",
                r.bytes, r.vals
            ));
        }
    }
    if c.all_sizes() {
        let sizes: Vec<u64> = rows.iter().map(|r| r.bytes).collect();
        let want: Vec<u64> = (1..=23).map(|i| 1u64 << i).collect();
        if sizes != want {
            return Err(format!("sizes {sizes:?}, want 2 .. 2^23"));
        }
    }
    Ok(())
}

/// Runs the cases with the server on `server` and the client on
/// `client` (the same device or another one).
fn run_matrix(server: &Dev, client: &Dev, port0: u16, cases: &[Case]) {
    for (i, c) in cases.iter().enumerate() {
        let port = port0 + i as u16;
        let t0 = std::time::Instant::now();
        let p: Pair = if server.name == client.name {
            server.pair(c.prog, port, c.args, c.limit())
        } else {
            server.pair_across(client, c.prog, port, c.args, c.limit())
        };
        let bad = if p.ok() {
            check_table(c, p.client_stdout()).err()
        } else {
            Some("a side failed".into())
        };
        if let Some(why) = bad {
            let mut stats = server.stats();
            if server.name != client.name {
                stats += &client.stats();
            }
            panic!(
                "{} {:?}: {why}\n{}\ndaemon counters:\n{stats}",
                c.prog,
                c.args,
                p.report()
            );
        }
        eprintln!(
            "ok: {} {} ({} sizes, {:.1} s)",
            c.prog,
            c.args.join(" "),
            table(p.client_stdout()).len(),
            t0.elapsed().as_secs_f64()
        );
    }
}

fn tools() -> Vec<&'static str> {
    BW.iter().chain(LAT.iter()).copied().collect()
}

fn one_device(name: &str, addr: &str) -> Option<Dev> {
    Dev::up(name, addr, &tools())
}

/// Two devices on two addresses; None (after saying why) when the test
/// cannot run here.
fn two_devices() -> Option<(Dev, Dev)> {
    let a = Dev::up("rxpt2", "127.0.8.2", &tools())?;
    let b = Dev::up("rxpt3", "127.0.8.3", &tools())?;
    Some((a, b))
}

#[test]
fn rc_default_sizes_one_device() {
    let _g = serial();
    let Some(d) = one_device("rxpt1", "127.0.8.1") else {
        return;
    };
    run_matrix(&d, &d, 19700, &rc_default());
}

#[test]
fn rc_all_sizes_one_device() {
    let _g = serial();
    let Some(d) = one_device("rxpt1", "127.0.8.1") else {
        return;
    };
    run_matrix(&d, &d, 19710, &rc_all_sizes());
}

#[test]
fn ud_uc_and_events_one_device() {
    let _g = serial();
    let Some(d) = one_device("rxpt1", "127.0.8.1") else {
        return;
    };
    run_matrix(&d, &d, 19720, &other_transports());
}

#[test]
fn rc_default_sizes_two_devices() {
    let _g = serial();
    let Some((a, b)) = two_devices() else {
        return;
    };
    run_matrix(&a, &b, 19730, &rc_default());
}

#[test]
fn rc_all_sizes_two_devices() {
    let _g = serial();
    let Some((a, b)) = two_devices() else {
        return;
    };
    run_matrix(&a, &b, 19740, &rc_all_sizes());
}

#[test]
fn ud_uc_and_events_two_devices() {
    let _g = serial();
    let Some((a, b)) = two_devices() else {
        return;
    };
    run_matrix(&a, &b, 19750, &other_transports());
}

/// Regression: `ib_write_bw -a` failed at 4 MiB with REM_ACCESS_ERR when
/// its server was killed mid-run (a 120 s limit in run-perftest). The
/// daemon NAKed WRITEs into the dying server's memory as remote access
/// errors; a dead peer must look like a destroyed QP instead: the client
/// runs out of retries (IBV_WC_RETRY_EXC_ERR, status 12), as with a NIC.
#[test]
fn server_killed_mid_run_looks_like_a_dead_peer() {
    let _g = serial();
    let Some(d) = one_device("rxpt1", "127.0.8.1") else {
        return;
    };
    let port = "19760";
    let args = [
        "-d", "rxpt1", "-p", port, "-x", "0", "-s", "4194304", "-n", "100000",
    ];
    let mut server = d.start("ib_write_bw", &args);
    assert!(wait_listen(19760, Duration::from_secs(10)));
    let mut cargs = args.to_vec();
    cargs.push("127.0.0.1");
    let client = d.start("ib_write_bw", &cargs);
    // Mid-run: the client needs minutes for 100000 x 4 MiB.
    std::thread::sleep(Duration::from_secs(3));
    server.kill().expect("kill the server");
    let _ = server.wait();
    let c = Run::wait(client, LIMIT, "client: ib_write_bw -s 4194304");
    let out = format!("{}{}", c.stdout, c.stderr);
    assert!(
        !c.ok() && !c.timed_out && out.contains("Failed status 12"),
        "want IBV_WC_RETRY_EXC_ERR (12):\n{}\ndaemon counters:\n{}",
        c.report(),
        d.stats()
    );
}
