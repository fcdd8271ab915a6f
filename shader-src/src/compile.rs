//! The shader compiler front: GLSL and HLSL compute shaders to SPIR-V through glslang,
//! and reflection of a SPIR-V module's interface (storage-buffer bindings and their
//! access, push-constant block size, specialization-constant ids, workgroup size).
//!
//! This file is shared, through `#[path]`, by the crate's build script (which compiles
//! every `shaders/*.comp` at build time) and by the library (which compiles users'
//! kernels at run time, see `vkml_hal::shader`). It therefore depends on nothing but
//! `glslang`, `rspirv` and `thiserror`.
//!
//! Sources: the SPIR-V specification 1.6 (section 2.3 "Physical Layout of a SPIR-V
//! Module", section 3.20 "Decoration" for `Binding`, `DescriptorSet`, `NonWritable`,
//! `NonReadable`, `Offset`, `ArrayStride`, `MatrixStride`, `SpecId`), and glslang's C
//! interface (`glslang_c_interface.h`).

use std::collections::{BTreeMap, HashMap};

use rspirv::dr::{Instruction, Operand};
use rspirv::spirv::{self, Decoration, Op, StorageClass};

/// Source language of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// GLSL (`#version 450` or later, Vulkan semantics).
    Glsl,
    /// HLSL (Shader Model 6 style compute shaders, `[numthreads(x, y, z)]`).
    Hlsl,
}

/// SPIR-V target environment of a compilation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TargetEnv {
    /// Vulkan 1.2, SPIR-V 1.5: vkml's minimum, and the default.
    #[default]
    Vulkan1_2,
    /// Vulkan 1.3, SPIR-V 1.6.
    Vulkan1_3,
}

/// Resolves `#include "name"` and `#include <name>` directives.
///
/// Called with the requested name and the name of the including file; returns the
/// resolved name (used in later diagnostics and nested includes) and the contents, or
/// `None` when the header does not exist (glslang then reports the failed include).
pub type IncludeResolver<'a> = &'a dyn Fn(&str, &str) -> Option<(String, String)>;

/// One compilation: source, dialect, entry point, defines and include resolution.
#[derive(Clone, Copy)]
pub struct CompileRequest<'a> {
    /// Name used in diagnostics (a file name for build-time shaders).
    pub name: &'a str,
    /// Shader source text.
    pub source: &'a str,
    /// Source language.
    pub dialect: Dialect,
    /// Entry point in the source (`main` for GLSL; any function name for HLSL). The
    /// SPIR-V entry point is always called `main`.
    pub entry_point: &'a str,
    /// Preprocessor defines (`NAME`, `VALUE`), applied before the source.
    pub defines: &'a [(&'a str, &'a str)],
    /// Include resolution; `None` makes every `#include` an error.
    pub includes: Option<IncludeResolver<'a>>,
    /// SPIR-V target environment.
    pub target: TargetEnv,
}

impl std::fmt::Debug for CompileRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompileRequest")
            .field("name", &self.name)
            .field("dialect", &self.dialect)
            .field("entry_point", &self.entry_point)
            .field("defines", &self.defines)
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// Errors of compilation and reflection.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// glslang rejected the source; `log` is glslang's message (file, line, reason).
    #[error("shader `{name}` failed to compile:\n{log}")]
    Compile {
        /// The request's name.
        name: String,
        /// glslang's info log.
        log: String,
    },
    /// The glslang process could not be initialised.
    #[error("the glslang compiler could not be initialised")]
    CompilerUnavailable,
    /// The words are not a SPIR-V module, or one vkml cannot reflect.
    #[error("shader `{name}`: invalid SPIR-V: {reason}")]
    InvalidSpirv {
        /// The module's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// Access of a kernel to one storage buffer, from the `NonWritable` / `NonReadable`
/// decorations (`readonly` / `writeonly` in GLSL, `StructuredBuffer` in HLSL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// The kernel only reads the buffer.
    Read,
    /// The kernel only writes the buffer.
    Write,
    /// The kernel may read and write the buffer.
    ReadWrite,
}

