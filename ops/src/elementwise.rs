//! Strided element-wise ops, as a candle `BackendStorage` needs them: unary maps
//! ([`unary`], [`affine`], [`powf`], [`elu`]), binary maps with broadcasting ([`binary`])
//! comparisons ([`cmp`]), selection ([`where_cond`]) and strided copies with dtype
//! conversion ([`copy`]), on buffers of any [`Dtype`] (per-op limits in each op's docs).
//! Kernels: `shader-src/shaders/{unary,binary,cmp,where_cond,strided_copy}.comp`.
//!
//! Every input is a [`View`]: a buffer, an element offset and one stride (in elements) per
//! dim of the op's shape, which is what candle's `Layout` holds (`start_offset`,
//! `stride`, `dims`). A stride of 0 broadcasts. Outputs of the maps are contiguous
//! (row-major over the shape) from element 0 of `y`.
//!
//! Before dispatch the index space is simplified: size-1 dims are dropped, and adjacent
//! dims `i`, `i + 1` are merged where every operand has `stride[i] == stride[i + 1] *
//! shape[i + 1]` (a contiguous output always has). A contiguous op becomes rank 1. After
//! merging, up to [`MAX_RANK`] dims are supported. Shape, strides and offsets travel as
//! push constants (at most 88 bytes: within the 128 bytes every Vulkan device has);
//! buffers are bound from byte 0, so views need no descriptor offset alignment.
//!
//! Float arithmetic is f32 for F32, F16 and BF16, f64 for F64. F16 and BF16 values are
//! widened exactly on load and rounded to nearest even on store, in integer arithmetic on
//! the bits (the same bits as the `half` crate, whatever the device's conversion modes).
//! Integers compute in their own width and wrap (U8 modulo 2^8, as Rust's release-mode
//! arithmetic); an integer division by zero gives 0 (candle's CPU backend panics). Formulas
//! follow candle-core 0.11 (`src/op.rs`, `cpu_backend`); for f16 and bf16 that is candle's
//! f32 result on the widened inputs, rounded once, where candle's own half-precision path
//! rounds some intermediates (affine's product, for one). The
//! transcendental functions are the device's (GLSL `exp`, `log`, `sin`, `cos`, `tanh`,
//! `exp2`/`log2` for powf), so they differ from candle's libm by a few ulp (the Vulkan
//! specification bounds them; `ops/tests/elementwise.rs` lists the tolerances tested);
//! erf is a rational approximation (1.2e-7 absolute in exact arithmetic, about 3e-7 as
//! evaluated in f32).
//!
//! Errors, never panics or out-of-bounds accesses, for: a stride count that differs from
//! the rank, more than `u32::MAX` elements or an addressed element index past `u32::MAX`,
//! a view that reaches past its buffer's end, an output too small, a rank above
//! [`MAX_RANK`] after merging, an output that overlaps an input other than in place
//! (identical contiguous layout), a copy destination that writes an element twice, an
//! (op, dtype) pair without a kernel, and a dtype the device cannot store
//! ([`Dtype`]'s features). Zero elements record nothing.

use vkml_hal::{Buffer, BufferArg, Stream};

use crate::dtype::Dtype;
use crate::error::{OpsError, Result};
use crate::launch::{grid, pipeline_spec, push_words, word_end};
use crate::tuning::ELEMENTWISE_WORKGROUP;

/// The most dims an element-wise op supports after size-1 dims are dropped and
/// mergeable dims merged (see the module docs); more gives [`OpsError::Shape`].
pub const MAX_RANK: usize = 6;

/// A strided view of a buffer: element `idx` (multi-index over the op's shape) is at
/// element `offset + sum(idx[i] * strides[i])`. A stride of 0 broadcasts.
///
/// Units are elements of the op's dtype (candle's `Layout::start_offset` and
/// `Layout::stride`); `strides` has one entry per dim of the op's shape.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    /// The buffer.
    pub buffer: &'a Buffer,
    /// Element index of the view's first element (multi-index all zeros).
    pub offset: usize,
    /// Per-dim strides in elements, one per dim of the op's shape; 0 broadcasts.
    pub strides: &'a [usize],
}

