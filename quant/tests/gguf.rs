//! GGUF reader/writer: round trips, a hand-assembled reference file, and hostile inputs.

use proptest::prelude::*;
use vkml_quant::gguf::{inspect, GgufArray, GgufError, GgufFile, GgufHeader, GgufValue, GgufWriter};
use vkml_quant::{GgmlType, UnknownGgmlType};

// ---------------------------------------------------------------- hand-made encoder
// Independent of the crate's writer: assembles GGUF bytes field by field (GGUF spec,
// "File Structure").

#[derive(Clone)]
struct Raw {
    version: u32,
    kvs: Vec<Vec<u8>>,
    tensors: Vec<Vec<u8>>,
    n_tensors: Option<u64>,
    n_kv: Option<u64>,
    alignment: u64,
    data: Vec<u8>,
}

fn s(x: &str) -> Vec<u8> {
    let mut v = (x.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(x.as_bytes());
    v
}

fn kv(key: &str, ty: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = s(key);
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(payload);
    v
}

fn tinfo(name: &str, dims: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut v = s(name);
    v.extend_from_slice(&(dims.len() as u32).to_le_bytes());
    for d in dims {
        v.extend_from_slice(&d.to_le_bytes());
    }
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(&offset.to_le_bytes());
    v
}

impl Raw {
    fn new() -> Self {
        Raw { version: 3, kvs: vec![], tensors: vec![], n_tensors: None, n_kv: None, alignment: 32, data: vec![] }
    }
    fn bytes(&self) -> Vec<u8> {
        let mut v = b"GGUF".to_vec();
        v.extend_from_slice(&self.version.to_le_bytes());
        v.extend_from_slice(&self.n_tensors.unwrap_or(self.tensors.len() as u64).to_le_bytes());
        v.extend_from_slice(&self.n_kv.unwrap_or(self.kvs.len() as u64).to_le_bytes());
        for k in &self.kvs {
            v.extend_from_slice(k);
        }
        for t in &self.tensors {
            v.extend_from_slice(t);
        }
        while !(v.len() as u64).is_multiple_of(self.alignment) {
            v.push(0);
        }
        v.extend_from_slice(&self.data);
        v
    }
}

/// A valid file: two metadata keys and two F32 tensors.
fn base() -> Raw {
    let mut r = Raw::new();
    r.kvs.push(kv("general.architecture", 8, &s("llama")));
    r.kvs.push(kv("n", 4, &7u32.to_le_bytes()));
    r.tensors.push(tinfo("a", &[4, 2], 0, 0));
    r.tensors.push(tinfo("b", &[32], 2, 32)); // Q4_0, 18 bytes at offset 32
    r.data = (0..32u8).collect();
    r.data.extend([0x3c; 18]);
    r
}

#[test]
fn reads_hand_assembled_file_and_writer_matches_it() {
    let raw = base().bytes();
    let f = GgufFile::from_bytes(&raw).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.get("general.architecture"), Some(&GgufValue::String("llama".into())));
    assert_eq!(f.get("n"), Some(&GgufValue::U32(7)));
    let (a, da) = f.tensor_data_by_name("a").unwrap();
    assert_eq!((a.ty, a.dims.clone(), a.n_elements, a.n_bytes), (GgmlType::F32, vec![4, 2], 8, 32));
    assert_eq!(da, &(0..32u8).collect::<Vec<_>>()[..]);
    let (b, db) = f.tensor_data_by_name("b").unwrap();
    assert_eq!((b.ty, b.n_bytes, b.offset), (GgmlType::Q4_0, 18, 32));
    assert_eq!(db, &[0x3c; 18]);
    assert!(matches!(f.tensor_data_by_name("zz"), Err(GgufError::NoSuchTensor(n)) if n == "zz"));

    // The writer produces exactly these bytes (plus padding after the last tensor).
    let mut w = GgufWriter::new();
    w.push_kv("general.architecture", GgufValue::String("llama".into())).push_kv("n", GgufValue::U32(7));
    w.push_tensor("a", GgmlType::F32, vec![4, 2], da.to_vec());
    w.push_tensor("b", GgmlType::Q4_0, vec![32], db.to_vec());
    let written = w.to_bytes().unwrap();
    assert_eq!(&written[..raw.len()], &raw[..]);
    assert!(written[raw.len()..].iter().all(|&b| b == 0));
    assert_eq!(written.len() % 32, 0);

    // And inspect shows the keys and the tensor table.
    let text = inspect::render(&f);
    assert!(text.contains("general.architecture") && text.contains("\"llama\""), "{text}");
    assert!(
        text.lines().any(|l| l.contains(" b ") && l.contains("Q4_0") && l.contains("[32]") && l.contains("18")),
        "{text}"
    );
}

