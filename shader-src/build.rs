//! Compiles every `shaders/*.comp` (each of its variants) to SPIR-V with glslang, reflects
//! its interface, and writes `$OUT_DIR/registry.rs`: the embedded words plus, per variant,
//! its bindings and push-constant size. Headers under `shaders/include/` are resolved for
//! `#include "name"` and embedded so that run-time kernels can include them too.
//!
//! A variant is declared in the shader's leading comment lines:
//!
//! ```text
//! //! variant f32 TYPE=float
//! //! variant f16 TYPE=float16_t
//! //! target vulkan1.3
//! //! variants-of dequant.comp      (every variant of another shader, same names and defines)
//! ```
//!
//! Each variant is registered as `<file stem>.<variant>`; a shader without variant lines is
//! registered as `<file stem>`. A shader that fails to compile fails the build with
//! glslang's message and the file name.
//!
//! Incremental: each variant's SPIR-V is kept in `$OUT_DIR` next to a hash of what it was
//! compiled from (the shader text, every header, its defines and target, the compiler
//! options in `src/compile.rs` and this script). A variant whose hash is unchanged is not
//! recompiled, so editing one shader recompiles only that shader's variants (editing a
//! header recompiles everything).

#[path = "src/compile.rs"]
#[allow(dead_code)]
mod compile;

use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

struct Variant {
    key: String,
    defines: Vec<(String, String)>,
}

struct Job {
    file: PathBuf,
    source: String,
    target: compile::TargetEnv,
    variant: Variant,
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let shader_dir = root.join("shaders");
    let include_dir = shader_dir.join("include");
    println!("cargo:rerun-if-changed={}", shader_dir.display());
    println!("cargo:rerun-if-changed=src/compile.rs");

    let headers = read_dir_sorted(&include_dir, "glsl");
    let header_texts: Vec<(String, String)> = headers
        .iter()
        .map(|p| {
            println!("cargo:rerun-if-changed={}", p.display());
            (file_name(p), read(p))
        })
        .collect();

    let mut jobs = Vec::new();
    for file in read_dir_sorted(&shader_dir, "comp") {
        println!("cargo:rerun-if-changed={}", file.display());
        let source = read(&file);
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        let (target, variants) = parse_header(&file, &stem, &source);
        for variant in variants {
            jobs.push(Job { file: file.clone(), source: source.clone(), target, variant });
        }
    }

