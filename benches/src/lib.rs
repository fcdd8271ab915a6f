//! Helpers shared by the criterion benches.
