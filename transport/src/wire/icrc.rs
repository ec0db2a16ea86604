//! ICRC over IPv4 and IPv6 (rocev2-wire.md §2). Implemented by the wire work.