/// The bytes `v` (of `dt`, over `shape`, one stride per dim, at least one element)
/// addresses: `(offset byte, end byte)`, the end one past its last element.
///
/// # Errors
/// [`OpsError::Shape`] (naming `op` and `what`) for a stride count that is not the rank,
/// an element past index 2^32 - 1 (the kernels index in u32), or past the buffer's end.
pub(crate) fn view_span(op: &'static str, what: &str, shape: &[usize], v: &View<'_>, dt: Dtype) -> Result<(u64, u64)> {
    let bad = |reason: String| OpsError::Shape { op, reason };
    if v.strides.len() != shape.len() {
        return Err(bad(format!("{what} has {} strides for the {}-dim shape {shape:?}", v.strides.len(), shape.len())));
    }
    let last = shape
        .iter()
        .zip(v.strides)
        .try_fold(v.offset, |acc, (&d, &st)| d.saturating_sub(1).checked_mul(st).and_then(|x| acc.checked_add(x)));
    let last = last
        .filter(|&l| u32::try_from(l).is_ok())
        .ok_or_else(|| bad(format!("{what} addresses elements past index 2^32 - 1")))?;
    let elems = v.buffer.size() / dt.size() as u64;
    if last as u64 >= elems {
        return Err(bad(format!(
            "{what} (offset {}, strides {:?} over shape {shape:?}) reaches element {last}, past the end of its buffer \
             of {elems} {} elements",
            v.offset,
            v.strides,
            dt.name()
        )));
    }
    let size = dt.size() as u64;
    Ok((v.offset as u64 * size, (last as u64 + 1) * size))
}

/// Row-major contiguous strides of `shape` in elements (the last dim has stride 1), as
/// for a contiguous candle tensor.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].saturating_mul(shape[i + 1]);
    }
    strides
}

/// candle's `UnaryOpT` ops, same formulas as candle-core's src/op.rs (gelu = tanh
/// approximation, gelu_erf, erf, silu = x/(1+exp(-x)), relu, sign, round = round half
/// away from zero as f32::round, etc.), computed in f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `exp(x)`.
    Exp,
    /// `ln(x)`: -inf at 0, NaN below.
    Log,
    /// `sin(x)`.
    Sin,
    /// `cos(x)`.
    Cos,
    /// `|x|`.
    Abs,
    /// `-x`.
    Neg,
    /// `1 / x`.
    Recip,
    /// `x * x`.
    Sqr,
    /// `sqrt(x)`: NaN below 0.
    Sqrt,
    /// GELU, tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x²)))`.
    Gelu,
    /// GELU with erf: `0.5 x (1 + erf(x / sqrt(2)))` (erf as [`UnaryOp::Erf`]).
    GeluErf,
    /// `erf(x)`, a rational approximation to about 3e-7 absolute (evaluated in f32).
    Erf,
    /// `max(x, 0)` (NaN gives 0, as `f32::max`).
    Relu,
    /// `x / (1 + exp(-x))`.
    Silu,
    /// `tanh(x)`.
    Tanh,
    /// `floor(x)`.
    Floor,
    /// `ceil(x)`.
    Ceil,
    /// `f32::round`: to the nearest integer, half-way cases away from zero.
    Round,
    /// `(x > 0) - (x < 0)`: -1, 0 or 1 (0 for ±0 and NaN).
    Sign,
}

impl UnaryOp {
    /// Every unary op.
    pub const ALL: [UnaryOp; 19] = [
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Abs,
        UnaryOp::Neg,
        UnaryOp::Recip,
        UnaryOp::Sqr,
        UnaryOp::Sqrt,
        UnaryOp::Gelu,
        UnaryOp::GeluErf,
        UnaryOp::Erf,
        UnaryOp::Relu,
        UnaryOp::Silu,
        UnaryOp::Tanh,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Sign,
    ];

    /// candle's name of the op (`UnaryOpT::NAME`: `exp`, `gelu_erf`, ...).
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Abs => "abs",
            UnaryOp::Neg => "neg",
            UnaryOp::Recip => "recip",
            UnaryOp::Sqr => "sqr",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluErf => "gelu_erf",
            UnaryOp::Erf => "erf",
            UnaryOp::Relu => "relu",
            UnaryOp::Silu => "silu",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
            UnaryOp::Sign => "sign",
        }
    }
}

/// Whether unary.comp has `kind` for `dt`: every op for f32, f16 and bf16; for f64 the ops
/// with exact double forms; for integers candle's integer forms.
fn unary_supported(kind: UnaryKind, dt: Dtype) -> Result<()> {
    use UnaryOp::*;
    let (ok, supported) = match dt {
        Dtype::F64 if matches!(kind, UnaryKind::Softcap | UnaryKind::Sigmoid) => (false, "f32, f16, bf16"),
        Dtype::F32 | Dtype::F16 | Dtype::BF16 | Dtype::F64 => (true, ""),
        Dtype::U8 | Dtype::U32 | Dtype::I64 => (
            matches!(kind, UnaryKind::Affine)
                || matches!(kind, UnaryKind::Op(Abs | Relu | Floor | Ceil | Round | Sign | Gelu | GeluErf | Erf | Silu)),
            "float dtypes (integers have abs, relu, floor, ceil, round, sign, affine, and gelu, gelu_erf, erf, silu as 0)",
        ),
    };
    if ok {
        Ok(())
    } else {
        Err(OpsError::UnsupportedDtype { op: kind.name(), dtype: dt.name(), supported })
    }
}

