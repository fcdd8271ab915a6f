//! vkml's compute shaders and shader compiler front.
//!
//! Every `shaders/*.comp` under this crate is compiled to SPIR-V at build time (see
//! `build.rs`), once per variant declared in its leading `//! variant NAME DEFINE=VALUE`
//! lines, and embedded. [`SHADERS`] lists them with their reflected interface; [`get`]
//! looks one up by name (`"affine.f32"`). [`compile`] is the glslang front that the build
//! script uses, exposed for run-time kernels (`vkml_hal::shader` wraps it).
//!
//! Kernel ABI, shared by every vkml shader: storage buffers in descriptor set 0, bindings
//! dense from 0; at most one push-constant block; tile and workgroup sizes as
//! specialization constants.

pub mod compile;

pub use compile::{Access, BindingInfo};

/// One build-time shader variant.
#[derive(Debug, Clone, Copy)]
pub struct ShaderInfo {
    /// Registry name: `<file stem>` or `<file stem>.<variant>`.
    pub name: &'static str,
    /// Source file name under `shader-src/shaders/`.
    pub file: &'static str,
    /// Preprocessor defines of this variant.
    pub defines: &'static [(&'static str, &'static str)],
    spirv: &'static [u8],
    /// Storage-buffer bindings of set 0, in binding order.
    pub bindings: &'static [BindingInfo],
    /// Size in bytes of the push-constant block (0 when none).
    pub push_constant_size: u32,
    /// Specialization-constant ids the module declares.
    pub spec_ids: &'static [u32],
    /// Literal workgroup size, when not set by specialization constants.
    pub local_size: Option<[u32; 3]>,
    /// Bytes of shared memory declared (unpadded), where no specialization constant sets it.
    pub shared_memory_size: Option<u32>,
}

impl ShaderInfo {
    /// The SPIR-V words.
    pub fn words(&self) -> &'static [u32] {
        // The bytes are embedded 4-byte aligned (`Aligned`) and their length is a
        // multiple of 4 (written from words), so this cast cannot fail.
        bytemuck::cast_slice(self.spirv)
    }

    /// The reflected interface, as [`compile::reflect`] returns it.
    pub fn interface(&self) -> compile::Interface {
        compile::Interface {
            bindings: self.bindings.to_vec(),
            push_constant_size: self.push_constant_size,
            spec_ids: self.spec_ids.to_vec(),
            local_size: self.local_size,
            shared_memory_size: self.shared_memory_size,
        }
    }
}

#[repr(C, align(4))]
struct Aligned<B: ?Sized>(B);

include!(concat!(env!("OUT_DIR"), "/registry.rs"));

/// Looks up a build-time shader variant by registry name.
pub fn get(name: &str) -> Option<&'static ShaderInfo> {
    SHADERS.binary_search_by(|s| s.name.cmp(name)).ok().map(|i| &SHADERS[i])
}

/// The text of a header under `shaders/include/`, for `#include` in run-time kernels.
pub fn header(name: &str) -> Option<&'static str> {
    HEADERS.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_sorted_and_reflected() {
        assert!(SHADERS.windows(2).all(|w| w[0].name < w[1].name));
        let affine = get("affine.f32").expect("affine.f32 is registered");
        assert_eq!(affine.bindings.len(), 2);
        assert_eq!(affine.bindings[0].access, Access::Read);
        assert_eq!(affine.bindings[1].access, Access::Write);
        assert_eq!(affine.push_constant_size, 12);
        assert_eq!(affine.spec_ids, &[0]);
        // The embedded words re-reflect to the same interface.
        assert_eq!(compile::reflect(affine.name, affine.words()).unwrap(), affine.interface());
        assert!(get("affine.f16").is_some());
        assert!(get("no-such-shader").is_none());
        assert!(header("common.glsl").is_some_and(|t| t.contains("vkml_global_index_1d")));
    }

    #[test]
    fn shared_memory_is_reflected_and_within_48_kib() {
        // mul_mat_cm.q4_0: two 128-row A and two 128-token B buffers of 5 uvec4 per row,
        // plus the 4 subgroups' 32 x 5-word scratch rows (mul_mat_cm.comp's `sm`).
        let cm = get("mul_mat_cm.q4_0").expect("mul_mat_cm.q4_0 is registered");
        assert_eq!(cm.shared_memory_size, Some(16 * (4 * 128 * 5) + 4 * (4 * 32 * 5)));
        assert_eq!(get("affine.f32").unwrap().shared_memory_size, Some(0));
        // Every kernel whose size is known fits the 48 KiB the tensor-core paths require
        // (NVIDIA's Vulkan limit); past it a pipeline is refused (vkml-hal).
        for s in SHADERS {
            assert!(
                s.shared_memory_size.is_none_or(|b| b <= 48 * 1024),
                "{}: {:?} bytes",
                s.name,
                s.shared_memory_size
            );
        }
    }

    #[test]
    fn syntax_error_names_file_and_line() {
        let req = compile::CompileRequest {
            name: "broken.comp",
            source: "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { int x = ; }\n",
            dialect: compile::Dialect::Glsl,
            entry_point: "main",
            defines: &[],
            includes: None,
            target: compile::TargetEnv::Vulkan1_2,
        };
        let err = compile::compile(&req).unwrap_err().to_string();
        assert!(err.contains("broken.comp"), "{err}");
        assert!(err.contains(":3:"), "glslang's line number is kept: {err}");
    }

    #[test]
    fn hlsl_compiles_and_reflects() {
        let src = "StructuredBuffer<float> a : register(t0);\nRWStructuredBuffer<float> b : register(u1);\n[numthreads(32, 1, 1)]\nvoid run(uint3 id : SV_DispatchThreadID) { b[id.x] = a[id.x] * 2.0; }\n";
        let req = compile::CompileRequest {
            name: "double.hlsl",
            source: src,
            dialect: compile::Dialect::Hlsl,
            entry_point: "run",
            defines: &[],
            includes: None,
            target: compile::TargetEnv::Vulkan1_2,
        };
        let words = compile::compile(&req).unwrap();
        let iface = compile::reflect("double.hlsl", &words).unwrap();
        assert_eq!(iface.local_size, Some([32, 1, 1]));
        assert_eq!(iface.bindings.len(), 2);
        assert_eq!(iface.bindings[0].access, Access::Read);
        assert_eq!(iface.bindings[1].access, Access::ReadWrite);
    }

    #[test]
    fn reflect_rejects_garbage() {
        assert!(compile::reflect("x", &[1, 2, 3]).is_err());
        assert!(compile::reflect("x", &[]).is_err());
    }
}
