//! Kernels (SPIR-V plus reflected interface) and compute pipelines (kernel +
//! specialization constants + required subgroup size), created through the device's
//! persisted `VkPipelineCache` and cached per device.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use ash::vk;
use vkml_shaders::compile::{self, Interface};

use crate::device::{Device, DeviceInner};
use crate::error::{Error, Result};

/// A compute kernel: SPIR-V words and their reflected interface (storage buffers of set
/// 0, push-constant size, specialization ids). Cheap to clone.
#[derive(Clone)]
pub struct Kernel {
    inner: Arc<KernelInner>,
}

struct KernelInner {
    name: String,
    words: Cow<'static, [u32]>,
    interface: Interface,
    hash: u64,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel").field("name", &self.inner.name).field("interface", &self.inner.interface).finish()
    }
}

fn hash_words(name: &str, words: &[u32]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    words.hash(&mut h);
    h.finish()
}

impl Kernel {
    /// A kernel from SPIR-V words, reflecting its interface.
    ///
    /// # Errors
    /// [`Error::Shader`] when the words are not SPIR-V or break vkml's kernel ABI
    /// (storage buffers in set 0, dense bindings, one push-constant block).
    pub fn from_spirv(name: &str, words: Vec<u32>) -> Result<Kernel> {
        let interface = compile::reflect(name, &words)?;
        Ok(Kernel {
            inner: Arc::new(KernelInner {
                hash: hash_words(name, &words),
                name: name.to_string(),
                words: Cow::Owned(words),
                interface,
            }),
        })
    }

    /// A build-time shader of `vkml_shaders` by registry name (e.g. `"affine.f32"`).
    ///
    /// # Errors
    /// [`Error::UnknownKernel`] when there is no such shader.
    pub fn builtin(name: &str) -> Result<Kernel> {
        let info = vkml_shaders::get(name).ok_or_else(|| Error::UnknownKernel(name.to_string()))?;
        let words = info.words();
        Ok(Kernel {
            inner: Arc::new(KernelInner {
                hash: hash_words(info.name, words),
                name: info.name.to_string(),
                words: Cow::Borrowed(words),
                interface: info.interface(),
            }),
        })
    }

    /// Name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Reflected interface.
    pub fn interface(&self) -> &Interface {
        &self.inner.interface
    }

    /// SPIR-V words.
    pub fn words(&self) -> &[u32] {
        &self.inner.words
    }
}

/// How to build a pipeline from a kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PipelineOptions {
    /// Specialization constants as `(SpecId, 32-bit value)`; floats as `f32::to_bits`,
    /// booleans as 0/1. Every id must be declared by the kernel.
    pub spec_constants: Vec<(u32, u32)>,
    /// Require this subgroup size (`VK_EXT_subgroup_size_control`); it must lie in
    /// `[caps.subgroup.min_size, caps.subgroup.max_size]`.
    pub required_subgroup_size: Option<u32>,
    /// Require full subgroups (`computeFullSubgroups`).
    pub full_subgroups: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct PipelineKey {
    kernel: u64,
    options: PipelineOptions,
}

/// ` {id=value ..}` of the non-zero constants of `spec` other than 0, in id order; empty
/// where there are none.
fn spec_label(spec: &[(u32, u32)]) -> String {
    let mut v: Vec<_> = spec.iter().filter(|&&(id, value)| id != 0 && value != 0).collect();
    v.sort();
    if v.is_empty() {
        return String::new();
    }
    let items: Vec<String> = v.iter().map(|(id, value)| format!("{id}={value}")).collect();
    format!(" {{{}}}", items.join(" "))
}

/// A compute pipeline. Lives as long as its device (destroyed at device teardown).
#[derive(Debug)]
pub struct Pipeline {
    pub(crate) raw: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    pub(crate) push_descriptors: bool,
    pub(crate) kernel: Kernel,
    pub(crate) device_id: usize,
    /// The non-zero specialization constants other than 0 (the workgroup size), as
    /// ` {id=value ..}` (empty without any): the profile's labels tell the pipelines of one
    /// kernel apart by it.
    pub(crate) spec_label: String,
}