/// The kernel's op code (`OP_*` in unary.comp): the candle unary ops in declaration order,
/// then affine, powf, elu, softcap.
#[derive(Clone, Copy)]
enum UnaryKind {
    Op(UnaryOp),
    Affine,
    Powf,
    Elu,
    Softcap,
    Sigmoid,
}

impl UnaryKind {
    fn code(self) -> u32 {
        match self {
            UnaryKind::Op(op) => op as u32,
            UnaryKind::Affine => 19,
            UnaryKind::Powf => 20,
            UnaryKind::Elu => 21,
            UnaryKind::Softcap => 22,
            UnaryKind::Sigmoid => 23,
        }
    }

    fn name(self) -> &'static str {
        match self {
            UnaryKind::Op(op) => op.name(),
            UnaryKind::Affine => "affine",
            UnaryKind::Powf => "powf",
            UnaryKind::Elu => "elu",
            UnaryKind::Softcap => "softcap",
            UnaryKind::Sigmoid => "sigmoid",
        }
    }
}

/// candle's `BinaryOpT` ops, computed in f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `if a < b { b } else { a }` (candle's formula: a NaN in `a` is kept, one in `b` is not).
    Maximum,
    /// `if a > b { b } else { a }`.
    Minimum,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 6] =
        [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum, BinaryOp::Minimum];

    /// candle's name of the op (`BinaryOpT::NAME`: `add`, `maximum`, ...).
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
        }
    }

    /// The kernel's op code (binary.comp).
    fn code(self) -> u32 {
        self as u32
    }
}

/// `y[contiguous, row-major over shape] = op(x[view])`
///
/// Records `y[i] = op(x[view(idx(i))])` for every multi-index of `shape` (candle's
/// `BackendStorage::unary_impl` of the [`UnaryOp`]), `idx(i)` row-major. `x` and `y` are
/// `dt`; `y` holds at least `numel(shape)` elements and receives them from element 0. An
/// empty `shape` is a scalar (1 element). `y` may be `x`'s buffer only in place (`x`
/// contiguous from element 0) or with no overlap.
///
/// # Errors
/// [`OpsError::Shape`] (naming the op) for `x.strides.len() != shape.len()`, more than
/// `u32::MAX` elements or an element index past `u32::MAX`, `x` reaching past its buffer,
/// `y` too small, a rank above [`MAX_RANK`] after merging dims, or an overlap of `y` and
/// `x` other than in place; [`OpsError::MissingFeature`] for [`Dtype::F16`] without
/// 16-bit storage; HAL errors (e.g. a binding over `maxStorageBufferRange`).
pub fn unary(s: &mut Stream, op: UnaryOp, dt: Dtype, shape: &[usize], x: View<'_>, y: &Buffer) -> Result<()> {
    map(s, UnaryKind::Op(op), [0.0, 0.0], dt, shape, x, y)
}

/// candle's `CmpOp`: the comparisons [`cmp`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `a == b`.
    Eq,
    /// `a != b` (true when either is NaN).
    Ne,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
}

impl CmpOp {
    /// Every comparison.
    pub const ALL: [CmpOp; 6] = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];

    /// The kernel's op code (cmp.comp).
    fn code(self) -> u32 {
        self as u32
    }
}

/// `y = (a op b) as u8` over `shape`, `a` and `b` views over the same shape
///
/// Records `y[i] = 1` where `a[view(idx(i))] op b[view(idx(i))]` holds, else `0` (candle's
/// `BackendStorage::cmp`, whose output is U8), with Rust's comparison semantics: a NaN
/// compares unequal to everything. `a`, `b` are `dt` (any [`Dtype`]); `y` is U8, packed
/// from element 0, and must not overlap `a` or `b`.
///
/// # Errors
/// As [`binary`]; also when the device lacks `storageBuffer8BitAccess` (for `y`).
pub fn cmp(s: &mut Stream, op: CmpOp, dt: Dtype, shape: &[usize], a: View<'_>, b: View<'_>, y: &Buffer) -> Result<()> {
    const OP: &str = "cmp";
    let dev = s.device().clone();
    dt.require(&dev, OP)?;
    Dtype::U8.require(&dev, OP)?;
    let Some(plan) = Plan::new(OP, shape, &[("a", a, dt), ("b", b, dt)])? else { return Ok(()) };
    check_output(OP, &plan, Dtype::U8, y, &[])?;
    check_disjoint(OP, &plan, y, Dtype::U8, &[a, b])?;
    let [ao, bo] = plan.operands();
    let mut words = vec![plan.n, plan.rank, ao.offset, bo.offset];
    words.extend(plan.shape);
    words.extend(ao.strides);
    words.extend(bo.strides);
    let p = pipeline_spec(&dev, crate::dtype::dtype_kernel!("cmp.", dt), ELEMENTWISE_WORKGROUP, &[(1, op.code())])?;
    let args = [plan.binding(0), plan.binding(1), BufferArg::range(y, 0, u64::from(plan.n))];
    s.dispatch(&p, &args, &push_words(&words), plan.groups(s, OP)?)?;
    Ok(())
}

