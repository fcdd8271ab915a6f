//! First byte picks the GgmlType, the rest is block bytes: dequantize, dot with Q8_1/Q8_K
//! activations (derived and raw), and re-quantize the decoded values.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkml_quant::blocks::{BlockQ8K, BlockQ8_1};
use vkml_quant::{
    dequantize_to_vec, quantize, quantize_q8_1, quantize_q8_k, vec_dot_q8_1, vec_dot_q8_k, GgmlType, QK_K,
};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let ty = GgmlType::ALL[sel as usize % GgmlType::ALL.len()];
    let ts = ty.type_size();
    let n_blocks = (rest.len() / ts).min(64);
    let x = &rest[..n_blocks * ts];
    // A partial block must be rejected, never read.
    if rest.len() % ts != 0 {
        assert!(dequantize_to_vec(ty, rest).is_err());
    }
    let vals = dequantize_to_vec(ty, x).expect("whole blocks decode");
    assert_eq!(vals.len(), n_blocks * ty.block_size());
    let n = vals.len();
    // Activations: a ramp quantized, and the raw bytes reinterpreted as activation blocks.
    let ramp: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.03).collect();
    if n % 32 == 0 {
        let y = quantize_q8_1(&ramp).unwrap();
        let _ = vec_dot_q8_1(ty, x, &y);
        let raw: Vec<BlockQ8_1> =
            rest.chunks_exact(std::mem::size_of::<BlockQ8_1>()).map(bytemuck_read).cycle().take(n / 32).collect();
        if raw.len() == n / 32 {
            let _ = vec_dot_q8_1(ty, x, &raw);
        }
    }
    if n % QK_K == 0 {
        let y = quantize_q8_k(&ramp).unwrap();
        let _ = vec_dot_q8_k(ty, x, &y);
        let raw: Vec<BlockQ8K> =
            rest.chunks_exact(std::mem::size_of::<BlockQ8K>()).map(bytemuck_read).cycle().take(n / QK_K).collect();
        if raw.len() == n / QK_K {
            let _ = vec_dot_q8_k(ty, x, &raw);
        }
    }
    // Re-quantize whatever came out (NaN/inf included): must not panic, and for finite
    // values must give whole blocks.
    if let Ok(q) = quantize(ty, &vals) {
        assert_eq!(q.len(), n_blocks * ts);
    }
});

fn bytemuck_read<T: vkml_quant::blocks::Block>(b: &[u8]) -> T {
    vkml_quant::blocks::read_block(b).expect("exact size")
}
