//! Decimal text (how rows carry DECIMAL cells) as an unscaled integer at a
//! column's scale: checked when a row is checked, converted when it is written.

/// Powers of ten up to the largest DECIMAL precision, 38.
const POW10: [i128; 39] = {
    let mut table = [1i128; 39];
    let mut i = 1;
    while i < table.len() {
        table[i] = table[i - 1] * 10;
        i += 1;
    }
    table
};

/// Digits read in a `u64`: 10^18 - 1 fits, and nearly every decimal has
/// fewer digits, so most never touch 128-bit arithmetic.
const SMALL_DIGITS: usize = 18;

/// Decimal text as an unscaled integer at `scale`, rounded half away from
/// zero, checked against `precision`.
pub(crate) fn decimal_unscaled(text: &str, precision: u8, scale: u8) -> Result<i128, String> {
    let t = fluss_row_codec::json::trim(text);
    let bytes = t.as_bytes();
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, bytes),
    };
    let bad = || format!("\"{text}\" is not a decimal number");
    let (int, fraction) = match digits.iter().position(|&b| b == b'.') {
        Some(point) => (&digits[..point], &digits[point + 1..]),
        None => (digits, &[][..]),
    };
    let scale = usize::from(scale);
    let kept = &fraction[..fraction.len().min(scale)];
    let round_up = fraction.get(scale).is_some_and(|&b| b >= b'5');
    // The digits kept, as an integer: in a `u64` for up to 18 of them
    // (nearly every decimal), else a digit at a time in 128 bits.
    let mut kept_digits = int.iter().chain(kept);
    let unscaled = if int.len() + kept.len() <= SMALL_DIGITS {
        kept_digits
            .try_fold(0u64, |v, &b| {
                b.is_ascii_digit().then(|| v * 10 + u64::from(b - b'0'))
            })
            .map(i128::from)
    } else {
        kept_digits.try_fold(0i128, |v, &b| {
            b.is_ascii_digit()
                .then_some(v)?
                .checked_mul(10)?
                .checked_add(i128::from(b - b'0'))
        })
    };
    let mut value = unscaled
        .and_then(|v| v.checked_mul(POW10[scale - kept.len()]))
        .ok_or_else(bad)?;
    if int.is_empty() && fraction.is_empty() || !fraction[kept.len()..].iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    if round_up {
        value += 1;
    }
    if value >= POW10[usize::from(precision).min(38)] {
        return Err(format!("{t} does not fit DECIMAL({precision}, {})", scale));
    }
    Ok(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_scale_round_and_check_precision() {
        assert_eq!(decimal_unscaled("12.3", 10, 2), Ok(1230));
        assert_eq!(decimal_unscaled("-12.345", 10, 2), Ok(-1235));
        assert_eq!(decimal_unscaled("12.344", 10, 2), Ok(1234));
        assert_eq!(decimal_unscaled(".5", 3, 0), Ok(1));
        assert_eq!(decimal_unscaled("7", 3, 1), Ok(70));
        assert!(
            decimal_unscaled("99.996", 4, 2)
                .unwrap_err()
                .contains("does not fit DECIMAL(4, 2)")
        );
        assert!(
            decimal_unscaled("1e5", 10, 0)
                .unwrap_err()
                .contains("not a decimal")
        );
        assert_eq!(decimal_unscaled(" 5. ", 10, 2), Ok(500));
        assert_eq!(decimal_unscaled("+0.005", 10, 2), Ok(1));
        assert_eq!(decimal_unscaled("0.0049", 10, 2), Ok(0));
        assert_eq!(decimal_unscaled("-007.10", 5, 3), Ok(-7100));
        assert_eq!(decimal_unscaled("12", 10, 0), Ok(12));
        let past_i128 = "9".repeat(40);
        for bad in [
            "", ".", "-", "-.", "-+5", "+-5", "1.2.3", "1 2", "١", "0x10", &past_i128,
        ] {
            assert_eq!(
                decimal_unscaled(bad, 38, 2),
                Err(format!("\"{bad}\" is not a decimal number")),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn long_decimals_fold_into_128_bits_exactly() {
        let max = "9".repeat(38);
        assert_eq!(decimal_unscaled(&max, 38, 0), Ok(10i128.pow(38) - 1));
        assert_eq!(
            decimal_unscaled(&format!("-{max}"), 38, 0),
            Ok(1 - 10i128.pow(38))
        );
        assert_eq!(
            decimal_unscaled("123456789012345678901234567890.12345678", 38, 8),
            Ok(12345678901234567890123456789012345678)
        );
        // Eighteen digits stay in the u64; zeros of the scale push them past it.
        assert_eq!(
            decimal_unscaled("999999999999999999", 38, 20),
            Ok(999999999999999999 * 10i128.pow(20))
        );
        assert!(
            decimal_unscaled(&format!("1{}", "0".repeat(38)), 38, 0)
                .unwrap_err()
                .contains("does not fit DECIMAL(38, 0)")
        );
        // Leading zeros fold to nothing and do not count against precision.
        assert_eq!(decimal_unscaled(&format!("{}5", "0".repeat(40)), 3, 1), Ok(50));
    }

    /// The digit-at-a-time reading in 128 bits, the obvious way.
    fn reference(text: &str, precision: u8, scale: u8) -> Result<i128, String> {
        let t = text.trim();
        let (negative, body) = match t.as_bytes() {
            [b'-', ..] => (true, &t[1..]),
            [b'+', ..] => (false, &t[1..]),
            _ => (false, t),
        };
        let bad = || format!("\"{text}\" is not a decimal number");
        let (int, frac) = body.split_once('.').unwrap_or((body, ""));
        let all = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if !all(int) || !all(frac) || int.len() + frac.len() == 0 {
            return Err(bad());
        }
        let scale = usize::from(scale);
        let kept: String = frac.chars().chain(std::iter::repeat('0')).take(scale).collect();
        let mut value = 0i128;
        for b in int.bytes().chain(kept.bytes()) {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(i128::from(b - b'0')))
                .ok_or_else(bad)?;
        }
        if frac.as_bytes().get(scale).is_some_and(|&b| b >= b'5') {
            value += 1;
        }
        if value >= 10i128.pow(u32::from(precision)) {
            return Err(format!("{t} does not fit DECIMAL({precision}, {scale})"));
        }
        Ok(if negative { -value } else { value })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]
        #[test]
        fn agrees_with_the_obvious_reading(
            text in "[ ]?[+-]?[0-9]{0,45}(\\.[0-9]{0,45})?[ ]?",
            precision in 1u8..=38,
            scale_part in 0u8..=38,
        ) {
            let scale = scale_part.min(precision);
            proptest::prop_assert_eq!(
                decimal_unscaled(&text, precision, scale),
                reference(&text, precision, scale),
                "{:?} at DECIMAL({}, {})", text, precision, scale
            );
        }
    }
}