/// `y = cond != 0 ? t : f` over `shape` (candle's `where_cond`)
///
/// Records `y[i] = t[view(idx(i))]` where `cond[view(idx(i))]` is non-zero, else
/// `f[view(idx(i))]`, copying the bits. `cond` is `cond_dt` (U8, U32 or I64; read as
/// 32-bit words, so its buffer's size must be a multiple of 4 bytes); `t`, `f` and `y`
/// are `dt` (any [`Dtype`]); `y` is packed from element 0 and must not overlap an input.
///
/// # Errors
/// As [`binary`]; [`OpsError::UnsupportedDtype`] for a float `cond_dt`;
/// [`OpsError::Shape`] when the condition's words reach past its buffer.
#[allow(clippy::too_many_arguments)]
pub fn where_cond(
    s: &mut Stream,
    shape: &[usize],
    cond_dt: Dtype,
    cond: View<'_>,
    dt: Dtype,
    t: View<'_>,
    f: View<'_>,
    y: &Buffer,
) -> Result<()> {
    const OP: &str = "where_cond";
    let dev = s.device().clone();
    dt.require(&dev, OP)?;
    let cond_code = match cond_dt {
        Dtype::U8 => 0,
        Dtype::U32 => 1,
        Dtype::I64 => 2,
        other => {
            return Err(OpsError::UnsupportedDtype {
                op: OP,
                dtype: other.name(),
                supported: "u8, u32, i64 conditions",
            })
        }
    };
    let Some(plan) = Plan::new(OP, shape, &[("cond", cond, cond_dt), ("t", t, dt), ("f", f, dt)])? else {
        return Ok(());
    };
    check_output(OP, &plan, dt, y, &[])?;
    check_disjoint(OP, &plan, y, dt, &[cond, t, f])?;
    let [co, to, fo] = plan.operands();
    let mut words = vec![plan.n, plan.rank, co.offset, to.offset, fo.offset];
    words.extend(plan.shape);
    words.extend(co.strides);
    words.extend(to.strides);
    words.extend(fo.strides);
    let p =
        pipeline_spec(&dev, crate::dtype::dtype_kernel!("where_cond.", dt), ELEMENTWISE_WORKGROUP, &[(2, cond_code)])?;
    let args = [
        plan.word_binding(OP, 0)?,
        plan.binding(1),
        plan.binding(2),
        BufferArg::range(y, 0, u64::from(plan.n) * dt.size() as u64),
    ];
    s.dispatch(&p, &args, &push_words(&words), plan.groups(s, OP)?)?;
    Ok(())
}

/// `y = x * mul + add` (candle's affine)
///
/// Records `y = x * mul + add` element-wise, rounded after the multiply and after the add
/// (no fused multiply-add), as candle's `Tensor::affine` computes: in f32 for F32, F16 and
/// BF16 (`mul` and `add` cast to f32), in f64 for F64, and for integers with `mul` and
/// `add` cast to the type as candle's `T::from_f64` does (`as`, saturating) and wrapping
/// arithmetic. Shapes, layout and errors as [`unary`]; every [`Dtype`].
///
/// # Errors
/// As [`unary`].
pub fn affine(s: &mut Stream, dt: Dtype, shape: &[usize], x: View<'_>, mul: f64, add: f64, y: &Buffer) -> Result<()> {
    let pw = match dt {
        Dtype::F64 => [mul.to_bits(), add.to_bits()],
        Dtype::U8 => [u64::from(mul as u8), u64::from(add as u8)],
        Dtype::U32 => [u64::from(mul as u32), u64::from(add as u32)],
        Dtype::I64 => [(mul as i64) as u64, (add as i64) as u64],
        _ => [0, 0],
    };
    map_with(s, UnaryKind::Affine, [mul as f32, add as f32], pw, dt, shape, x, y)
}

