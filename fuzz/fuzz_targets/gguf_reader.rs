//! Arbitrary bytes -> GGUF parse; on success touch every tensor view, dequantize a few rows of
//! each tensor, render `inspect`, and check write(parse(x)) is a fixed point.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vkml_quant::gguf::{inspect, GgufHeader, GgufWriter};

const MAX_ELEMS_PER_TENSOR: u64 = 1 << 14;

fuzz_target!(|data: &[u8]| {
    let Ok(h) = GgufHeader::parse(data) else {
        return;
    };
    let _ = inspect::render_header(&h);
    for t in &h.tensors {
        let bytes = h.tensor_data(data, t);
        assert_eq!(bytes.len() as u64, t.n_bytes, "view length of {}", t.name);
        // touch every byte of the view
        let _sum = bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b));
        // dequantize whole rows, at most MAX_ELEMS_PER_TENSOR elements
        let row_bytes = t.row_bytes();
        let row_len = t.row_len();
        if row_bytes > 0 && row_len > 0 {
            let rows = (MAX_ELEMS_PER_TENSOR / row_len).clamp(1, 4).min(t.n_rows());
            let take = (rows * row_bytes).min(t.n_bytes) as usize;
            let v = vkml_quant::dequantize_to_vec(t.ty, &bytes[..take]).expect("whole rows must decode");
            assert_eq!(v.len() as u64, take as u64 / row_bytes * row_len);
        }
    }
    // Re-serialize as v3 and parse again: must succeed and be a fixed point. (Skipped for huge
    // alignments, where the writer legitimately pads to the alignment: up to 2 GiB.)
    if h.alignment > 1 << 16 {
        return;
    }
    let mut w = GgufWriter::new();
    w.metadata = h.metadata.clone();
    for t in &h.tensors {
        w.push_tensor(t.name.clone(), t.ty, t.dims.clone(), h.tensor_data(data, t).to_vec());
    }
    let Ok(b1) = w.to_bytes() else { panic!("writer rejected a parsed file") };
    let h2 = GgufHeader::parse(&b1).expect("reader rejected writer output");
    let mut w2 = GgufWriter::new();
    w2.metadata = h2.metadata.clone();
    for t in &h2.tensors {
        w2.push_tensor(t.name.clone(), t.ty, t.dims.clone(), h2.tensor_data(&b1, t).to_vec());
    }
    assert_eq!(w2.to_bytes().expect("second write"), b1);
});
