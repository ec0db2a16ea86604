//! RC recovery: go-back-N, duplicates, reordering, READ replay, atomic
//! replay, RNR, timeouts.