impl Access {
    /// Whether the kernel may write the buffer.
    pub fn writes(self) -> bool {
        !matches!(self, Access::Read)
    }
    /// Whether the kernel may read the buffer.
    pub fn reads(self) -> bool {
        !matches!(self, Access::Write)
    }
}

/// One storage-buffer binding of a kernel (descriptor set 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BindingInfo {
    /// Binding number in set 0.
    pub binding: u32,
    /// Declared access.
    pub access: Access,
}

/// The interface of a compute shader, as reflected from its SPIR-V.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interface {
    /// Storage-buffer bindings of descriptor set 0, sorted by binding number and dense
    /// (binding `i` at index `i`).
    pub bindings: Vec<BindingInfo>,
    /// Size in bytes of the push-constant block (0 when there is none).
    pub push_constant_size: u32,
    /// Specialization-constant ids declared by the module (`SpecId`), sorted.
    pub spec_ids: Vec<u32>,
    /// `LocalSize` execution mode of the entry point: the default workgroup size. A
    /// `WorkgroupSize` built-in made of specialization constants (GLSL
    /// `local_size_x_id`) replaces it when the pipeline is specialized.
    pub local_size: Option<[u32; 3]>,
    /// Bytes of shared (`Workgroup`) memory the module declares, counted without padding
    /// (a lower bound of what the driver allocates); `None` where a size depends on a
    /// specialization constant.
    pub shared_memory_size: Option<u32>,
}

/// Compiles one compute shader to SPIR-V words.
///
/// # Errors
/// [`CompileError::Compile`] with glslang's log (which names the file and line) when the
/// source does not compile; [`CompileError::CompilerUnavailable`] when glslang cannot
/// start.
pub fn compile(req: &CompileRequest<'_>) -> Result<Vec<u32>, CompileError> {
    use glslang::include::{IncludeHandler, IncludeResult, IncludeType};
    use glslang::{
        Compiler, CompilerOptions, ShaderInput, ShaderMessage, ShaderSource, ShaderStage, SourceLanguage, SpirvVersion,
        Target, VulkanVersion,
    };

    struct Resolver<'r> {
        resolve: Option<IncludeResolver<'r>>,
    }
    impl IncludeHandler for Resolver<'_> {
        fn include(&mut self, _ty: IncludeType, header: &str, includer: &str, _depth: usize) -> Option<IncludeResult> {
            let (name, data) = (self.resolve?)(header, includer)?;
            Some(IncludeResult { name, data })
        }
    }

    let fail = |log: String| CompileError::Compile { name: req.name.to_string(), log };
    let compiler = Compiler::acquire().ok_or(CompileError::CompilerUnavailable)?;
    let (version, spirv_version) = match req.target {
        TargetEnv::Vulkan1_2 => (VulkanVersion::Vulkan1_2, SpirvVersion::SPIRV1_5),
        TargetEnv::Vulkan1_3 => (VulkanVersion::Vulkan1_3, SpirvVersion::SPIRV1_6),
    };
    let mut messages = ShaderMessage::DEFAULT | ShaderMessage::SPV_RULES | ShaderMessage::VULKAN_RULES;
    let source_language = match req.dialect {
        Dialect::Glsl => SourceLanguage::GLSL,
        Dialect::Hlsl => {
            messages |= ShaderMessage::READ_HLSL | ShaderMessage::HLSL_LEGALIZATION;
            SourceLanguage::HLSL
        }
    };
    let options = CompilerOptions {
        source_language,
        target: Target::Vulkan { version, spirv_version },
        version_profile: None,
        messages,
    };
    // glslang's CString conversion would panic on an interior NUL: reject it here.
    if req.source.contains('\0') {
        return Err(fail("the source contains a NUL byte".into()));
    }
    let source = ShaderSource::from(req.source);
    let defines: Vec<(&str, Option<&str>)> = req.defines.iter().map(|(k, v)| (*k, Some(*v))).collect();
    let mut resolver = Resolver { resolve: req.includes };
    let input = ShaderInput::new(&source, ShaderStage::Compute, &options, Some(&defines[..]), Some(&mut resolver))
        .map_err(|e| fail(e.to_string()))?;
    let mut builder = glslang::Shader::new(compiler, input);
    if req.dialect == Dialect::Hlsl {
        builder.source_entry_point(req.entry_point);
        builder.entry_point("main");
    }
    let shader = builder.parse().map_err(|e| fail(glslang_log(&e)))?;
    let mut program = compiler.create_program();
    program.add_shader(&shader);
    program.compile(ShaderStage::Compute).map_err(|e| fail(glslang_log(&e)))
}