impl Pipeline {
    /// The kernel this pipeline runs.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    pub(crate) fn create(dev: &Arc<DeviceInner>, kernel: &Kernel, key: &PipelineKey) -> Result<Pipeline> {
        let caps = &dev.caps;
        let iface = kernel.interface();
        let bad = |reason: String| Error::InvalidDispatch { kernel: kernel.name().to_string(), reason };
        for (id, _) in &key.options.spec_constants {
            if !iface.spec_ids.contains(id) {
                return Err(bad(format!("has no specialization constant {id} (declared: {:?})", iface.spec_ids)));
            }
        }
        if iface.bindings.len() as u32 > caps.limits.max_storage_buffers_per_stage {
            return Err(bad(format!(
                "uses {} storage buffers; the device allows {} per stage",
                iface.bindings.len(),
                caps.limits.max_storage_buffers_per_stage
            )));
        }
        if iface.push_constant_size > caps.limits.max_push_constants_size {
            return Err(bad(format!(
                "has a {}-byte push-constant block; the device allows {}",
                iface.push_constant_size, caps.limits.max_push_constants_size
            )));
        }
        // Past the limit a driver may build the pipeline anyway and the kernel fault on the
        // GPU (NVIDIA: Xid 13), so refuse it here.
        if let Some(bytes) = iface.shared_memory_size {
            if bytes > caps.limits.max_shared_memory {
                return Err(bad(format!(
                    "declares {bytes} bytes of shared memory; the device allows {}",
                    caps.limits.max_shared_memory
                )));
            }
        }
        if let Some([x, y, z]) = iface.local_size {
            let l = &caps.limits;
            if x > l.max_workgroup_size[0]
                || y > l.max_workgroup_size[1]
                || z > l.max_workgroup_size[2]
                || u64::from(x) * u64::from(y) * u64::from(z) > u64::from(l.max_workgroup_invocations)
            {
                return Err(bad(format!(
                    "workgroup size {x}x{y}x{z} exceeds the device's {:?} / {} invocations",
                    l.max_workgroup_size, l.max_workgroup_invocations
                )));
            }
        }
        if let Some(s) = key.options.required_subgroup_size {
            if !caps.subgroup.size_control {
                return Err(Error::MissingFeature {
                    feature: "subgroupSizeControl for compute shaders".into(),
                    needed_by: format!("kernel `{}` with required subgroup size {s}", kernel.name()),
                    device: caps.name.clone(),
                });
            }
            if s < caps.subgroup.min_size || s > caps.subgroup.max_size || !s.is_power_of_two() {
                return Err(bad(format!(
                    "required subgroup size {s} is outside the device's range {}..={}",
                    caps.subgroup.min_size, caps.subgroup.max_size
                )));
            }
        }
        if key.options.full_subgroups && !caps.subgroup.full_subgroups {
            return Err(Error::MissingFeature {
                feature: "computeFullSubgroups".into(),
                needed_by: format!("kernel `{}`", kernel.name()),
                device: caps.name.clone(),
            });
        }

