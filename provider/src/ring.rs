//! Shared-memory single-producer/single-consumer rings (SQ, RQ, SRQ, CQ).
