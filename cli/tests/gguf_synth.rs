//! `vkml gguf synth` against an independent reader: the file it writes opens in gguf-py's
//! `GGUFReader` (`cli/tests/gguf_py_read.py`) with the tensor names, types and shapes the
//! named shape implies, the synthetic tokenizer's metadata, and tensor data where vkml's
//! own reader finds it. Bad `--shape` and `--type` values are one-line errors.
//!
//! gguf-py comes from `$VKML_GGUF_PY` (default `~/.cache/vkml/gguf-py`), where
//! `scripts/setup.sh --test` installs it; without it (or without python3) the test fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use vkml_models::synth;
use vkml_quant::gguf::{GgufFile, TensorInfo};
use vkml_quant::GgmlType;

fn vkml(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vkml")).args(args).output().expect("run vkml")
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gguf_synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

const SETUP: &str =
    "run scripts/setup.sh --test (it installs gguf-py into $VKML_GGUF_PY, default ~/.cache/vkml/gguf-py)";

/// gguf-py's view of `file` (the JSON of `gguf_py_read.py`).
fn gguf_py(file: &Path) -> Value {
    let dir = std::env::var_os("VKML_GGUF_PY").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME is not set")).join(".cache/vkml/gguf-py")
    });
    assert!(dir.join("gguf").is_dir(), "gguf-py is not installed in {}: {SETUP}", dir.display());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gguf_py_read.py");
    let out = Command::new("python3")
        .arg("-s")
        .arg(&script)
        .arg(file)
        .env("PYTHONPATH", &dir)
        .output()
        .unwrap_or_else(|e| panic!("python3 could not be started ({e}): {SETUP}"));
    assert!(
        out.status.success(),
        "gguf-py could not read {}: {}\n(if gguf-py or numpy is missing: {SETUP})",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("gguf_py_read.py prints JSON");
    let from = v["gguf_py_file"].as_str().unwrap_or_default();
    assert!(Path::new(from).starts_with(&dir), "gguf-py was imported from {from}, not {}: {SETUP}", dir.display());
    v
}

/// (name, type, gguf-py shape, bytes) of every tensor of `shape` with matrices of `ty`, in
/// file order. gguf-py reports ggml's `ne` order: a matrix of `rows` rows of `k` is `[k, rows]`.
fn expected_tensors(sh: &synth::SynthShape, ty: GgmlType) -> Vec<(String, String, Vec<u64>, u64)> {
    let d = sh.n_embd / sh.n_head;
    let (e, ff, q, kv) = (sh.n_embd as u64, sh.n_ff as u64, (sh.n_head * d) as u64, (sh.n_kv_head * d) as u64);
    let mat = |name: String, k: u64, rows: u64| {
        (name, ty.to_string(), vec![k, rows], ty.row_size(k).expect("whole blocks") * rows)
    };
    let norm = |name: String| (name, "F32".to_string(), vec![e], 4 * e);
    let mut v = vec![mat("token_embd.weight".into(), e, sh.vocab as u64)];
    if !sh.tied {
        v.push(mat("output.weight".into(), e, sh.vocab as u64));
    }
    v.push(norm("output_norm.weight".into()));
    for i in 0..sh.n_layers {
        let p = |n: &str| format!("blk.{i}.{n}");
        v.push(norm(p("attn_norm.weight")));
        v.push(norm(p("ffn_norm.weight")));
        v.push(mat(p("attn_q.weight"), e, q));
        v.push(mat(p("attn_k.weight"), e, kv));
        v.push(mat(p("attn_v.weight"), e, kv));
        v.push(mat(p("attn_output.weight"), q, e));
        v.push(mat(p("ffn_gate.weight"), e, ff));
        v.push(mat(p("ffn_up.weight"), e, ff));
        v.push(mat(p("ffn_down.weight"), ff, e));
    }
    v
}