#[test]
fn reads_version_2_and_mmap() {
    let mut r = base();
    r.version = 2;
    let dir = std::env::temp_dir().join(format!("vkml-quant-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("v2.gguf");
    std::fs::write(&p, r.bytes()).unwrap();
    let f = GgufFile::open(&p).unwrap();
    assert_eq!(f.version(), 2);
    assert_eq!(f.tensors().len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(GgufFile::open(dir.join("missing.gguf")), Err(GgufError::Io { .. })));
}

#[test]
fn ggml_type_ids() {
    assert_eq!(GgmlType::try_from(12u32), Ok(GgmlType::Q4_K));
    for id in [4u32, 5, 31, 32, 33, 36, 37, 38, 43, 1000] {
        let e = GgmlType::try_from(id).unwrap_err();
        assert_eq!(e, UnknownGgmlType(id));
        assert!(e.to_string().contains(&id.to_string()));
    }
    for &t in GgmlType::ALL {
        assert_eq!(GgmlType::try_from(t.id()), Ok(t));
        assert_eq!(GgmlType::from_name(&t.to_string()), Some(t));
    }
}

// ---------------------------------------------------------------- hostile inputs

fn parse_err(bytes: &[u8]) -> GgufError {
    match GgufHeader::parse(bytes) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[test]
fn every_truncation_is_an_error() {
    let raw = base().bytes();
    for n in 0..raw.len() {
        let e = parse_err(&raw[..n]);
        assert!(
            matches!(
                e,
                GgufError::Truncated { .. } | GgufError::TensorOutOfBounds { .. } | GgufError::CountTooLarge { .. }
            ),
            "prefix {n}: {e}"
        );
    }
    GgufHeader::parse(&raw).unwrap();
}

#[test]
fn every_single_byte_corruption_is_handled() {
    let raw = base().bytes();
    for i in 0..raw.len() {
        for v in [0x00u8, 0xff, 0x80, 0x01, raw[i] ^ 0x10] {
            let mut b = raw.clone();
            b[i] = v;
            if let Ok(h) = GgufHeader::parse(&b) {
                for t in &h.tensors {
                    assert_eq!(h.tensor_data(&b, t).len() as u64, t.n_bytes);
                }
            }
        }
    }
}

fn with_tensor(t: Vec<u8>) -> Raw {
    let mut r = base();
    r.tensors[1] = t;
    r
}

#[test]
fn hostile_headers_name_the_problem() {
    let e = parse_err(b"GGML\x03\0\0\0");
    assert!(matches!(e, GgufError::BadMagic(m) if &m == b"GGML"));
    let mut r = base();
    r.version = 1;
    assert!(matches!(parse_err(&r.bytes()), GgufError::UnsupportedVersion(1)));
    r.version = 3u32.swap_bytes();
    assert!(matches!(parse_err(&r.bytes()), GgufError::BigEndian(_)));

    let mut r = base();
    r.n_tensors = Some(u64::MAX);
    assert!(matches!(parse_err(&r.bytes()), GgufError::CountTooLarge { count: u64::MAX, .. }));
    let mut r = base();
    r.n_kv = Some(1 << 40);
    assert!(matches!(parse_err(&r.bytes()), GgufError::CountTooLarge { .. }));

    // string length far beyond the file
    let mut r = base();
    let mut k = (u64::MAX - 3).to_le_bytes().to_vec();
    k.extend_from_slice(b"key");
    r.kvs[1] = k;
    assert!(matches!(parse_err(&r.bytes()), GgufError::Truncated { .. }));

    // array length beyond the file, naming the key
    let mut r = base();
    let mut p = 4u32.to_le_bytes().to_vec();
    p.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
    r.kvs[1] = kv("big.array", 9, &p);
    let e = parse_err(&r.bytes());
    assert!(matches!(&e, GgufError::CountTooLarge { what, .. } if what.contains("big.array")), "{e}");

    // unknown value type, invalid bool, invalid UTF-8, duplicate key
    let mut r = base();
    r.kvs[1] = kv("weird", 13, &[0; 8]);
    assert!(
        matches!(parse_err(&r.bytes()), GgufError::UnknownValueType { type_id: 13, what } if what.contains("weird"))
    );
    let mut r = base();
    r.kvs[1] = kv("flag", 7, &[2]);
    assert!(matches!(parse_err(&r.bytes()), GgufError::InvalidBool { byte: 2, .. }));
    let mut r = base();
    r.kvs[1] = kv("s", 8, &[2, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe]);
    assert!(matches!(parse_err(&r.bytes()), GgufError::InvalidUtf8 { .. }));
    let mut r = base();
    r.kvs[1] = kv("general.architecture", 4, &1u32.to_le_bytes());
    assert!(matches!(parse_err(&r.bytes()), GgufError::DuplicateKey(k) if k == "general.architecture"));

    // arrays nested too deep
    let mut p = Vec::new();
    for _ in 0..20 {
        p.extend_from_slice(&9u32.to_le_bytes());
        p.extend_from_slice(&1u64.to_le_bytes());
    }
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&0u64.to_le_bytes());
    let mut r = base();
    r.kvs[1] = kv("deep", 9, &p);
    assert!(matches!(parse_err(&r.bytes()), GgufError::NestingTooDeep { what } if what.contains("deep")));

    // alignment: zero, not a power of two, wrong type
    for payload in
        [(4u32, 0u32.to_le_bytes().to_vec()), (4, 24u32.to_le_bytes().to_vec()), (10, 32u64.to_le_bytes().to_vec())]
    {
        let mut r = base();
        r.kvs[1] = kv("general.alignment", payload.0, &payload.1);
        assert!(matches!(parse_err(&r.bytes()), GgufError::BadAlignment(_)));
    }
}

#[test]
fn hostile_tensor_infos_name_the_tensor() {
    let name_is = |e: &GgufError, n: &str| e.to_string().contains(n);
    let e = parse_err(&with_tensor(tinfo("huge", &[u64::MAX, 2], 0, 32)).bytes());
    assert!(matches!(e, GgufError::DimTooLarge { .. }) && name_is(&e, "huge"), "{e}");
    let e = parse_err(&with_tensor(tinfo("ovf", &[1 << 32, 1 << 32, 1 << 32], 0, 32)).bytes());
    assert!(matches!(e, GgufError::SizeOverflow { .. }) && name_is(&e, "ovf"), "{e}");
    let e = parse_err(&with_tensor(tinfo("bytes_ovf", &[1 << 62, 1], 0, 32)).bytes());
    assert!(matches!(e, GgufError::SizeOverflow { .. }), "{e}");
    let e = parse_err(&with_tensor(tinfo("five", &[1, 1, 1, 1, 1], 0, 32)).bytes());
    assert!(matches!(e, GgufError::BadDimCount { n_dims: 5, .. }), "{e}");
    let e = parse_err(&with_tensor(tinfo("none", &[], 0, 32)).bytes());
    assert!(matches!(e, GgufError::BadDimCount { n_dims: 0, .. }), "{e}");
    let e = parse_err(&with_tensor(tinfo("ty", &[32], 4, 32)).bytes());
    assert!(matches!(e, GgufError::UnknownTensorType { type_id: 4, .. }) && name_is(&e, "ty"), "{e}");
    let e = parse_err(&with_tensor(tinfo("partial", &[33], 2, 32)).bytes());
    assert!(matches!(e, GgufError::NotBlockMultiple { ne0: 33, block_size: 32, .. }), "{e}");
    let e = parse_err(&with_tensor(tinfo("past_end", &[32], 2, 64)).bytes());
    assert!(matches!(e, GgufError::TensorOutOfBounds { .. }) && name_is(&e, "past_end"), "{e}");
    let e = parse_err(&with_tensor(tinfo("far", &[32], 2, u64::MAX - 31)).bytes());
    assert!(matches!(e, GgufError::TensorOutOfBounds { .. }), "{e}");
    let e = parse_err(&with_tensor(tinfo("misaligned", &[32], 2, 33)).bytes());
    assert!(matches!(e, GgufError::MisalignedOffset { offset: 33, .. }), "{e}");
    let e = parse_err(&with_tensor(tinfo("overlap", &[32], 2, 0)).bytes());
    assert!(matches!(e, GgufError::TensorOverlap { .. }) && name_is(&e, "overlap"), "{e}");
    let e = parse_err(&with_tensor(tinfo("a", &[32], 2, 32)).bytes());
    assert!(matches!(&e, GgufError::DuplicateTensor(n) if n == "a"), "{e}");
}

#[test]
fn writer_rejects_what_the_reader_rejects() {
    let mut w = GgufWriter::new();
    w.push_tensor("x", GgmlType::Q4_0, vec![32], vec![0; 17]);
    assert!(matches!(w.to_bytes(), Err(GgufError::DataSizeMismatch { expected: 18, got: 17, .. })));
    let mut w = GgufWriter::new();
    w.push_kv("k", GgufValue::U8(1)).push_kv("k", GgufValue::U8(2));
    assert!(matches!(w.to_bytes(), Err(GgufError::DuplicateKey(_))));
    let mut w = GgufWriter::new();
    w.push_kv("general.alignment", GgufValue::U32(48));
    assert!(matches!(w.to_bytes(), Err(GgufError::BadAlignment(_))));
    let mut w = GgufWriter::new();
    w.push_tensor("x", GgmlType::Q4_K, vec![32], vec![0; 144]);
    assert!(matches!(w.to_bytes(), Err(GgufError::NotBlockMultiple { .. })));
}

// ---------------------------------------------------------------- round trips

fn leaf_array() -> impl Strategy<Value = GgufArray> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..40).prop_map(GgufArray::U8),
        prop::collection::vec(any::<i8>(), 0..8).prop_map(GgufArray::I8),
        prop::collection::vec(any::<u16>(), 0..8).prop_map(GgufArray::U16),
        prop::collection::vec(any::<i16>(), 0..8).prop_map(GgufArray::I16),
        prop::collection::vec(any::<u32>(), 0..8).prop_map(GgufArray::U32),
        prop::collection::vec(any::<i32>(), 0..8).prop_map(GgufArray::I32),
        prop::collection::vec(-1e30f32..1e30, 0..8).prop_map(GgufArray::F32),
        prop::collection::vec(any::<bool>(), 0..8).prop_map(GgufArray::Bool),
        prop::collection::vec("\\PC{0,12}", 0..6).prop_map(GgufArray::String),
        prop::collection::vec(any::<u64>(), 0..8).prop_map(GgufArray::U64),
        prop::collection::vec(any::<i64>(), 0..8).prop_map(GgufArray::I64),
        prop::collection::vec(-1e300f64..1e300, 0..8).prop_map(GgufArray::F64),
    ]
}

