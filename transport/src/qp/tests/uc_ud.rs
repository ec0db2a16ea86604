//! UC and UD.
