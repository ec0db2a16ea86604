//! `rxu stats --prometheus`: the daemon's counters in the Prometheus text
//! exposition format (version 0.0.4), one family per figure with its HELP
//! and TYPE lines, samples labelled `device="<name>"` (and `qpn` for the
//! per-QP ones), so a node exporter's textfile collector or any scraper
//! can read them.
//!
//! The daemon sends plain `(name, value)` pairs; what each one is (a
//! gauge or a counter, its unit and meaning) is known here.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::stats::Stats;
use transport::qp::QpCounters;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// How one daemon figure is exposed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Meta {
    /// Family name (without the `rxu_` prefix).
    pub family: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// Extra label (name, value), for families split by a label.
    pub label: Option<(&'static str, &'static str)>,
    /// Divide by this to get the family's unit (ns -> s: 1e9).
    pub divisor: f64,
}

const fn m(family: &'static str, kind: Kind, help: &'static str) -> Meta {
    Meta {
        family,
        kind,
        help,
        label: None,
        divisor: 1.0,
    }
}

const LATENCY: &str = "Time the daemon took to register a region (checks and key setup), \
                       over a bounded uniform sample of registrations";

/// The device figures rxud reports, by the name it uses.
pub fn device_meta(name: &str) -> Option<Meta> {
    use Kind::{Counter as C, Gauge as G};
    let q = |quantile: &'static str| Meta {
        family: "mr_registration_latency_seconds",
        kind: G,
        help: LATENCY,
        label: Some(("quantile", quantile)),
        divisor: 1e9,
    };
    Some(match name {
        "mrs" => m("mrs", G, "Memory regions registered now"),
        "mr_bytes" => m(
            "mr_registered_bytes",
            G,
            "Bytes in registered memory regions now",
        ),
        "mr_bytes_registered_total" => m(
            "mr_registered_bytes_total",
            C,
            "Bytes of all successful memory registrations",
        ),
        "mr_registrations" => m(
            "mr_registrations_total",
            C,
            "Successful memory registrations",
        ),
        "mr_failures" => m(
            "mr_registration_failures_total",
            C,
            "Refused memory registrations",
        ),
        "mr_deregistrations" => m(
            "mr_deregistrations_total",
            C,
            "Memory regions released (deregistered or with their process)",
        ),
        "mr_reg_p50_ns" => q("0.5"),
        "mr_reg_p99_ns" => q("0.99"),
        "pds" => m("pds", G, "Protection domains in use"),
        "cqs" => m("cqs", G, "Completion queues in use"),
        "srqs" => m("srqs", G, "Shared receive queues in use"),
        "qps" => m("qps", G, "Queue pairs in use"),
        "clients" => m(
            "clients",
            G,
            "Connections to the daemon (programs and tools)",
        ),
        "port_state" => m(
            "port_state",
            G,
            "State of port 1 (enum ibv_port_state: 1 DOWN, 4 ACTIVE)",
        ),
        "gids" => m("gids", G, "Populated entries of port 1's GID table"),
        "port_changes" => m(
            "port_state_changes_total",
            C,
            "Port state changes following the netdev",
        ),
        "gid_changes" => m("gid_changes_total", C, "GID table changes"),
        "sent_pkts" => m("sent_packets_total", C, "RoCE packets sent"),
        "sent_bytes" => m("sent_bytes_total", C, "RoCE bytes sent (UDP payload)"),
        "rcvd_pkts" => m("received_packets_total", C, "RoCE packets received"),
        "rcvd_bytes" => m(
            "received_bytes_total",
            C,
            "RoCE bytes received (UDP payload)",
        ),
        "icrc_errors" => m("icrc_errors_total", C, "Packets dropped for a bad ICRC"),
        "cqes_delivered" => m(
            "completions_total",
            C,
            "Completions written to completion queues",
        ),
        "wqes_posted" => m("work_requests_total", C, "Work requests taken from rings"),
        "async_events" => m("async_events_total", C, "Asynchronous events delivered"),
        _ => return None,
    })
}

/// A device-wide sum of a per-QP transport counter (named as `rxu stats`
/// names it).
fn is_hw_counter(name: &str) -> bool {
    QpCounters::default()
        .device_totals()
        .iter()
        .any(|(n, _)| *n == name)
}

