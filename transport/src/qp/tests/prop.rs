//! Random mixed workloads over a lossy wire.