        let push_descriptors =
            dev.push_descriptor.is_some() && iface.bindings.len() as u32 <= caps.limits.max_push_descriptors;
        let bindings: Vec<vk::DescriptorSetLayoutBinding<'_>> = iface
            .bindings
            .iter()
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b.binding)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let set_info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings).flags(if push_descriptors {
            vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR
        } else {
            vk::DescriptorSetLayoutCreateFlags::empty()
        });
        let raw = &dev.raw;
        // SAFETY (for the creation calls below): the device is live; the create infos
        // reference locals that outlive the calls; the SPIR-V was reflected (a valid
        // module) and uses only storage buffers of set 0, matching the layout built here;
        // objects created before a failure are destroyed on that path.
        // SAFETY: see above.
        let set_layout = unsafe { raw.create_descriptor_set_layout(&set_info, None) }
            .map_err(Error::vk("vkCreateDescriptorSetLayout"))?;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(iface.push_constant_size)];
        let set_layouts = [set_layout];
        let mut layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts);
        if iface.push_constant_size > 0 {
            layout_info = layout_info.push_constant_ranges(&ranges);
        }
        // SAFETY: see above.
        let layout = match unsafe { raw.create_pipeline_layout(&layout_info, None) } {
            Ok(l) => l,
            Err(e) => {
                // SAFETY: created above and not used by anything yet.
                unsafe { raw.destroy_descriptor_set_layout(set_layout, None) };
                return Err(Error::vk("vkCreatePipelineLayout")(e));
            }
        };
        // SAFETY: the objects were created above and nothing uses them yet.
        let cleanup = |module: Option<vk::ShaderModule>| unsafe {
            if let Some(m) = module {
                raw.destroy_shader_module(m, None);
            }
            raw.destroy_pipeline_layout(layout, None);
            raw.destroy_descriptor_set_layout(set_layout, None);
        };
        // SAFETY: see above; the words are a reflected (parsed) SPIR-V module.
        let module = match unsafe {
            raw.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(kernel.words()), None)
        } {
            Ok(m) => m,
            Err(e) => {
                cleanup(None);
                return Err(Error::vk("vkCreateShaderModule")(e));
            }
        };
        let entries: Vec<vk::SpecializationMapEntry> = key
            .options
            .spec_constants
            .iter()
            .enumerate()
            .map(|(i, (id, _))| vk::SpecializationMapEntry { constant_id: *id, offset: (i * 4) as u32, size: 4 })
            .collect();
        let data: Vec<u8> = key.options.spec_constants.iter().flat_map(|(_, v)| v.to_ne_bytes()).collect();
        let spec = vk::SpecializationInfo::default().map_entries(&entries).data(&data);
        let mut sg = vk::PipelineShaderStageRequiredSubgroupSizeCreateInfo::default()
            .required_subgroup_size(key.options.required_subgroup_size.unwrap_or(0));
        let mut stage_flags = vk::PipelineShaderStageCreateFlags::empty();
        if key.options.full_subgroups {
            stage_flags |= vk::PipelineShaderStageCreateFlags::REQUIRE_FULL_SUBGROUPS;
        }
        let mut stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main")
            .flags(stage_flags)
            .specialization_info(&spec);
        if key.options.required_subgroup_size.is_some() {
            stage = stage.push_next(&mut sg);
        }
        let mut info = vk::ComputePipelineCreateInfo::default().stage(stage).layout(layout);
        if dev.pipeline_exec.is_some() {
            info = info.flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR);
        }
        // SAFETY: see above; the cache is the device's, used under the driver's own
        // internal synchronisation (pipeline caches are externally synchronised only
        // for merge and destroy).
        let result = unsafe { raw.create_compute_pipelines(dev.pipeline_cache, &[info], None) };
        // SAFETY: pipeline creation has returned; the module is not needed any more.
        unsafe { raw.destroy_shader_module(module, None) };
        let pipeline = match result {
            Ok(p) => p[0],
            Err((_, e)) => {
                cleanup(None);
                return Err(Error::vk("vkCreateComputePipelines")(e));
            }
        };
        Ok(Pipeline {
            raw: pipeline,
            layout,
            set_layout,
            push_descriptors,
            kernel: kernel.clone(),
            device_id: Arc::as_ptr(dev) as usize,
            spec_label: spec_label(&key.options.spec_constants),
        })
    }

    /// Destroys the Vulkan objects.
    ///
    /// # Safety
    /// The device is idle and no command buffer that uses this pipeline will run again.
    pub(crate) unsafe fn destroy(&self, raw: &ash::Device) {
        // SAFETY: per the function's contract.
        unsafe {
            raw.destroy_pipeline(self.raw, None);
            raw.destroy_pipeline_layout(self.layout, None);
            raw.destroy_descriptor_set_layout(self.set_layout, None);
        }
    }
}

impl Device {
    /// The pipeline for `kernel` with `options`, created on first use (through the
    /// persisted pipeline cache) and cached for the device's lifetime.
    ///
    /// # Errors
    /// [`Error::InvalidDispatch`] for an undeclared specialization id, a subgroup size
    /// outside the device's range, or a kernel that exceeds device limits;
    /// [`Error::MissingFeature`] when the options need subgroup size control the device
    /// lacks; [`Error::Vulkan`] when the driver rejects the pipeline.
    pub fn pipeline(&self, kernel: &Kernel, options: &PipelineOptions) -> Result<Arc<Pipeline>> {
        self.get_pipeline(kernel, PipelineKey { kernel: kernel.inner.hash, options: options.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::spec_label;

    #[test]
    fn spec_label_lists_the_non_zero_constants_but_the_workgroup() {
        assert_eq!(spec_label(&[(0, 256), (25, 8), (2, 1), (11, 0), (10, 1)]), " {2=1 10=1 25=8}");
        assert_eq!(spec_label(&[(0, 128), (11, 0)]), "");
        assert_eq!(spec_label(&[]), "");
    }
}
