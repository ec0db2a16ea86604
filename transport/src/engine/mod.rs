//! The UDP engine: owns sockets and timers, batches I/O and drives QPs.
