//! Writes small seed inputs for the fuzz targets in `fuzz/`:
//! `cargo run -p vkml-quant --example write_fuzz_seeds -- fuzz/seeds`.
//!
//! gguf_reader/: GGUF files from the writer (every metadata value type, nested arrays, one
//! tensor of every type, custom alignment, a v2 variant). block_decoders/: a type selector byte
//! followed by quantized blocks of each type.
use vkml_quant::gguf::{GgufArray, GgufValue, GgufWriter};
use vkml_quant::{quantize, GgmlType};

fn ramp(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 31 + seed * 17) % 97) as f32 - 48.0) * 0.05).collect()
}

fn block_bytes(ty: GgmlType, n_blocks: usize, seed: usize) -> Vec<u8> {
    let n = ty.block_size() * n_blocks;
    quantize(ty, &ramp(n, seed)).unwrap_or_else(|_| {
        // types without a quantizer: deterministic pseudo-random bytes
        (0..n_blocks * ty.type_size()).map(|i| ((i * 131 + seed * 7) % 251) as u8).collect()
    })
}

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).unwrap_or_else(|| "fuzz/seeds".into()));
    let g = dir.join("gguf_reader");
    let b = dir.join("block_decoders");
    std::fs::create_dir_all(&g).unwrap();
    std::fs::create_dir_all(&b).unwrap();

    let mut w = GgufWriter::new();
    w.push_kv("general.architecture", GgufValue::String("llama".into()))
        .push_kv("u8", GgufValue::U8(7))
        .push_kv("i8", GgufValue::I8(-7))
        .push_kv("u16", GgufValue::U16(700))
        .push_kv("i16", GgufValue::I16(-700))
        .push_kv("u32", GgufValue::U32(70000))
        .push_kv("i32", GgufValue::I32(-70000))
        .push_kv("f32", GgufValue::F32(0.5))
        .push_kv("bool", GgufValue::Bool(true))
        .push_kv("u64", GgufValue::U64(1 << 40))
        .push_kv("i64", GgufValue::I64(-(1 << 40)))
        .push_kv("f64", GgufValue::F64(-0.25))
        .push_kv("strs", GgufValue::Array(GgufArray::String(vec!["a".into(), "bc".into(), "".into()])))
        .push_kv("f32s", GgufValue::Array(GgufArray::F32(vec![1.0, 2.0])))
        .push_kv("bools", GgufValue::Array(GgufArray::Bool(vec![true, false])))
        .push_kv(
            "nested",
            GgufValue::Array(GgufArray::Array(vec![
                GgufArray::U8(vec![1, 2]),
                GgufArray::Array(vec![GgufArray::I64(vec![-1])]),
            ])),
        );
    let mut small = w.clone();
    small.push_tensor("t.f32", GgmlType::F32, vec![4, 2], block_bytes(GgmlType::F32, 8, 0));
    std::fs::write(g.join("meta_all_types.gguf"), small.to_bytes().unwrap()).unwrap();
    let mut v2 = small.to_bytes().unwrap();
    v2[4] = 2;
    std::fs::write(g.join("meta_all_types_v2.gguf"), v2).unwrap();

    for (i, &ty) in GgmlType::ALL.iter().enumerate() {
        let mut t = GgufWriter::new();
        t.push_kv("general.alignment", GgufValue::U32(if i % 2 == 0 { 32 } else { 64 }));
        let rows = 2;
        t.push_tensor(
            format!("w.{}", ty.name()),
            ty,
            vec![ty.block_size() as u64, rows],
            block_bytes(ty, rows as usize, i),
        );
        std::fs::write(g.join(format!("tensor_{}.gguf", ty.name())), t.to_bytes().unwrap()).unwrap();

        let n_blocks = (512 / ty.block_size()).clamp(1, 8);
        let mut seed = vec![i as u8];
        seed.extend(block_bytes(ty, n_blocks, i + 1));
        std::fs::write(b.join(format!("{}.bin", ty.name())), seed).unwrap();
    }
    // several tensors in one file
    let mut multi = w;
    for (i, ty) in [GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::F16, GgmlType::IQ4_NL].into_iter().enumerate() {
        multi.push_tensor(format!("blk.{i}.w"), ty, vec![256, 1], block_bytes(ty, 256 / ty.block_size(), i));
    }
    std::fs::write(g.join("multi.gguf"), multi.to_bytes().unwrap()).unwrap();
}