fn glslang_log(e: &glslang::error::GlslangError) -> String {
    use glslang::error::GlslangError as G;
    match e {
        G::PreprocessError(l) | G::ParseError(l) | G::MapIoError(l) | G::LinkError(l) => {
            let mut s = l.log.trim().to_string();
            if s.is_empty() {
                s = l.debug_log.trim().to_string();
            }
            s
        }
        other => other.to_string(),
    }
}

/// `words` with what the reflection's parser (rspirv 0.12, SPIR-V 1.6 of SDK 1.3.268)
/// predates removed or rewritten, for reflection only (the module that runs is unchanged).
/// Reflection reads annotations, execution modes and module-level declarations, so:
/// capabilities and extensions are dropped (SPV_KHR_bfloat16's 5116..=5118,
/// SPV_NV_cooperative_matrix2's, SPV_NV_tensor_addressing's), and so is everything from the
/// first OpFunction on (function bodies come last in a module); a module-level instruction
/// whose opcode rspirv does not know (OpTypeTensorLayoutNV, OpTypeTensorViewNV) is dropped,
/// which is sound because resources are never of those types; SPV_KHR_bfloat16's
/// `OpTypeFloat 16 BFloat16KHR` is read as a plain 16-bit float, which has the same size
/// and alignment.
fn reflectable(words: &[u32]) -> Vec<u32> {
    const OP_CAPABILITY: u32 = 17;
    const OP_EXTENSION: u32 = 10;
    const OP_TYPE_FLOAT: u32 = 22;
    const OP_FUNCTION: u32 = 54;
    if words.len() < 5 {
        return words.to_vec();
    }
    let mut out = words[..5].to_vec();
    let mut i = 5;
    while i < words.len() {
        let (op, wc) = (words[i] & 0xFFFF, (words[i] >> 16) as usize);
        if wc == 0 {
            // Malformed: left for the parser to report.
            return words.to_vec();
        }
        let end = (i + wc).min(words.len());
        let ins = &words[i..end];
        if op == OP_FUNCTION {
            break;
        }
        let known = rspirv::grammar::CoreInstructionTable::lookup_opcode(op as u16).is_some();
        if op == OP_CAPABILITY || op == OP_EXTENSION || !known {
            // dropped
        } else if op == OP_TYPE_FLOAT && wc == 4 {
            out.extend([(3 << 16) | OP_TYPE_FLOAT, ins[1], ins[2]]);
        } else {
            out.extend_from_slice(ins);
        }
        i = end;
    }
    out
}