    jobs.sort_by(|a, b| a.variant.key.cmp(&b.variant.key));
    // Compile in parallel: glslang is thread-safe once its process is initialised.
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).max(1);
    let chunk = jobs.len().div_ceil(threads).max(1);
    let results: Vec<Result<(Vec<u32>, compile::Interface), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .chunks(chunk)
            .map(|batch| s.spawn(|| batch.iter().map(|j| cached_or_build(j, &header_texts, &out)).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().flat_map(|h| h.join().expect("shader compile thread panicked")).collect()
    });

    let mut failed = false;
    let mut entries = String::new();
    let mut statics = String::new();
    for (i, (job, result)) in jobs.iter().zip(results).enumerate() {
        match result {
            Err(msg) => {
                eprintln!("error: {msg}");
                failed = true;
            }
            Ok((_words, iface)) => {
                // cached_or_build wrote (or kept) the words in `$OUT_DIR/<key>.spv`.
                let spv = out.join(format!("{}.spv", job.variant.key));
                writeln!(
                    statics,
                    "static SPV_{i}: &Aligned<[u8]> = &Aligned(*include_bytes!({:?}));",
                    spv.display().to_string()
                )
                .unwrap();
                let bindings: Vec<String> = iface
                    .bindings
                    .iter()
                    .map(|b| format!("BindingInfo {{ binding: {}, access: Access::{:?} }}", b.binding, b.access))
                    .collect();
                let defines: Vec<String> = job.variant.defines.iter().map(|(k, v)| format!("({k:?}, {v:?})")).collect();
                writeln!(
                    entries,
                    "    ShaderInfo {{ name: {:?}, file: {:?}, defines: &[{}], spirv: &SPV_{i}.0, bindings: &[{}], push_constant_size: {}, spec_ids: &{:?}, local_size: {:?}, shared_memory_size: {:?} }},",
                    job.variant.key,
                    file_name(&job.file),
                    defines.join(", "),
                    bindings.join(", "),
                    iface.push_constant_size,
                    iface.spec_ids,
                    iface.local_size,
                    iface.shared_memory_size,
                )
                .unwrap();
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
    let mut reg = String::from("// Generated by shader-src/build.rs. Do not edit.\n");
    reg.push_str(&statics);
    writeln!(
        reg,
        "/// Every build-time shader variant, sorted by name.\npub static SHADERS: &[ShaderInfo] = &[\n{entries}];"
    )
    .unwrap();
    let hdrs: Vec<String> = header_texts
        .iter()
        .map(|(name, _)| format!("    ({name:?}, include_str!({:?})),", include_dir.join(name).display().to_string()))
        .collect();
    writeln!(
        reg,
        "/// Headers under `shaders/include/`, by file name.\npub static HEADERS: &[(&str, &str)] = &[\n{}\n];",
        hdrs.join("\n")
    )
    .unwrap();
    std::fs::write(out.join("registry.rs"), reg).unwrap_or_else(|e| die(&format!("writing registry.rs: {e}")));
}

/// The SPIR-V and interface of `job`: from the previous build's `$OUT_DIR` when the hash of
/// its inputs is unchanged, else compiled (and the hash stored beside the words).
fn cached_or_build(
    job: &Job,
    headers: &[(String, String)],
    out: &Path,
) -> Result<(Vec<u32>, compile::Interface), String> {
    let spv = out.join(format!("{}.spv", job.variant.key));
    let stamp = out.join(format!("{}.hash", job.variant.key));
    let key = format!("{:016x}", input_hash(job, headers));
    if std::fs::read_to_string(&stamp).is_ok_and(|k| k == key) {
        if let Ok(bytes) = std::fs::read(&spv) {
            if bytes.len() % 4 == 0 && !bytes.is_empty() {
                let words: Vec<u32> =
                    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
                let name = format!("shader-src/shaders/{} (variant `{}`)", file_name(&job.file), job.variant.key);
                if let Ok(iface) = compile::reflect(&name, &words) {
                    return Ok((words, iface));
                }
            }
        }
    }
    let built = build_one(job, headers)?;
    // The stamp goes before the words are replaced and comes back after, so a stamp
    // always describes the words beside it.
    let _ = std::fs::remove_file(&stamp);
    let bytes: Vec<u8> = built.0.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(&spv, bytes).map_err(|e| format!("writing {}: {e}", spv.display()))?;
    std::fs::write(&stamp, key).map_err(|e| format!("writing {}: {e}", stamp.display()))?;
    Ok(built)
}

/// Hash of everything a variant's SPIR-V depends on: the shader source, every header
/// (all of them: cheaper than being wrong about which ones a shader includes), its
/// defines, its target, the compiler options (`src/compile.rs`) and this script (which
/// sets the entry point and dialect). Only compared within one `$OUT_DIR` (one
/// toolchain), so `DefaultHasher` suffices.
fn input_hash(job: &Job, headers: &[(String, String)]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    include_str!("src/compile.rs").hash(&mut h);
    include_str!("build.rs").hash(&mut h);
    job.source.hash(&mut h);
    format!("{:?}", job.target).hash(&mut h);
    job.variant.defines.hash(&mut h);
    headers.hash(&mut h);
    h.finish()
}

fn build_one(job: &Job, headers: &[(String, String)]) -> Result<(Vec<u32>, compile::Interface), String> {
    let name = format!("shader-src/shaders/{} (variant `{}`)", file_name(&job.file), job.variant.key);
    let defines: Vec<(&str, &str)> = job.variant.defines.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let resolve =
        |req: &str, _includer: &str| headers.iter().find(|(n, _)| n == req).map(|(n, text)| (n.clone(), text.clone()));
    let request = compile::CompileRequest {
        name: &name,
        source: &job.source,
        dialect: compile::Dialect::Glsl,
        entry_point: "main",
        defines: &defines,
        includes: Some(&resolve),
        target: job.target,
    };
    let words = compile::compile(&request).map_err(|e| e.to_string())?;
    let iface = compile::reflect(&name, &words).map_err(|e| e.to_string())?;
    Ok((words, iface))
}

fn parse_header(file: &Path, stem: &str, source: &str) -> (compile::TargetEnv, Vec<Variant>) {
    let mut target = compile::TargetEnv::Vulkan1_2;
    let mut variants = Vec::new();
    for line in source.lines().take_while(|l| l.starts_with("//")) {
        let Some(rest) = line.strip_prefix("//!") else { continue };
        let mut words = rest.split_whitespace();
        match words.next() {
            Some("variant") => {
                let name =
                    words.next().unwrap_or_else(|| die(&format!("{}: `//! variant` needs a name", file.display())));
                let defines = words
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').unwrap_or((kv, "1"));
                        (k.to_string(), v.to_string())
                    })
                    .collect();
                variants.push(Variant { key: format!("{stem}.{name}"), defines });
            }
            Some("variants-of") => {
                // The variant list of another shader (same names and defines), so that
                // kernels covering every type need the list kept in one place.
                let other =
                    words.next().unwrap_or_else(|| die(&format!("{}: `//! variants-of` needs a file", file.display())));
                let path = file.with_file_name(other);
                let text = read(&path);
                let (_, theirs) = parse_header(&path, "", &text);
                for v in theirs {
                    let name = v.key.trim_start_matches('.');
                    if name.is_empty() {
                        die(&format!("{}: {other} declares no variants", file.display()));
                    }
                    variants.push(Variant { key: format!("{stem}.{name}"), defines: v.defines });
                }
            }
            Some("target") => {
                target = match words.next() {
                    Some("vulkan1.2") => compile::TargetEnv::Vulkan1_2,
                    Some("vulkan1.3") => compile::TargetEnv::Vulkan1_3,
                    other => die(&format!("{}: unknown target {other:?} (vulkan1.2 or vulkan1.3)", file.display())),
                }
            }
            _ => {}
        }
    }
    if variants.is_empty() {
        variants.push(Variant { key: stem.to_string(), defines: Vec::new() });
    }
    (target, variants)
}

fn read_dir_sorted(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some(ext))
        .collect();
    v.sort();
    v
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| die(&format!("reading {}: {e}", p.display())))
}

fn file_name(p: &Path) -> String {
    p.file_name().and_then(|s| s.to_str()).unwrap_or_default().to_string()
}

fn die(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}
