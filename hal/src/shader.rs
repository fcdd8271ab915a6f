//! Shader dialect frontends: turn kernel source into SPIR-V words for
//! [`crate::Device::register_kernel`]. GLSL and HLSL compile through glslang
//! (`vkml_shaders::compile`); SPIR-V passes through after a header check.
//!
//! GLSL kernels may `#include` vkml's own headers (`#include "common.glsl"`, see
//! `vkml_shaders::HEADERS`) and headers handed to [`Glsl::with_header`].

use vkml_shaders::compile::{self, CompileError, CompileRequest, Dialect, TargetEnv};

use crate::error::Result;

/// Turns source bytes into SPIR-V words.
pub trait ShaderFrontend: Send + Sync {
    /// Compiles `source` (named `name` in diagnostics).
    ///
    /// # Errors
    /// [`crate::Error::Shader`] with the compiler's message (name, line, reason).
    fn to_spirv(&self, name: &str, source: &[u8]) -> Result<Vec<u32>>;
}

/// GLSL compute shaders (`#version 450` or later), compiled with glslang for Vulkan 1.2
/// (SPIR-V 1.5) unless [`Glsl::target`] says otherwise.
#[derive(Debug, Clone, Default)]
pub struct Glsl {
    defines: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    target: TargetEnv,
}

/// HLSL compute shaders (`[numthreads]`, `StructuredBuffer`/`RWStructuredBuffer` bound
/// with `register(tN)`/`register(uN)` mapping to binding N of set 0), compiled with
/// glslang's HLSL front end.
#[derive(Debug, Clone)]
pub struct Hlsl {
    entry_point: String,
    defines: Vec<(String, String)>,
    target: TargetEnv,
}

/// SPIR-V binary passthrough: little-endian words starting with the magic number.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpirvPassthrough;

impl Glsl {
    /// A GLSL frontend with no extra defines or headers.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds a `#define NAME VALUE`.
    pub fn define(mut self, name: &str, value: &str) -> Self {
        self.defines.push((name.into(), value.into()));
        self
    }
    /// Makes `#include "name"` resolve to `text`.
    pub fn with_header(mut self, name: &str, text: &str) -> Self {
        self.headers.push((name.into(), text.into()));
        self
    }
    /// Sets the target environment.
    pub fn target(mut self, target: TargetEnv) -> Self {
        self.target = target;
        self
    }
}

impl Hlsl {
    /// An HLSL frontend whose compute entry point is the function `entry_point`.
    pub fn new(entry_point: &str) -> Self {
        Hlsl { entry_point: entry_point.into(), defines: Vec::new(), target: TargetEnv::default() }
    }
    /// Adds a `#define NAME VALUE`.
    pub fn define(mut self, name: &str, value: &str) -> Self {
        self.defines.push((name.into(), value.into()));
        self
    }
}

fn utf8<'a>(name: &str, source: &'a [u8]) -> Result<&'a str> {
    std::str::from_utf8(source).map_err(|e| {
        CompileError::Compile { name: name.into(), log: format!("the source is not UTF-8 text: {e}") }.into()
    })
}

fn run(
    name: &str,
    source: &str,
    dialect: Dialect,
    entry: &str,
    defines: &[(String, String)],
    headers: &[(String, String)],
    target: TargetEnv,
) -> Result<Vec<u32>> {
    let defs: Vec<(&str, &str)> = defines.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let resolve = |req: &str, _includer: &str| {
        headers
            .iter()
            .find(|(n, _)| n == req)
            .map(|(n, t)| (n.clone(), t.clone()))
            .or_else(|| vkml_shaders::header(req).map(|t| (req.to_string(), t.to_string())))
    };
    let req =
        CompileRequest { name, source, dialect, entry_point: entry, defines: &defs, includes: Some(&resolve), target };
    Ok(compile::compile(&req)?)
}

impl ShaderFrontend for Glsl {
    fn to_spirv(&self, name: &str, source: &[u8]) -> Result<Vec<u32>> {
        run(name, utf8(name, source)?, Dialect::Glsl, "main", &self.defines, &self.headers, self.target)
    }
}

impl ShaderFrontend for Hlsl {
    fn to_spirv(&self, name: &str, source: &[u8]) -> Result<Vec<u32>> {
        run(name, utf8(name, source)?, Dialect::Hlsl, &self.entry_point, &self.defines, &[], self.target)
    }
}

impl ShaderFrontend for SpirvPassthrough {
    fn to_spirv(&self, name: &str, source: &[u8]) -> Result<Vec<u32>> {
        let bad = |reason: &str| CompileError::InvalidSpirv { name: name.into(), reason: reason.into() };
        if !source.len().is_multiple_of(4) || source.len() < 20 {
            return Err(bad("a SPIR-V module is a whole number of 4-byte words, at least a 5-word header").into());
        }
        let words: Vec<u32> = source.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        if words[0] != 0x0723_0203 {
            return Err(bad("missing the little-endian SPIR-V magic number 0x07230203").into());
        }
        Ok(words)
    }
}
