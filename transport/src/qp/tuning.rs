//! Knobs of the RC transport that the verbs attributes do not cover.

use super::types::Mtu;

/// Per-QP transport tuning; [`QpTuning::default`] is what the daemon uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpTuning {
    /// Most PSNs the RC requester keeps sent but unacknowledged. rxe uses
    /// 128; 256 (1 MiB in flight at MTU 4096) lets a batching engine on
    /// the other side ACK once per batch without the sender ever idling,
    /// while a go-back-N after a loss re-sends at most that much.
    pub max_unacked_psns: u32,
    /// The RC requester sets AckReq at least every this many packets (and
    /// on the last packet of every message and on the packet that fills
    /// the window). 64 as rxe: with a 256-PSN window, four ACKs are in
    /// flight per window, so ACK latency never stalls the sender, and
    /// 64 KiB messages at MTU 4096 are ACKed per message anyway.
    pub ack_req_interval: u32,
    /// Largest UD payload: the port MTU (UD has no path MTU).
    pub port_mtu: Mtu,
    /// Responses (ACKs, READ response streams, atomic ACKs) the responder
    /// holds before it stops accepting requests that need one; a peer
    /// that floods READ requests then sees loss, not unbounded memory.
    pub max_pending_responses: usize,
    /// The least the RC requester, out of end-to-end credits, waits for an
    /// unsolicited credit update (it waits the local ACK timeout if that
    /// is longer) before it sends the one message the IBA allows beyond
    /// them (which meets an RNR NAK if the receive queue is
    /// still empty); only against a responder seen to send such updates
    /// (rxu does), others get the message at once, as rdmavt sends it.
    /// Waiting costs nothing when the update comes; a message into an
    /// empty queue costs the RNR timer.
    pub credit_probe_delay: std::time::Duration,
}

impl Default for QpTuning {
    fn default() -> Self {
        QpTuning {
            max_unacked_psns: 256,
            ack_req_interval: 64,
            port_mtu: Mtu::M4096,
            max_pending_responses: 1024,
            credit_probe_delay: std::time::Duration::from_micros(500),
        }
    }
}