/// Records `y = x.powf(e)` element-wise, as candle's `Tensor::powf`: `e` rounded to the
/// dtype first (`T::from_f64`), then IEEE `pow` with its special cases (`x^0 = 1`, `1^e =
/// 1`, NaN for a negative base and a non-integer `e`, the sign of a negative base to an
/// odd integer power, zeros and infinities) around `exp2(e * log2(|x|))` in f32 (`x` and
/// `x * x`, exact, for `e` = 1 and 2), or `exp(e * log(|x|))` in f64 for F64. Shapes,
/// dtypes, layout and errors as [`unary`].
///
/// # Errors
/// As [`unary`].
pub fn powf(s: &mut Stream, dt: Dtype, shape: &[usize], x: View<'_>, e: f64, y: &Buffer) -> Result<()> {
    map_with(s, UnaryKind::Powf, [param_in(dt, e), 0.0], [e.to_bits(), 0], dt, shape, x, y)
}

/// Records candle's `Tensor::elu(alpha)` element-wise: `x` where the sign bit of `x` is
/// clear, else `(exp(x) - 1) * alpha`, `alpha` rounded to the dtype first. Shapes, dtypes,
/// layout and errors as [`unary`].
///
/// # Errors
/// As [`unary`].
pub fn elu(s: &mut Stream, dt: Dtype, shape: &[usize], x: View<'_>, alpha: f64, y: &Buffer) -> Result<()> {
    map_with(s, UnaryKind::Elu, [param_in(dt, alpha), 0.0], [alpha.to_bits(), 0], dt, shape, x, y)
}

/// Records `y = cap * tanh(x / cap)` element-wise (Gemma 2's final logit soft-capping) in
/// one pass: for f32 the values of `affine(1 / cap, 0)`, `tanh` and `affine(cap, 0)` one
/// after another (the same roundings, the tanh of [`UnaryOp::Tanh`]), up to the sign of
/// zeros; f16 and bf16 keep the two intermediates in f32. Shapes, layout and errors as
/// [`unary`].
///
/// # Errors
/// As [`unary`]; [`OpsError::UnsupportedDtype`] for other dtypes.
pub fn softcap(s: &mut Stream, dt: Dtype, shape: &[usize], x: View<'_>, cap: f32, y: &Buffer) -> Result<()> {
    let inv = (1.0 / f64::from(cap)) as f32;
    map_with(s, UnaryKind::Softcap, [inv, cap], [0, 0], dt, shape, x, y)
}

/// Records `y = 1 / (1 + exp(-x))` element-wise (candle-nn's `ops::sigmoid`), computed in
/// f32 for f32, f16 and bf16. Shapes, layout and errors as [`unary`].
///
/// # Errors
/// As [`unary`]; [`OpsError::UnsupportedDtype`] for other dtypes.
pub fn sigmoid(s: &mut Stream, dt: Dtype, shape: &[usize], x: View<'_>, y: &Buffer) -> Result<()> {
    map(s, UnaryKind::Sigmoid, [0.0, 0.0], dt, shape, x, y)
}

/// A parameter as candle passes it to an f32 / f16 / bf16 map (`T::from_f64`), as f32.
fn param_in(dt: Dtype, v: f64) -> f32 {
    dt.round_f64(v) as f32
}

fn map(
    s: &mut Stream,
    kind: UnaryKind,
    params: [f32; 2],
    dt: Dtype,
    shape: &[usize],
    x: View<'_>,
    y: &Buffer,
) -> Result<()> {
    map_with(s, kind, params, [0, 0], dt, shape, x, y)
}

/// [`map`] with affine's 64-bit parameters `pw` (f64 bits, or the integers) for the f64
/// and integer kernels.
#[allow(clippy::too_many_arguments)]
fn map_with(
    s: &mut Stream,
    kind: UnaryKind,
    params: [f32; 2],
    pw: [u64; 2],
    dt: Dtype,
    shape: &[usize],
    x: View<'_>,
    y: &Buffer,
) -> Result<()> {
    let op = kind.name();
    let dev = s.device().clone();
    dt.require(&dev, op)?;
    unary_supported(kind, dt)?;
    let Some(plan) = Plan::new(op, shape, &[("x", x, dt)])? else { return Ok(()) };
    check_output(op, &plan, dt, y, &[x])?;
    let [xo] = plan.operands();
    let mut words = vec![plan.n, plan.rank, xo.offset, params[0].to_bits(), params[1].to_bits()];
    words.extend(plan.shape);
    words.extend(xo.strides);
    words.extend(pw.iter().flat_map(|&w| [w as u32, (w >> 32) as u32]));
    let p = pipeline_spec(&dev, crate::dtype::dtype_kernel!("unary.", dt), ELEMENTWISE_WORKGROUP, &[(1, kind.code())])?;
    let args = [plan.binding(0), BufferArg::range(y, 0, u64::from(plan.n) * dt.size() as u64)];
    s.dispatch(&p, &args, &push_words(&words), plan.groups(s, op)?)?;
    Ok(())
}

