//! Malformed, unexpected and hostile packet input.
