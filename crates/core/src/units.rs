//! Byte units, written once.

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;

/// Whole MiB, rounded up: budgets and minimums are shown this way so that a minimum shown
/// is never below the real one.
pub fn mib_ceil(bytes: u64) -> u64 {
    bytes.div_ceil(MIB)
}

/// MiB with one decimal, for tables.
pub fn mib_f(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}
