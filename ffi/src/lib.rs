//! The rdma-core provider (provider ABI 34). Built by the provider issue;
//! this crate holds the C ABI and nothing else.
