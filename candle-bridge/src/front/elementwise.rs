//! Elementwise ops: unary, binary (same-shape and broadcasting), `affine`, `powf`, `elu`,
//! comparisons, `where_cond`, `to_dtype`, and the macros that generate candle's named
//! methods.

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::{BinaryOpT, CmpOp, UnaryOpT};
use candle_core::{DType, Shape};

use super::{CResult, Tensor};

fn check_same_shape(a: &Shape, b: &Shape, op: &'static str) -> CResult<()> {
    if a != b {
        return Err(candle_core::Error::ShapeMismatchBinaryOp { lhs: a.clone(), rhs: b.clone(), op }.bt());
    }
    Ok(())
}

impl<S: BackendStorage> Tensor<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    /// candle's `to_dtype`.
    ///
    /// # Errors
    /// Conversions the backend lacks.
    pub fn to_dtype(&self, dtype: DType) -> CResult<Self> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        Ok(self.wrap(self.storage.to_dtype(&self.layout, dtype)?))
    }

    /// candle's `affine`: `x * mul + add`.
    ///
    /// # Errors
    /// Dtypes the backend lacks.
    pub fn affine(&self, mul: f64, add: f64) -> CResult<Self> {
        Ok(self.wrap(self.storage.affine(&self.layout, mul, add)?))
    }

    /// A candle unary op (`candle_core::op::Silu`, `Exp`, ...), as `Tensor::silu` etc.
    ///
    /// # Errors
    /// Dtypes the backend lacks.
    pub fn unary<B: UnaryOpT>(&self) -> CResult<Self> {
        Ok(self.wrap(self.storage.unary_impl::<B>(&self.layout)?))
    }

    /// candle's `silu`: `x / (1 + exp(-x))`.
    ///
    /// # Errors
    /// Dtypes the backend lacks.
    pub fn silu(&self) -> CResult<Self> {
        self.unary::<candle_core::op::Silu>()
    }

    /// A candle binary op on tensors of one shape (candle's `add`, `mul`, ...).
    ///
    /// # Errors
    /// Shapes or dtypes that differ.
    pub fn binary<B: BinaryOpT>(&self, rhs: &Self) -> CResult<Self> {
        check_same_shape(self.shape(), rhs.shape(), B::NAME)?;
        Ok(self.wrap(self.storage.binary_impl::<B>(&rhs.storage, &self.layout, &rhs.layout)?))
    }

    /// A candle binary op after broadcasting both sides to a common shape (candle's
    /// `broadcast_add`, `broadcast_mul`, ...).
    ///
    /// # Errors
    /// Shapes that do not broadcast, dtypes that differ.
    pub fn broadcast_binary<B: BinaryOpT>(&self, rhs: &Self) -> CResult<Self> {
        let shape = self.shape().broadcast_shape_binary_op(rhs.shape(), B::NAME)?;
        self.broadcast_as(shape.clone())?.binary::<B>(&rhs.broadcast_as(shape)?)
    }

    /// candle's `add`.
    ///
    /// # Errors
    /// As [`Tensor::binary`].
    pub fn add(&self, rhs: &Self) -> CResult<Self> {
        self.binary::<candle_core::op::Add>(rhs)
    }

    /// candle's `mul`.
    ///
    /// # Errors
    /// As [`Tensor::binary`].
    pub fn mul(&self, rhs: &Self) -> CResult<Self> {
        self.binary::<candle_core::op::Mul>(rhs)
    }

    /// candle's `broadcast_add`.
    ///
    /// # Errors
    /// As [`Tensor::broadcast_binary`].
    pub fn broadcast_add(&self, rhs: &Self) -> CResult<Self> {
        self.broadcast_binary::<candle_core::op::Add>(rhs)
    }

    /// candle's `broadcast_mul`.
    ///
    /// # Errors
    /// As [`Tensor::broadcast_binary`].
    pub fn broadcast_mul(&self, rhs: &Self) -> CResult<Self> {
        self.broadcast_binary::<candle_core::op::Mul>(rhs)
    }

    /// candle's `powf`: `x^e`.
    ///
    /// # Errors
    /// Dtypes the backend lacks.
    pub fn powf(&self, e: f64) -> CResult<Self> {
        Ok(self.wrap(self.storage.powf(&self.layout, e)?))
    }

    /// candle's `elu`.
    ///
    /// # Errors
    /// Dtypes the backend lacks.
    pub fn elu(&self, alpha: f64) -> CResult<Self> {
        Ok(self.wrap(self.storage.elu(&self.layout, alpha)?))
    }

    /// A comparison (candle's `cmp`), U8 result.
    ///
    /// # Errors
    /// Shapes or dtypes that differ.
    pub fn cmp(&self, op: CmpOp, rhs: &Self) -> CResult<Self> {
        check_same_shape(self.shape(), rhs.shape(), "cmp")?;
        Ok(self.wrap(self.storage.cmp(op, &rhs.storage, &self.layout, &rhs.layout)?))
    }

    /// candle's `where_cond`: `on_true` where `self` (U8, U32 or I64) is non-zero, else
    /// `on_false`.
    ///
    /// # Errors
    /// Shapes that differ; value dtypes that differ.
    pub fn where_cond(&self, on_true: &Self, on_false: &Self) -> CResult<Self> {
        check_same_shape(self.shape(), on_true.shape(), "where_cond")?;
        check_same_shape(self.shape(), on_false.shape(), "where_cond")?;
        let st = self.storage.where_cond(
            &self.layout,
            &on_true.storage,
            &on_true.layout,
            &on_false.storage,
            &on_false.layout,
        )?;
        Ok(self.wrap(st))
    }
}