/// `y = op(a, b)` over `shape`; `a` and `b` are views over the same shape (broadcast = stride 0)
///
/// Records `y[i] = op(a[view(idx(i))], b[view(idx(i))])` for every multi-index of `shape`
/// (candle's `BackendStorage::binary_impl`, whose two layouts are already broadcast to the
/// output shape: a broadcast dim has stride 0). `a`, `b`, `y` are `dt` (any [`Dtype`];
/// integers wrap, and divide by zero to 0); `y` holds at
/// least `numel(shape)` elements, contiguous from element 0; it may share a buffer with an
/// input only in place (that input contiguous from element 0) or with no overlap. `a` and
/// `b` may be the same buffer.
///
/// # Errors
/// As [`unary`], for each of `a` and `b`.
pub fn binary(
    s: &mut Stream,
    op: BinaryOp,
    dt: Dtype,
    shape: &[usize],
    a: View<'_>,
    b: View<'_>,
    y: &Buffer,
) -> Result<()> {
    let name = op.name();
    let dev = s.device().clone();
    dt.require(&dev, name)?;
    let Some(plan) = Plan::new(name, shape, &[("a", a, dt), ("b", b, dt)])? else { return Ok(()) };
    check_output(name, &plan, dt, y, &[a, b])?;
    let [ao, bo] = plan.operands();
    let mut words = vec![plan.n, plan.rank, ao.offset, bo.offset];
    words.extend(plan.shape);
    words.extend(ao.strides);
    words.extend(bo.strides);
    let p = pipeline_spec(&dev, crate::dtype::dtype_kernel!("binary.", dt), ELEMENTWISE_WORKGROUP, &[(1, op.code())])?;
    let args = [plan.binding(0), plan.binding(1), BufferArg::range(y, 0, u64::from(plan.n) * dt.size() as u64)];
    s.dispatch(&p, &args, &push_words(&words), plan.groups(s, name)?)?;
    Ok(())
}

/// Strided copy with dtype conversion: `dst[dst view] = convert(src[src view])` over `shape`.
/// Covers candle's `copy_strided_src`, `copy2d` and `to_dtype`. F32 → F16 conversion rounds to
/// nearest even.
///
/// For every multi-index `idx` of `shape`, the element of `src` (`src_dt`) at `idx` is
/// written to `dst` (`dst_dt`) at `idx`, for every pair of [`Dtype`]s. Same-dtype copies are
/// bit-exact (NaN payloads included); conversions give the bits of candle-core's CPU
/// `to_dtype`: widening is exact; narrowing rounds to nearest even with overflow to
/// infinity and gradual underflow (`half::f16::from_f32`, `half::bf16::from_f32`, `as
/// f32`); integers to floats round to nearest even (`as f32`, and through f32 for f16 and
/// bf16, as candle does); floats to integers truncate toward zero and saturate, NaN giving
/// 0 (Rust's `as`); integers to narrower integers keep the low bits; f64 → f16 rounds
/// through f32 (`half` on x86-64 with F16C) and f64 → bf16 as `half::bf16::from_f64`
/// (which rounds the top 32 bits only). candle's
/// `copy_strided_src(dst, dst_offset, src_layout)` is a contiguous `dst` view at
/// `dst_offset`; `copy2d(d1, d2, src_s, dst_s, src_o, dst_o)` is `shape = [d1, d2]` with
/// strides `[src_s, 1]` and `[dst_s, 1]`; `to_dtype` is a contiguous `dst` at 0. When both
/// views are contiguous (after merging dims) and the dtypes agree, this records a buffer
/// copy instead of a dispatch.
///
/// # Errors
/// [`OpsError::Shape`] (op `copy`) for a stride count that differs from the rank, more than
/// `u32::MAX` elements or an element index past `u32::MAX`, a view reaching past its
/// buffer's end, a rank above [`MAX_RANK`] after merging dims, a `dst` view that writes an
/// element more than once (a stride of 0, or overlapping strides), or `src` and `dst`
/// overlapping in one buffer (except the identical view, a no-op);
/// [`OpsError::MissingFeature`] when the device cannot store either dtype ([`Dtype`]);
/// HAL errors.
pub fn copy(s: &mut Stream, shape: &[usize], src_dt: Dtype, src: View<'_>, dst_dt: Dtype, dst: View<'_>) -> Result<()> {
    const OP: &str = "copy";
    let dev = s.device().clone();
    src_dt.require(&dev, OP)?;
    dst_dt.require(&dev, OP)?;
    let Some(plan) = Plan::new(OP, shape, &[("src", src, src_dt), ("dst", dst, dst_dt)])? else { return Ok(()) };
    let [so, dso] = plan.operands();
    if !writes_each_once(&plan.shape[..plan.rank as usize], &dso.strides[..plan.rank as usize]) {
        return Err(OpsError::Shape {
            op: OP,
            reason: format!(
                "the dst view (offset {}, strides {:?} over shape {shape:?}) writes some elements more than once",
                dst.offset, dst.strides
            ),
        });
    }
    if src.buffer.id() == dst.buffer.id() {
        let src_bytes = plan.byte_range(0);
        let dst_bytes = plan.byte_range(1);
        if src_bytes.start < dst_bytes.end && dst_bytes.start < src_bytes.end {
            if src_dt == dst_dt && so == dso {
                return Ok(()); // every element onto itself
            }
            return Err(OpsError::Shape {
                op: OP,
                reason: format!("src bytes {src_bytes:?} and dst bytes {dst_bytes:?} overlap in one buffer"),
            });
        }
    }
    let contiguous = |o: &Operand| plan.n == 1 || (plan.rank == 1 && o.strides[0] == 1);
    if src_dt == dst_dt && contiguous(&so) && contiguous(&dso) {
        let size = src_dt.size() as u64;
        let len = u64::from(plan.n) * size;
        s.copy(src.buffer, u64::from(so.offset) * size, dst.buffer, u64::from(dso.offset) * size, len)?;
        return Ok(());
    }
    let mut words = vec![plan.n, plan.rank, so.offset, dso.offset];
    words.extend(plan.shape);
    words.extend(so.strides);
    words.extend(dso.strides);
    let name = crate::dtype::dtype_kernel!("strided_copy.", src_dt, "_", dst_dt);
    let p = pipeline_spec(&dev, name, ELEMENTWISE_WORKGROUP, &[])?;
    let args = [plan.binding(0), plan.binding(1)];
    s.dispatch(&p, &args, &push_words(&words), plan.groups(s, OP)?)?;
    Ok(())
}

