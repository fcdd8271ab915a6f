//! Helpers shared by the benches and the bench binaries (`matvec`, `cm_lab`).

use vkml_ops::quant::{MatMatOptions, MatMatPath};

/// The value after command-line flag `name` (`--reps 20`), or `default` when the flag is
/// absent or its value does not parse.
pub fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `n` pseudo-random f32 values in [-1, 1) from a xorshift64 stream seeded by `seed`
/// (deterministic, so runs on different machines bench the same weights).
pub fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Mat-mat options for `path`; the environment variable `VKML_MATMAT_SPLITK` overrides
/// the split-K (automatic otherwise).
pub fn mat_mat_options(path: MatMatPath) -> MatMatOptions {
    let split_k = std::env::var("VKML_MATMAT_SPLITK").ok().and_then(|v| v.parse().ok());
    MatMatOptions { split_k, ..MatMatOptions::new(path) }
}