#[test]
fn synth_file_reads_in_gguf_py_with_expected_tensors_and_tokenizer() {
    let sh = synth::shape("smollm2-135m").unwrap();
    let path = scratch("smollm2-135m.Q4_0.gguf");
    let out = vkml(&["gguf", "synth", "--shape", "smollm2-135m", "--type", "Q4_0", "-o", path.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for part in [path.to_str().unwrap(), "smollm2-135m", "Q4_0", &format!("{len} bytes"), " s"] {
        assert!(err.contains(part), "{part:?} missing from {err:?}");
    }

    let py = gguf_py(&path);
    let got: Vec<(String, String, Vec<u64>, u64)> = py["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let shape = t["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
            (
                t["name"].as_str().unwrap().into(),
                t["type"].as_str().unwrap().into(),
                shape,
                t["n_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let want = expected_tensors(&sh, GgmlType::Q4_0);
    assert_eq!(got.len(), 2 + 9 * sh.n_layers, "tensor count");
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g, w);
    }
    assert_eq!(got.len(), want.len());

    let f = &py["fields"];
    assert_eq!(f["general.architecture"], "llama");
    assert_eq!(f["llama.block_count"], sh.n_layers);
    assert_eq!(f["llama.embedding_length"], sh.n_embd);
    assert_eq!(f["llama.feed_forward_length"], sh.n_ff);
    assert_eq!(f["llama.attention.head_count"], sh.n_head);
    assert_eq!(f["llama.attention.head_count_kv"], sh.n_kv_head);
    assert_eq!(f["llama.vocab_size"], sh.vocab);
    assert_eq!(f["tokenizer.ggml.model"], "llama");
    let tokens = &f["tokenizer.ggml.tokens"];
    assert_eq!(tokens["len"], sh.vocab);
    let head: Vec<&str> = tokens["head"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(head[..3], ["<unk>", "<s>", "</s>"]);
    let bytes: Vec<String> = (0..=255).map(|b| format!("<0x{b:02X}>")).collect();
    assert_eq!(head[3..259], bytes[..]);
    assert_eq!(head[259..263], ["▁", "!", "\"", "#"]);
    assert_eq!(tokens["last"].as_str().unwrap().chars().next(), Some('▁'));
    assert_eq!(f["tokenizer.ggml.scores"]["len"], sh.vocab);
    assert_eq!(f["tokenizer.ggml.scores"]["decreasing"], true);
    let counts = &f["tokenizer.ggml.token_type"]["counts"];
    assert_eq!(counts, &serde_json::json!({"1": sh.vocab - 259, "2": 1, "3": 2, "6": 256}));
    assert_eq!(f["tokenizer.ggml.unknown_token_id"], 0);
    assert_eq!(f["tokenizer.ggml.bos_token_id"], 1);
    assert_eq!(f["tokenizer.ggml.eos_token_id"], 2);

    // gguf-py's dequantized rows are vkml's at the same places (the data sits where the
    // header says), inside the weights' range ±1/√k.
    let file = GgufFile::open(&path).unwrap();
    for (name, s) in py["samples"].as_object().unwrap() {
        let t = file.tensors().iter().find(|t| &t.name == name).unwrap();
        let k = t.dims[0] as usize;
        let all = file.dequantize(name).unwrap();
        for (which, row) in [("first", &all[..k]), ("last", &all[all.len() - k..])] {
            // gguf-py computes some products in f64; both are f32 values once rounded.
            let mine: Vec<f32> = row[..8].iter().chain(&row[k - 8..]).copied().collect();
            let theirs: Vec<f32> = s[which].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
            assert_eq!(mine, theirs, "{name} {which} row");
            let bound = 1.0 / (k as f32).sqrt() * 1.01;
            assert!(theirs.iter().all(|x| x.abs() <= bound) && theirs.iter().any(|&x| x != 0.0), "{name}: {theirs:?}");
        }
    }
    std::fs::remove_file(&path).unwrap();
}

fn one_line_error(out: &Output, needles: &[&str]) {
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} missing from {err:?}");
    }
}

#[test]
fn bad_shape_and_type_are_one_line_errors() {
    let path = scratch("bad.gguf");
    let p = path.to_str().unwrap();
    let known: Vec<&str> = synth::SHAPES.iter().map(|s| s.name).collect();
    let mut needles = vec!["--shape", "\"llama-3b\""];
    needles.extend(&known);
    one_line_error(&vkml(&["gguf", "synth", "--shape", "llama-3b", "-o", p]), &needles);
    one_line_error(
        &vkml(&["gguf", "synth", "--shape", "smollm2-135m", "--type", "Q4_9", "-o", p]),
        &["--type", "\"Q4_9\"", "Q4_0", "Q8_0"],
    );
    one_line_error(
        &vkml(&["gguf", "synth", "--shape", "smollm2-135m", "--type", "iq2_xxs", "-o", p]),
        &["IQ2_XXS", "cannot quantize"],
    );
    // Q4_K's 256-value blocks do not divide smollm2's rows of 576.
    one_line_error(
        &vkml(&["gguf", "synth", "--shape", "smollm2-135m", "--type", "Q4_K", "-o", p]),
        &["Q4_K", "256", "576"],
    );
    assert!(!path.exists());
    assert!(!path.with_extension("gguf.part").exists());
}

/// `general.file_type` of `f` as its `Debug` form (`U32(2)`), if present.
fn file_type_of(f: &GgufFile) -> Option<String> {
    f.header().metadata.iter().find(|(k, _)| k == "general.file_type").map(|(_, v)| format!("{v:?}"))
}

/// Tensor `d` of `dst`, quantized from tensor `s` of `src`, holds the blocks of vkml-quant's
/// CPU quantizer on the same values, but for under 1 % of them (a device whose division is
/// not correctly rounded, unlike lavapipe's, may move a value across a rounding boundary).
fn assert_cpu_blocks(src: &GgufFile, s: &TensorInfo, dst: &GgufFile, d: &TensorInfo, what: &str) {
    let x = vkml_quant::dequant::dequantize_to_vec(s.ty, src.tensor_data(s)).unwrap();
    let cpu = vkml_quant::quantize(d.ty, &x).unwrap();
    let bb = d.ty.type_size();
    let differ = dst.tensor_data(d).chunks(bb).zip(cpu.chunks(bb)).filter(|(a, b)| a != b).count();
    assert!(differ * 100 < cpu.len() / bb, "{what} {}: {differ} of {} blocks differ", d.name, cpu.len() / bb);
}

/// `vkml gguf quantize` (the matrices quantized on the GPU) of a synthetic F16 SmolLM2 to
/// Q4_0: llama-quantize's types (2-D weights Q4_0; the tied token embedding, the head, Q8_0
/// because its rows of 576 are not whole Q6_K blocks; norms F32 as they were),
/// `general.file_type` 2, each matrix's blocks those of vkml-quant's CPU quantizer on the
/// same values (all of them on lavapipe, under 1 % elsewhere), opened by gguf-py with those types, and run by
/// `vkml generate`. An input already quantized to another type, and a type the GPU does
/// not write, are one-line errors.
#[test]
fn gguf_quantize_writes_llama_quantizes_types_from_the_gpu() {
    let f16 = scratch("q-in.F16.gguf");
    let q4 = scratch("q-out.Q4_0.gguf");
    let out = vkml(&["gguf", "synth", "--shape", "smollm2-135m", "--type", "F16", "-o", f16.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = vkml(&["gguf", "quantize", f16.to_str().unwrap(), q4.to_str().unwrap(), "--type", "q4_0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("Q4_0") && err.contains("quantized on"), "{err}");
    assert!(!PathBuf::from(format!("{}.part", q4.display())).exists(), "the partial file is renamed");
    let (src, dst) = (GgufFile::open(&f16).unwrap(), GgufFile::open(&q4).unwrap());
    assert_eq!(file_type_of(&dst), Some("U32(2)".into()));
    assert_llama_quantize_order(&src, &dst);
    for d in dst.tensors() {
        let s = src.header().tensor(&d.name).unwrap();
        assert_eq!(s.dims, d.dims);
        let want = if s.dims.len() == 1 {
            GgmlType::F32
        } else if s.name == "token_embd.weight" {
            GgmlType::Q8_0
        } else {
            GgmlType::Q4_0
        };
        assert_eq!(d.ty, want, "{}", d.name);
        if d.ty != s.ty {
            assert_cpu_blocks(&src, s, &dst, d, "Q4_0");
        }
    }
    let py = gguf_py(&q4);
    let types: Vec<(&str, &str)> = py["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["type"].as_str().unwrap()))
        .collect();
    assert!(
        types.contains(&("blk.0.ffn_down.weight", "Q4_0")) && types.contains(&("token_embd.weight", "Q8_0")),
        "{types:?}"
    );
    let out = vkml(&["generate", "-m", q4.to_str().unwrap(), "--prompt", "hello", "-n", "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Already quantized to another type; a type the GPU does not write.
    let q4k = scratch("q-in.Q4_1.gguf");
    assert!(vkml(&["gguf", "synth", "--shape", "smollm2-135m", "--type", "Q4_1", "-o", q4k.to_str().unwrap()])
        .status
        .success());
    one_line_error(
        &vkml(&["gguf", "quantize", q4k.to_str().unwrap(), q4.to_str().unwrap(), "--type", "Q4_0"]),
        &["is Q4_1", "F32, F16, BF16 or Q8_0"],
    );
    one_line_error(
        &vkml(&["gguf", "quantize", f16.to_str().unwrap(), q4.to_str().unwrap(), "--type", "IQ2_XXS"]),
        &["--type", "Q4_0, Q4_1", "Q4_K_M"],
    );
    for p in [&f16, &q4, &q4k] {
        let _ = std::fs::remove_file(p);
    }
}

/// `dst` holds `src`'s tensors in llama-quantize's order: by layer (`blk.N.`, else first),
/// then by name.
fn assert_llama_quantize_order(src: &GgufFile, dst: &GgufFile) {
    let key = |n: &str| {
        let layer = n.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|l| l.parse::<i64>().ok());
        (layer.unwrap_or(-1), n.to_string())
    };
    let mut want: Vec<String> = src.tensors().iter().map(|t| t.name.clone()).collect();
    want.sort_by_key(|n| key(n));
    let got: Vec<String> = dst.tensors().iter().map(|t| t.name.clone()).collect();
    assert_eq!(got, want, "llama-quantize's tensor order");
}

/// llama.cpp's `use_more_bits` (src/llama-quant.cpp), for the expectations below.
fn more_bits(i: usize, n: usize) -> bool {
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// `vkml gguf quantize` to llama-quantize's k-quant mixes on a synthetic F16 Llama of 12
/// layers (rows of 256 and 512, 4 query heads per KV head) whose tensors lie in string
/// order (the per-layer rules follow the layer number all the same, and the output is in
/// llama-quantize's order), every tensor's type against
/// llama.cpp's rules for the mix written out here (src/llama-quant.cpp,
/// `llama_tensor_get_type_impl`), the blocks those of vkml-quant's CPU quantizer on the
/// same values (under 1 % may differ), `general.file_type` the mix's `llama_ftype`, the
/// file opened by gguf-py with those types and run by `vkml generate`. Q4_K is the Q4_K_M
/// alias; TQ2_0 (the token embedding Q4_K), MXFP4_MOE (no experts: Q8_0) and F16 besides.
#[test]
fn gguf_quantize_writes_llama_quantizes_k_quant_mixes() {
    let sh = synth::SynthShape {
        experts: None,
        name: "mix-test",
        arch: "llama",
        n_layers: 12,
        n_embd: 256,
        n_ff: 512,
        n_head: 4,
        n_kv_head: 1,
        vocab: 1024,
        tied: false,
        head_dim: None,
        sliding_window: None,
    };
    // The input's tensors in string order (blk.0, blk.1, blk.10, blk.11, blk.2, ...), as
    // convert_hf_to_gguf often writes them: llama-quantize's counters follow the layers.
    let f16 = scratch("mix-in.F16.gguf");
    let model = synth::synthetic_model("llama", &sh, GgmlType::F16, 7).unwrap();
    let mut w = vkml_quant::gguf::GgufWriter::new();
    for (k, v) in model.metadata() {
        w.push_kv(k.clone(), v.clone());
    }
    let mut names: Vec<&vkml_quant::gguf::TensorInfo> = model.tensors().iter().collect();
    names.sort_by(|a, b| a.name.cmp(&b.name));
    for t in names {
        w.push_tensor(t.name.clone(), t.ty, t.dims.clone(), model.tensor_data(t).to_vec());
    }
    w.write_to(&f16).unwrap();
    use GgmlType as G;
    // (name, llama_ftype, the type of tensor `name` in layer `i`).
    type Rule = fn(&str, usize) -> GgmlType;
    // (name, llama_ftype, the head's type, the rule for the others).
    let mixes: [(&str, u32, GgmlType, Rule); 8] = [
        ("Q4_K", 15, G::Q6_K, |t, i| match t {
            "attn_v" | "ffn_down" if more_bits(i, 12) => G::Q6_K,
            _ => G::Q4_K,
        }),
        ("Q3_K_M", 12, G::Q6_K, |t, i| match t {
            "attn_v" if i < 2 => G::Q5_K,
            "attn_v" | "ffn_down" | "attn_output" => G::Q4_K,
            _ => G::Q3_K,
        }),
        ("q2_k", 10, G::Q6_K, |t, _| match t {
            "attn_v" => G::Q4_K,
            "ffn_down" | "attn_output" => G::Q3_K,
            _ => G::Q2_K,
        }),
        ("Q4_K_S", 14, G::Q6_K, |t, i| match t {
            "attn_v" if i < 4 => G::Q5_K,
            "ffn_down" if i < 1 => G::Q5_K,
            _ => G::Q4_K,
        }),
        ("IQ4_XS", 30, G::Q6_K, |t, i| match t {
            "attn_v" => G::Q5_K,
            "ffn_down" if i < 1 => G::Q5_K,
            _ => G::IQ4_XS,
        }),
        ("TQ2_0", 37, G::Q6_K, |t, _| if t == "token_embd" { G::Q4_K } else { G::TQ2_0 }),
        // No expert tensors: every matrix Q8_0.
        ("MXFP4_MOE", 38, G::Q8_0, |_, _| G::Q8_0),
        ("F16", 1, G::F16, |_, _| G::F16),
    ];
    let src = GgufFile::open(&f16).unwrap();
    for (name, ftype, head, rule) in mixes {
        let out_path = scratch(&format!("mix-out.{name}.gguf"));
        let out = vkml(&["gguf", "quantize", f16.to_str().unwrap(), out_path.to_str().unwrap(), "--type", name]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {err}");
        let dst = GgufFile::open(&out_path).unwrap();
        assert_eq!(file_type_of(&dst), Some(format!("U32({ftype})")), "{name}");
        let mut expected = Vec::new();
        assert_llama_quantize_order(&src, &dst);
        for d in dst.tensors() {
            let s = src.header().tensor(&d.name).unwrap();
            assert_eq!(s.dims, d.dims);
            let want = if s.dims.len() == 1 {
                GgmlType::F32
            } else if s.name == "output.weight" {
                head
            } else if s.name == "token_embd.weight" {
                rule("token_embd", 0)
            } else {
                let mut parts = s.name.split('.');
                let layer: usize = parts.nth(1).unwrap().parse().unwrap();
                rule(parts.next().unwrap(), layer)
            };
            assert_eq!(d.ty, want, "{name}: {}", d.name);
            expected.push((d.name.clone(), want.to_string()));
            if d.ty != s.ty {
                assert_cpu_blocks(&src, s, &dst, d, name);
            }
        }
        let py = gguf_py(&out_path);
        let types: Vec<(String, String)> = py["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap().to_string(), t["type"].as_str().unwrap().to_string()))
            .collect();
        assert_eq!(types, expected, "{name}: gguf-py's types");
        let out = vkml(&["generate", "-m", out_path.to_str().unwrap(), "--prompt", "hello", "-n", "3"]);
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let _ = std::fs::remove_file(&out_path);
    }
    let _ = std::fs::remove_file(&f16);
}
