//! The fuzz targets' inputs replayed in the ordinary test run: every file kept under
//! `fuzz/corpus/<target>/` (past findings and interesting inputs), the seeds the targets
//! start from (synthetic models of every architecture, hostile chat templates), and
//! deterministic corruptions of those seeds (single bytes of the header set to 0x00, 0xff
//! or flipped; truncations), each through the same function the cargo-fuzz target calls
//! (`vkml_models::fuzzing`). Each must return without a panic.

use std::path::Path;

use vkml_models::fuzzing;
use vkml_models::synth::{synthetic_model, SynthExperts, SynthShape, ARCHS};
use vkml_quant::GgmlType;

const TINY: SynthShape = SynthShape {
    name: "tiny",
    arch: "llama",
    head_dim: Some(16),
    sliding_window: Some(4),
    experts: Some(SynthExperts { n_expert: 4, n_used: 2, n_ff_exp: 32 }),
    n_layers: 7,
    n_embd: 32,
    n_ff: 64,
    n_head: 2,
    n_kv_head: 1,
    vocab: 300,
    tied: true,
};

/// A synthetic model of every architecture, as bytes.
fn model_seeds() -> Vec<Vec<u8>> {
    ARCHS.iter().map(|a| synthetic_model(a, &TINY, GgmlType::Q8_0, 5).unwrap().bytes().to_vec()).collect()
}

/// The files kept in `fuzz/corpus/<target>`.
fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut files: Vec<_> =
        std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    files.sort();
    files.iter().filter(|p| p.is_file()).map(|p| std::fs::read(p).unwrap()).collect()
}

/// `seed` with deterministic damage: bytes of its first `span` set to 0x00 / 0xff /
/// flipped, and truncations.
fn corruptions(seed: &[u8], span: usize, n: usize) -> Vec<Vec<u8>> {
    let span = span.min(seed.len()).max(1);
    let mut out = Vec::new();
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let at = (s % span as u64) as usize;
        let mut v = seed.to_vec();
        match i % 4 {
            0 => v[at] = 0,
            1 => v[at] = 0xff,
            2 => v[at] ^= 1 << (s % 8),
            _ => v.truncate(at),
        }
        out.push(v);
    }
    out
}

fn replay(target: &str, f: fn(&[u8]), seeds: &[Vec<u8>], span: usize, n: usize) {
    let kept = corpus(target);
    let t = std::time::Instant::now();
    let mut count = 0;
    for input in kept.iter().chain(seeds) {
        f(input);
        count += 1;
    }
    for seed in seeds {
        for input in corruptions(seed, span, n) {
            f(&input);
            count += 1;
        }
    }
    eprintln!("{target}: {count} inputs ({} kept) in {:.1} s", kept.len(), t.elapsed().as_secs_f64());
}

#[test]
fn model_config_inputs_replay() {
    replay("model_config", fuzzing::config, &model_seeds(), 4096, 300);
}

#[test]
fn tokenizer_inputs_replay() {
    replay("tokenizer", fuzzing::tokenizer, &model_seeds(), 4096, 100);
}

/// Chat templates: two ordinary ones and hostile ones (runaway loops, huge output and
/// widths, unbounded recursion, raised errors).
const TEMPLATE_SEEDS: &[&str] = &[
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
    "{{ bos_token }}{% for m in messages %}{{ m['content'] | trim }}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
    "{{ \"{:>1000000000000000}\".format(1) }}",
    "{{ \"%1000000000000s\"|format(1) }}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{{ raise_exception('no') }}",
    "{{ messages[0].content.split('')|list }}{{ (messages|length) * 99999999999 }}",
];

#[test]
fn chat_template_inputs_replay() {
    let seeds: Vec<Vec<u8>> = TEMPLATE_SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect();
    replay("chat_template", fuzzing::template, &seeds, 200, 30);
}

#[test]
fn model_load_inputs_replay() {
    replay("model_load", fuzzing::model_load, &model_seeds(), 4096, 40);
}

/// Writes the seeds above as files, one folder per target, under `$VKML_FUZZ_SEEDS_OUT`
/// (run with `--ignored`): the starting corpus of a cargo-fuzz run.
#[test]
#[ignore = "writes fuzz seeds; run by hand"]
fn write_fuzz_seeds() {
    let Ok(out) = std::env::var("VKML_FUZZ_SEEDS_OUT") else { return };
    let out = Path::new(&out);
    for target in ["model_config", "tokenizer", "model_load"] {
        std::fs::create_dir_all(out.join(target)).unwrap();
        for (a, seed) in ARCHS.iter().zip(model_seeds()) {
            std::fs::write(out.join(target).join(format!("{a}.gguf")), seed).unwrap();
        }
    }
    std::fs::create_dir_all(out.join("chat_template")).unwrap();
    for (i, t) in TEMPLATE_SEEDS.iter().enumerate() {
        std::fs::write(out.join("chat_template").join(format!("t{i}.jinja")), t).unwrap();
    }
}
