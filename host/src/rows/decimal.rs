//! Decimal text (how rows carry DECIMAL cells) as an unscaled integer at a
//! column's scale: checked when a row is checked, converted when it is written.

/// Decimal text as an unscaled integer at `scale`, rounded half away from
/// zero, checked against `precision`: one pass over the text's bytes.
pub(crate) fn decimal_unscaled(text: &str, precision: u8, scale: u8) -> Result<i128, String> {
    let t = text.trim();
    let bytes = t.as_bytes();
    let (negative, digits) = match bytes {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, bytes),
    };
    let bad = || format!("\"{text}\" is not a decimal number");
    let push = |v: i128, d: u8| v.checked_mul(10).and_then(|v| v.checked_add((d - b'0') as i128));
    let scale = usize::from(scale);
    // Fraction digits taken so far, `None` before the point.
    let mut fraction: Option<usize> = None;
    let (mut value, mut round_up, mut any_digit) = (0i128, false, false);
    for &b in digits {
        match (b, fraction) {
            (b'.', None) => fraction = Some(0),
            (b'0'..=b'9', None) => value = push(value, b).ok_or_else(bad)?,
            (b'0'..=b'9', Some(taken)) => {
                if taken < scale {
                    value = push(value, b).ok_or_else(bad)?;
                } else if taken == scale {
                    round_up = b >= b'5';
                }
                fraction = Some(taken + 1);
            }
            _ => return Err(bad()),
        }
        any_digit |= b != b'.';
    }
    if !any_digit {
        return Err(bad());
    }
    for _ in fraction.unwrap_or(0).min(scale)..scale {
        value = push(value, b'0').ok_or_else(bad)?;
    }
    if round_up {
        value += 1;
    }
    if value >= 10i128.pow(precision as u32) {
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
}