/// One operand of a simplified index space: element offset and strides (the first `rank`
/// entries; the rest 0).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Operand {
    offset: u32,
    strides: [u32; MAX_RANK],
}

/// A simplified index space: `n` elements over `shape[..rank]` (the rest 1), row-major,
/// with each operand's layout, and the bytes each operand's binding spans from 0.
struct Plan<'a> {
    n: u32,
    rank: u32,
    shape: [u32; MAX_RANK],
    operands: Vec<Operand>,
    /// Per operand: buffer, first and one-past-last byte addressed.
    spans: Vec<(&'a Buffer, u64, u64)>,
}

impl<'a> Plan<'a> {
    /// Validates `views` over `shape` and merges dims; `None` for zero elements.
    fn new(op: &'static str, shape: &[usize], views: &[(&str, View<'a>, Dtype)]) -> Result<Option<Plan<'a>>> {
        let bad = |reason: String| OpsError::Shape { op, reason };
        for (what, v, _) in views {
            if v.strides.len() != shape.len() {
                return Err(bad(format!(
                    "{what} has {} strides for the {}-dim shape {shape:?}",
                    v.strides.len(),
                    shape.len()
                )));
            }
        }
        let numel = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| bad(format!("shape {shape:?} has more than usize::MAX elements")))?;
        if numel == 0 {
            return Ok(None);
        }
        let n = u32::try_from(numel).map_err(|_| bad(format!("shape {shape:?} has more than 2^32 - 1 elements")))?;
        let mut spans = Vec::with_capacity(views.len());
        for (what, v, dt) in views {
            let (start, end) = view_span(op, what, shape, v, *dt)?;
            spans.push((v.buffer, start, end));
        }
        // Size-1 dims dropped, then adjacent dims merged where every operand allows.
        let mut dims: Vec<(usize, Vec<usize>)> = Vec::with_capacity(shape.len());
        for (i, &d) in shape.iter().enumerate() {
            if d == 1 {
                continue;
            }
            let strides: Vec<usize> = views.iter().map(|(_, v, _)| v.strides[i]).collect();
            if let Some((pd, ps)) = dims.last_mut() {
                if ps.iter().zip(&strides).all(|(&outer, &inner)| inner.checked_mul(d) == Some(outer)) {
                    *pd *= d;
                    *ps = strides;
                    continue;
                }
            }
            dims.push((d, strides));
        }
        if dims.len() > MAX_RANK {
            return Err(bad(format!(
                "rank {} after merging dims (shape {shape:?}, strides {:?}) exceeds the supported {MAX_RANK}",
                dims.len(),
                views.iter().map(|(_, v, _)| v.strides).collect::<Vec<_>>()
            )));
        }
        // Every size and stride below is at most an addressed index or `n`: it fits u32.
        let mut shape32 = [1u32; MAX_RANK];
        let mut operands: Vec<Operand> =
            views.iter().map(|(_, v, _)| Operand { offset: v.offset as u32, strides: [0; MAX_RANK] }).collect();
        for (j, (d, strides)) in dims.iter().enumerate() {
            shape32[j] = *d as u32;
            for (o, &st) in operands.iter_mut().zip(strides) {
                o.strides[j] = st as u32;
            }
        }
        Ok(Some(Plan { n, rank: dims.len().max(1) as u32, shape: shape32, operands, spans }))
    }

    fn operands<const N: usize>(&self) -> [Operand; N] {
        std::array::from_fn(|i| self.operands[i])
    }

    /// Operand `i` bound from byte 0 to the end of what it addresses.
    fn binding(&self, i: usize) -> BufferArg<'a> {
        let (b, _, end) = self.spans[i];
        BufferArg::range(b, 0, end)
    }

    /// Operand `i` bound from byte 0 to the end of what it addresses rounded up to a whole
    /// 32-bit word, for kernels that read it as words.
    fn word_binding(&self, op: &'static str, i: usize) -> Result<BufferArg<'a>> {
        let (b, _, end) = self.spans[i];
        Ok(BufferArg::range(b, 0, word_end(op, &format!("operand {i}"), b, end)?))
    }

    fn byte_range(&self, i: usize) -> std::ops::Range<u64> {
        self.spans[i].1..self.spans[i].2
    }

    /// The launch grid: one invocation per element, 2D where the count needs it.
    fn groups(&self, s: &Stream, op: &'static str) -> Result<[u32; 3]> {
        let wg = u64::from(ELEMENTWISE_WORKGROUP);
        let g = grid(s.device(), op, u64::from(self.n).div_ceil(wg))?;
        // The kernels' flattened invocation index is a u32.
        if u64::from(g[0]) * u64::from(g[1]) * wg > 1 << 32 {
            return Err(OpsError::Shape { op, reason: format!("{} elements need too large a grid", self.n) });
        }
        Ok(g)
    }
}