/// Reflects the interface of a compute shader's SPIR-V.
///
/// Every resource must be a storage buffer in descriptor set 0 (vkml's kernel ABI), the
/// bindings dense from 0, and there must be at most one push-constant block.
///
/// # Errors
/// [`CompileError::InvalidSpirv`] naming the problem (not SPIR-V, a resource that is not
/// a storage buffer, a binding gap, a type whose size cannot be computed).
pub fn reflect(name: &str, words: &[u32]) -> Result<Interface, CompileError> {
    let bad = |reason: String| CompileError::InvalidSpirv { name: name.to_string(), reason };
    if words.first() != Some(&spirv::MAGIC_NUMBER) {
        return Err(bad("missing the SPIR-V magic number 0x07230203".into()));
    }
    let mut module = FlatModule::default();
    let words = reflectable(words);
    rspirv::binary::parse_words(&words, &mut module).map_err(|e| bad(e.to_string()))?;
    let m = &module;

    let mut decorations: Decorations = HashMap::new();
    let mut member_decorations: MemberDecorations = HashMap::new();
    for ins in &m.annotations {
        match ins.class.opcode {
            Op::Decorate => {
                if let (Some(Operand::IdRef(id)), Some(Operand::Decoration(d))) =
                    (ins.operands.first(), ins.operands.get(1))
                {
                    decorations.entry(*id).or_default().push((*d, literal(ins.operands.get(2))));
                }
            }
            Op::MemberDecorate => {
                if let (Some(Operand::IdRef(id)), Some(Operand::LiteralBit32(member)), Some(Operand::Decoration(d))) =
                    (ins.operands.first(), ins.operands.get(1), ins.operands.get(2))
                {
                    member_decorations.entry((*id, *member)).or_default().push((*d, literal(ins.operands.get(3))));
                }
            }
            _ => {}
        }
    }
    let decoration =
        |id: u32, d: Decoration| decorations.get(&id).and_then(|v| v.iter().find(|(x, _)| *x == d)).map(|(_, v)| *v);
    let defs: HashMap<u32, &Instruction> =
        m.types_global_values.iter().filter_map(|i| i.result_id.map(|id| (id, i))).collect();

    let mut bindings = BTreeMap::new();
    let mut push_constant_size = 0;
    let mut shared_memory_size = Some(0u32);
    for var in m.types_global_values.iter().filter(|i| i.class.opcode == Op::Variable) {
        let (Some(id), Some(ptr_ty)) = (var.result_id, var.result_type) else { continue };
        let Some(Operand::StorageClass(class)) = var.operands.first() else { continue };
        let pointee = pointee(&defs, ptr_ty).ok_or_else(|| bad(format!("variable %{id} has no pointer type")))?;
        match class {
            StorageClass::StorageBuffer | StorageClass::Uniform => {
                let buffer_block = decoration(pointee, Decoration::BufferBlock).is_some();
                if *class == StorageClass::Uniform && !buffer_block {
                    return Err(bad(format!(
                        "variable %{id} is a uniform buffer; vkml kernels take storage buffers only (HLSL: declare push constants as `[[vk::push_constant]] ConstantBuffer<T> name;`)"
                    )));
                }
                let set = decoration(id, Decoration::DescriptorSet).flatten().unwrap_or(0);
                let binding = decoration(id, Decoration::Binding)
                    .flatten()
                    .ok_or_else(|| bad(format!("storage buffer %{id} has no Binding decoration")))?;
                if set != 0 {
                    return Err(bad(format!(
                        "binding {binding} is in descriptor set {set}; vkml kernels use set 0 only"
                    )));
                }
                let members = struct_member_count(&defs, pointee);
                let all_members = |d: Decoration| {
                    members > 0
                        && (0..members).all(|k| {
                            member_decorations.get(&(pointee, k)).is_some_and(|v| v.iter().any(|(x, _)| *x == d))
                        })
                };
                let non_writable =
                    decoration(id, Decoration::NonWritable).is_some() || all_members(Decoration::NonWritable);
                let non_readable =
                    decoration(id, Decoration::NonReadable).is_some() || all_members(Decoration::NonReadable);
                let access = match (non_writable, non_readable) {
                    (true, _) => Access::Read,
                    (false, true) => Access::Write,
                    (false, false) => Access::ReadWrite,
                };
                // Declarations of one binding with different element types alias one
                // buffer (a kernel's f32 and packed-f16 views of its output): the binding's
                // access is what any of them does.
                bindings
                    .entry(binding)
                    .and_modify(|a: &mut Access| {
                        if *a != access {
                            *a = Access::ReadWrite;
                        }
                    })
                    .or_insert(access);
            }
            StorageClass::PushConstant => {
                push_constant_size = type_size(&defs, Layout::Explicit(&member_decorations, &decorations), pointee)
                    .ok_or_else(|| bad("the push-constant block has a type whose size vkml cannot compute".into()))?;
            }
            StorageClass::Workgroup => {
                shared_memory_size = shared_memory_size
                    .zip(type_size(&defs, Layout::Packed, pointee))
                    .and_then(|(total, size)| total.checked_add(size));
            }
            StorageClass::UniformConstant => {
                return Err(bad(format!(
                    "variable %{id} is an image, sampler or uniform constant; vkml kernels take storage buffers only"
                )));
            }
            _ => {}
        }
    }
    let mut out = Vec::with_capacity(bindings.len());
    for (i, (binding, access)) in bindings.into_iter().enumerate() {
        if binding as usize != i {
            return Err(bad(format!("bindings must be dense from 0; binding {i} is missing")));
        }
        out.push(BindingInfo { binding, access });
    }
    let mut spec_ids: Vec<u32> =
        decorations.values().flatten().filter(|(d, _)| *d == Decoration::SpecId).filter_map(|(_, v)| *v).collect();
    spec_ids.sort_unstable();
    spec_ids.dedup();
    let local_size = m.execution_modes.iter().find_map(|ins| match ins.operands.get(1) {
        Some(Operand::ExecutionMode(spirv::ExecutionMode::LocalSize)) => {
            let v: Vec<u32> = ins.operands[2..].iter().filter_map(|o| literal(Some(o))).collect();
            (v.len() == 3).then(|| [v[0], v[1], v[2]])
        }
        _ => None,
    });
    Ok(Interface { bindings: out, push_constant_size, spec_ids, local_size, shared_memory_size })
}

