//! Minimal IPv4/IPv6/UDP header views for the ICRC and for `rxu decode`.