/// Whether a layout maps distinct multi-indices to distinct elements (a sufficient test:
/// sorted by stride, each stride exceeds the span of the smaller ones).
fn writes_each_once(shape: &[u32], strides: &[u32]) -> bool {
    let mut dims: Vec<(u64, u64)> =
        shape.iter().zip(strides).filter(|(&d, _)| d > 1).map(|(&d, &s)| (u64::from(s), u64::from(d))).collect();
    dims.sort_unstable();
    let mut span = 0u64;
    for (stride, d) in dims {
        if stride <= span {
            return false;
        }
        span += (d - 1) * stride;
    }
    true
}

/// Checks that `y` holds the plan's `n` elements of `dt` and overlaps an input only in
/// place.
fn check_output(op: &'static str, plan: &Plan<'_>, dt: Dtype, y: &Buffer, inputs: &[View<'_>]) -> Result<()> {
    let bytes = u64::from(plan.n) * dt.size() as u64;
    if y.size() < bytes {
        return Err(OpsError::Shape {
            op,
            reason: format!("y holds {} bytes, needs {} {} ({bytes} bytes)", y.size(), plan.n, dt.name()),
        });
    }
    for (i, v) in inputs.iter().enumerate() {
        let o = &plan.operands[i];
        let in_place = o.offset == 0 && (plan.n == 1 || (plan.rank == 1 && o.strides[0] == 1));
        if v.buffer.id() == y.id() && !in_place && plan.byte_range(i).start < bytes {
            return Err(OpsError::Shape {
                op,
                reason: format!(
                    "y overlaps input {i} (offset {}, strides {:?}) in the same buffer, other than in place",
                    v.offset, v.strides
                ),
            });
        }
    }
    Ok(())
}

/// Checks that `y`'s first `plan.n` elements of `dt` overlap none of `inputs` (in-place
/// use not allowed).
fn check_disjoint(op: &'static str, plan: &Plan<'_>, y: &Buffer, dt: Dtype, inputs: &[View<'_>]) -> Result<()> {
    let bytes = u64::from(plan.n) * dt.size() as u64;
    for (i, v) in inputs.iter().enumerate() {
        let r = plan.byte_range(i);
        if v.buffer.id() == y.id() && r.start < bytes {
            return Err(OpsError::Shape {
                op,
                reason: format!("y overlaps input {i} (bytes {r:?}) in the same buffer"),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_strides_are_row_major() {
        assert_eq!(contiguous_strides(&[]), Vec::<usize>::new());
        assert_eq!(contiguous_strides(&[5]), vec![1]);
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
    }

    #[test]
    fn write_once_test() {
        assert!(writes_each_once(&[2, 3], &[3, 1]));
        assert!(writes_each_once(&[2, 3], &[1, 2]));
        assert!(writes_each_once(&[1, 3], &[0, 1]));
        assert!(!writes_each_once(&[2, 3], &[0, 1]));
        assert!(!writes_each_once(&[2, 3], &[2, 1]));
        assert!(writes_each_once(&[], &[]));
    }
}
