//! What exists only to cope with candle-core 0.11's API: its conv params, whose fields
//! a backend outside candle-core reads from their `Debug` form.

use std::fmt;

use super::CResult;

/// The numeric fields `names` of one of candle's conv params structs, read from its
/// `Debug` form (`ParamsConv1D { b_size: 2, l_in: 9, ... }`): candle-core 0.11 keeps their
/// fields `pub(crate)` with no accessors, so a backend outside candle-core has no other
/// way to read them.
///
/// # Errors
/// A field missing or not a number (a candle-core whose params differ from 0.11's).
pub(super) fn params_fields<const N: usize>(p: &impl fmt::Debug, names: [&str; N]) -> CResult<[usize; N]> {
    let text = format!("{p:?}");
    let mut out = [0; N];
    for (o, name) in out.iter_mut().zip(names) {
        // Every field follows "{ " or ", ", so " name: " does not match "output_name: ".
        let pat = format!(" {name}: ");
        let value = text.find(&pat).map(|i| &text[i + pat.len()..]).and_then(|rest| {
            let digits: &str = &rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())];
            digits.parse::<usize>().ok()
        });
        *o = value.ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "vkml: cannot read `{name}` from candle's conv params `{text}` (vkml-candle reads candle-core 0.11's)"
            ))
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::params_fields;

    /// The `Debug` form `derive(Debug)` gives candle-core 0.11's `ParamsConvTranspose1D`
    /// (same struct name, fields and order): `padding` is found apart from
    /// `output_padding`, and a missing field is an error naming it.
    #[test]
    fn reads_conv_params_from_debug() {
        #[derive(Debug)]
        #[allow(dead_code)]
        struct ParamsConvTranspose1D {
            b_size: usize,
            l_in: usize,
            c_out: usize,
            c_in: usize,
            k_size: usize,
            padding: usize,
            output_padding: usize,
            stride: usize,
            dilation: usize,
        }
        let p = ParamsConvTranspose1D {
            b_size: 2,
            l_in: 17,
            c_out: 3,
            c_in: 5,
            k_size: 4,
            padding: 6,
            output_padding: 1,
            stride: 12,
            dilation: 7,
        };
        let got = params_fields(&p, ["output_padding", "padding", "stride", "l_in", "dilation", "b_size"]).unwrap();
        assert_eq!(got, [1, 6, 12, 17, 7, 2]);
        let err = params_fields(&p, ["groups"]).unwrap_err().to_string();
        assert!(err.contains("`groups`"), "{err}");
    }
}