/// Candle's unary tensor methods, each through [`Tensor::unary`].
macro_rules! unary_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        $(
            #[doc = concat!("candle's `", stringify!($name), "`.")]
            ///
            /// # Errors
            /// Dtypes the backend lacks.
            pub fn $name(&self) -> CResult<Self> {
                self.unary::<candle_core::op::$op>()
            }
        )*
    };
}

/// Candle's binary tensor methods, same-shape and broadcasting forms.
macro_rules! binary_methods {
    ($($name:ident, $bname:ident => $op:ident),* $(,)?) => {
        $(
            #[doc = concat!("candle's `", stringify!($name), "` (same shapes).")]
            ///
            /// # Errors
            /// As [`Tensor::binary`].
            pub fn $name(&self, rhs: &Self) -> CResult<Self> {
                self.binary::<candle_core::op::$op>(rhs)
            }

            #[doc = concat!("candle's `", stringify!($bname), "`.")]
            ///
            /// # Errors
            /// As [`Tensor::broadcast_binary`].
            pub fn $bname(&self, rhs: &Self) -> CResult<Self> {
                self.broadcast_binary::<candle_core::op::$op>(rhs)
            }
        )*
    };
}

/// Candle's comparisons (U8 results).
macro_rules! cmp_methods {
    ($($name:ident => $op:ident),* $(,)?) => {
        $(
            #[doc = concat!("candle's `", stringify!($name), "`: 1 where it holds, else 0 (U8).")]
            ///
            /// # Errors
            /// Shapes or dtypes that differ.
            pub fn $name(&self, rhs: &Self) -> CResult<Self> {
                self.cmp(CmpOp::$op, rhs)
            }
        )*
    };
}

impl<S: BackendStorage> Tensor<S>
where
    S::Device: BackendDevice<Storage = S>,
{
    unary_methods!(
        exp => Exp, log => Log, sin => Sin, cos => Cos, tanh => Tanh, abs => Abs, neg => Neg,
        recip => Recip, sqr => Sqr, sqrt => Sqrt, gelu => Gelu, gelu_erf => GeluErf, erf => Erf,
        relu => Relu, floor => Floor, ceil => Ceil, round => Round, sign => Sign,
    );

    binary_methods!(
        sub, broadcast_sub => Sub, div, broadcast_div => Div,
        maximum, broadcast_maximum => Maximum, minimum, broadcast_minimum => Minimum,
    );

    cmp_methods!(eq => Eq, ne => Ne, lt => Lt, le => Le, gt => Gt, ge => Ge);
}