/// The module-level instructions reflection needs, sorted by section. rspirv's `dr`
/// loader rejects type declarations its `is_type` table lacks (OpTypeCooperativeMatrixKHR
/// in rspirv 0.12), so this consumer sorts by opcode instead: it reads the module-level
/// copy of [`reflectable`] (no function bodies), where every instruction after the
/// annotations is a type, constant or global variable.
#[derive(Default)]
struct FlatModule {
    annotations: Vec<Instruction>,
    execution_modes: Vec<Instruction>,
    types_global_values: Vec<Instruction>,
}

impl rspirv::binary::Consumer for FlatModule {
    fn initialize(&mut self) -> rspirv::binary::ParseAction {
        rspirv::binary::ParseAction::Continue
    }

    fn finalize(&mut self) -> rspirv::binary::ParseAction {
        rspirv::binary::ParseAction::Continue
    }

    fn consume_header(&mut self, _: rspirv::dr::ModuleHeader) -> rspirv::binary::ParseAction {
        rspirv::binary::ParseAction::Continue
    }

    fn consume_instruction(&mut self, inst: Instruction) -> rspirv::binary::ParseAction {
        match inst.class.opcode {
            Op::Decorate | Op::MemberDecorate | Op::DecorateId | Op::DecorateString | Op::MemberDecorateString => {
                self.annotations.push(inst);
            }
            Op::ExecutionMode | Op::ExecutionModeId => self.execution_modes.push(inst),
            Op::Capability
            | Op::Extension
            | Op::ExtInstImport
            | Op::MemoryModel
            | Op::EntryPoint
            | Op::String
            | Op::Source
            | Op::SourceExtension
            | Op::SourceContinued
            | Op::Name
            | Op::MemberName
            | Op::ModuleProcessed
            | Op::Line
            | Op::NoLine
            | Op::DecorationGroup
            | Op::GroupDecorate
            | Op::GroupMemberDecorate => {}
            _ => self.types_global_values.push(inst),
        }
        rspirv::binary::ParseAction::Continue
    }
}

fn literal(op: Option<&Operand>) -> Option<u32> {
    match op? {
        Operand::LiteralBit32(v) => Some(*v),
        _ => None,
    }
}

