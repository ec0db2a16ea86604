//! Tests of the engine: two engines back to back, no sockets.
