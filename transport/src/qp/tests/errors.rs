//! Error paths: NAKs, local errors, QP -> ERR and flushes.