/// Prometheus' rules for names: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Figures without an entry in the table: counters, named as they are.
fn fallback(name: &str, per_qp: bool) -> (String, Kind, String) {
    let base = sanitize(name);
    let family = if base.ends_with("_total") {
        base
    } else {
        format!("{base}_total")
    };
    let help = if per_qp {
        format!("rxe hw_counter {name} of one queue pair")
    } else if is_hw_counter(name) {
        format!("rxe hw_counter {name}, summed over every queue pair the device had")
    } else {
        format!("Daemon counter {name}")
    };
    (family, Kind::Counter, help)
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

struct Family {
    kind: Kind,
    help: String,
    samples: Vec<(String, String)>,
}

/// Every device's figures, families in a stable order, each family's
/// HELP/TYPE once followed by its samples.
pub fn render(all: &[Stats]) -> String {
    let mut fams: BTreeMap<String, Family> = BTreeMap::new();
    let mut add = |family: String, kind: Kind, help: String, labels: String, v: String| {
        fams.entry(family)
            .or_insert_with(|| Family {
                kind,
                help,
                samples: Vec::new(),
            })
            .samples
            .push((labels, v));
    };
    for s in all {
        let dev = format!("device=\"{}\"", escape(&s.device));
        for c in &s.counters {
            match device_meta(&c.name) {
                Some(meta) => {
                    let labels = match meta.label {
                        Some((k, v)) => format!("{dev},{k}=\"{v}\""),
                        None => dev.clone(),
                    };
                    add(
                        format!("rxu_{}", meta.family),
                        meta.kind,
                        meta.help.to_owned(),
                        labels,
                        number(c.value as f64 / meta.divisor),
                    );
                }
                None => {
                    let (family, kind, help) = fallback(&c.name, false);
                    add(
                        format!("rxu_{family}"),
                        kind,
                        help,
                        dev.clone(),
                        c.value.to_string(),
                    );
                }
            }
        }
        for (qpn, cs) in &s.qps {
            for c in cs {
                let (family, kind, help) = fallback(&c.name, true);
                add(
                    format!("rxu_qp_{family}"),
                    kind,
                    help,
                    format!("{dev},qpn=\"{qpn}\""),
                    c.value.to_string(),
                );
            }
        }
    }
    let mut out = String::new();
    for (name, f) in &fams {
        let _ = writeln!(out, "# HELP {name} {}", f.help.replace('\n', " "));
        let _ = writeln!(out, "# TYPE {name} {}", f.kind.name());
        for (labels, v) in &f.samples {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rxu_abi::proto::Counter;

    fn c(name: &str, value: u64) -> Counter {
        Counter {
            name: name.into(),
            value,
        }
    }

    #[test]
    fn families_types_labels_and_units() {
        let a = Stats {
            device: "rxu0".into(),
            counters: vec![
                c("mr_bytes", 131072),
                c("mr_bytes_registered_total", 262144),
                c("mr_reg_p50_ns", 1500),
                c("mr_reg_p99_ns", 20000),
                c("sent_pkts", 7),
                c("odd-name", 3),
            ],
            qps: vec![(17, vec![c("retransmitted_pkts", 2)])],
        };
        let b = Stats {
            device: "rxu\"1".into(),
            counters: vec![c("mr_bytes", 5)],
            qps: vec![],
        };
        let t = render(&[a, b]);
        let want = [
            "# TYPE rxu_mr_registered_bytes gauge",
            "rxu_mr_registered_bytes{device=\"rxu0\"} 131072",
            "rxu_mr_registered_bytes{device=\"rxu\\\"1\"} 5",
            "# TYPE rxu_mr_registered_bytes_total counter",
            "rxu_mr_registered_bytes_total{device=\"rxu0\"} 262144",
            "rxu_mr_registration_latency_seconds{device=\"rxu0\",quantile=\"0.5\"} 0.0000015",
            "rxu_mr_registration_latency_seconds{device=\"rxu0\",quantile=\"0.99\"} 0.00002",
            "rxu_sent_packets_total{device=\"rxu0\"} 7",
            "# TYPE rxu_odd_name_total counter",
            "rxu_qp_retransmitted_pkts_total{device=\"rxu0\",qpn=\"17\"} 2",
        ];
        for w in want {
            assert!(t.lines().any(|l| l == w), "missing {w:?} in:\n{t}");
        }
        // One HELP and TYPE per family, right before its samples.
        assert_eq!(t.matches("# TYPE rxu_mr_registered_bytes gauge").count(), 1);
        assert_eq!(
            t.matches("# TYPE rxu_mr_registration_latency_seconds")
                .count(),
            1
        );
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let (name, rest) = l.split_once('{').unwrap();
            assert!(name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '_'));
            let v = rest.rsplit_once("} ").unwrap().1;
            assert!(v.parse::<f64>().is_ok(), "{l}");
        }
    }
}