fn array() -> impl Strategy<Value = GgufArray> {
    leaf_array().prop_recursive(3, 24, 4, |inner| prop::collection::vec(inner, 0..4).prop_map(GgufArray::Array))
}

fn value() -> impl Strategy<Value = GgufValue> {
    prop_oneof![
        any::<u8>().prop_map(GgufValue::U8),
        any::<i8>().prop_map(GgufValue::I8),
        any::<u16>().prop_map(GgufValue::U16),
        any::<i16>().prop_map(GgufValue::I16),
        any::<u32>().prop_map(GgufValue::U32),
        any::<i32>().prop_map(GgufValue::I32),
        (-1e30f32..1e30).prop_map(GgufValue::F32),
        any::<bool>().prop_map(GgufValue::Bool),
        "\\PC{0,40}".prop_map(GgufValue::String),
        array().prop_map(GgufValue::Array),
        any::<u64>().prop_map(GgufValue::U64),
        any::<i64>().prop_map(GgufValue::I64),
        (-1e300f64..1e300).prop_map(GgufValue::F64),
    ]
}

fn tensor() -> impl Strategy<Value = (GgmlType, Vec<u64>, u64)> {
    (0..GgmlType::ALL.len(), 1u64..4, prop::collection::vec(1u64..4, 0..3), any::<u64>()).prop_map(
        |(i, nb, rest, seed)| {
            let ty = GgmlType::ALL[i];
            let mut dims = vec![nb * ty.block_size() as u64];
            dims.extend(rest);
            (ty, dims, seed)
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn reader_of_writer_is_identity(
        kvs in prop::collection::btree_map("[a-z][a-z0-9_.]{0,20}", value(), 0..10),
        tensors in prop::collection::vec(tensor(), 0..6),
        align_pow in 0u32..9,
        set_alignment in any::<bool>(),
    ) {
        let mut w = GgufWriter::new();
        let alignment = 1u32 << align_pow;
        if set_alignment {
            w.push_kv("general.alignment", GgufValue::U32(alignment));
        }
        for (k, v) in &kvs {
            if k != "general.alignment" {
                w.push_kv(k.clone(), v.clone());
            }
        }
        for (i, (ty, dims, seed)) in tensors.iter().enumerate() {
            let n = ty.row_size(dims[0]).unwrap() * dims[1..].iter().product::<u64>();
            let data: Vec<u8> = (0..n).map(|j| (seed.wrapping_mul(j + 1) >> 24) as u8).collect();
            w.push_tensor(format!("t{i}.{}", ty.name()), *ty, dims.clone(), data);
        }
        let bytes = w.to_bytes().unwrap();
        let f = GgufFile::from_bytes(&bytes).unwrap();
        prop_assert_eq!(f.version(), 3);
        prop_assert_eq!(f.alignment(), if set_alignment { alignment as u64 } else { 32 });
        prop_assert_eq!(f.metadata(), &w.metadata[..]);
        prop_assert_eq!(f.tensors().len(), w.tensors.len());
        for (t, wt) in f.tensors().iter().zip(&w.tensors) {
            prop_assert_eq!(&t.name, &wt.name);
            prop_assert_eq!(t.ty, wt.ty);
            prop_assert_eq!(&t.dims, &wt.dims);
            prop_assert_eq!(t.offset % f.alignment(), 0);
            prop_assert_eq!(f.tensor_data(t), &wt.data[..]);
        }
        let _ = inspect::render(&f);
    }
}

/// Found by the gguf_reader fuzz target: a huge `general.alignment` with only empty tensors put
/// the data section far past the end of the file.
#[test]
fn data_section_past_end_with_empty_tensors() {
    let mut r = Raw::new();
    r.kvs.push(kv("general.alignment", 4, &(1u32 << 29).to_le_bytes()));
    r.tensors.push(tinfo("empty", &[0, 3], 0, 0));
    let e = parse_err(&r.bytes());
    assert!(matches!(&e, GgufError::TensorOutOfBounds { tensor, .. } if tensor == "empty"), "{e}");
}

/// A directory or a FIFO passed as a model file is refused at once, before it is opened
/// (opening a FIFO for reading would wait for a writer forever).
#[test]
fn non_regular_files_are_refused_before_opening() {
    let dir = std::env::temp_dir().join(format!("vkml-gguf-nonfile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let e = GgufFile::open(&dir).unwrap_err().to_string();
    assert!(e.contains("is not a regular file (a directory)"), "{e}");
    let fifo = dir.join("model.gguf");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let t = std::time::Instant::now();
        let e = GgufFile::open(&fifo).unwrap_err().to_string();
        assert!(e.contains("is not a regular file (a FIFO, socket or device)"), "{e}");
        assert!(t.elapsed().as_secs() < 2);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A writer made from a file writes that file again, byte for byte; `set_kv` replaces a
/// key in place, appends a new one and removes one.
#[test]
fn writer_from_file_round_trips_and_edits_keys() {
    let mut w = GgufWriter::new();
    w.push_kv("general.architecture", GgufValue::String("llama".into()));
    w.push_kv("llama.block_count", GgufValue::U32(2));
    w.push_tensor("t", GgmlType::F32, vec![4, 2], (0u8..32).collect());
    let bytes = w.to_bytes().unwrap();
    let f = GgufFile::from_vec(bytes.clone()).unwrap();
    let mut again = GgufWriter::from_file(&f);
    assert_eq!(again.to_bytes().unwrap(), bytes);
    again.set_kv("llama.block_count", Some(GgufValue::U32(7)));
    again.set_kv("llama.context_length", Some(GgufValue::U32(64)));
    again.set_kv("general.architecture", None);
    let keys: Vec<_> = again.metadata.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    assert_eq!(keys, [("llama.block_count", GgufValue::U32(7)), ("llama.context_length", GgufValue::U32(64))]);
    assert_eq!(
        GgufFile::from_vec(again.to_bytes().unwrap()).unwrap().tensor_data_by_name("t").unwrap().1,
        &bytes[bytes.len() - 32..]
    );
}