fn pointee(defs: &HashMap<u32, &Instruction>, ptr_ty: u32) -> Option<u32> {
    let ins = defs.get(&ptr_ty)?;
    if ins.class.opcode != Op::TypePointer {
        return None;
    }
    match ins.operands.get(1)? {
        Operand::IdRef(t) => Some(*t),
        _ => None,
    }
}

fn struct_member_count(defs: &HashMap<u32, &Instruction>, ty: u32) -> u32 {
    defs.get(&ty).filter(|i| i.class.opcode == Op::TypeStruct).map_or(0, |i| i.operands.len() as u32)
}

type Decorations = HashMap<u32, Vec<(Decoration, Option<u32>)>>;
type MemberDecorations = HashMap<(u32, u32), Vec<(Decoration, Option<u32>)>>;

/// How [`type_size`] lays a type out.
#[derive(Clone, Copy)]
enum Layout<'a> {
    /// By its `Offset`, `ArrayStride` and `MatrixStride` decorations (the push-constant
    /// block): a struct is as large as its furthest member (`Offset` + member size).
    Explicit(&'a MemberDecorations, &'a Decorations),
    /// Packed without padding (shared-memory variables carry no layout decorations): a
    /// lower bound of what the driver allocates.
    Packed,
}

/// Size in bytes of `ty` laid out by `layout`; `None` for an array whose length is not a
/// plain constant (a specialization constant), a missing layout decoration, or a type
/// this does not know.
fn type_size(defs: &HashMap<u32, &Instruction>, layout: Layout<'_>, ty: u32) -> Option<u32> {
    let ins = defs.get(&ty)?;
    let id_at = |k: usize| match ins.operands.get(k) {
        Some(Operand::IdRef(t)) => Some(*t),
        _ => None,
    };
    let size_of = |t: u32| type_size(defs, layout, t);
    match ins.class.opcode {
        Op::TypeInt | Op::TypeFloat => literal(ins.operands.first()).map(|bits| bits / 8),
        Op::TypeBool => Some(4),
        Op::TypeVector => literal(ins.operands.get(1))?.checked_mul(size_of(id_at(0)?)?),
        // With an explicit layout a matrix's size comes from its member's MatrixStride.
        Op::TypeMatrix if matches!(layout, Layout::Packed) => {
            literal(ins.operands.get(1))?.checked_mul(size_of(id_at(0)?)?)
        }
        Op::TypeArray => {
            let len = defs
                .get(&id_at(1)?)
                .filter(|c| c.class.opcode == Op::Constant)
                .and_then(|c| literal(c.operands.first()))?;
            let stride = match layout {
                Layout::Explicit(_, decorations) => {
                    decorations.get(&ty)?.iter().find(|(d, _)| *d == Decoration::ArrayStride)?.1?
                }
                Layout::Packed => size_of(id_at(0)?)?,
            };
            len.checked_mul(stride)
        }
        Op::TypeStruct => match layout {
            Layout::Packed => (0..ins.operands.len()).try_fold(0u32, |acc, k| acc.checked_add(size_of(id_at(k)?)?)),
            Layout::Explicit(members, _) => {
                let mut end = 0u32;
                for k in 0..ins.operands.len() {
                    let member_ty = id_at(k)?;
                    let decs = members.get(&(ty, k as u32));
                    let offset =
                        decs.and_then(|v| v.iter().find(|(d, _)| *d == Decoration::Offset)).and_then(|(_, v)| *v)?;
                    let size = match defs.get(&member_ty).map(|i| i.class.opcode) {
                        Some(Op::TypeMatrix) => {
                            let cols = literal(defs[&member_ty].operands.get(1))?;
                            let stride = decs?.iter().find(|(d, _)| *d == Decoration::MatrixStride)?.1?;
                            cols.checked_mul(stride)?
                        }
                        _ => size_of(member_ty)?,
                    };
                    end = end.max(offset.checked_add(size)?);
                }
                Some(end)
            }
        },
        _ => None,
    }
}
