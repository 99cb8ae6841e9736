//! Decimal text (how rows carry DECIMAL cells) as an unscaled integer at a
//! column's scale: checked when a row is checked, converted when it is written.

/// Decimal text as an unscaled integer at `scale`, rounded half away from
/// zero, checked against `precision`.
pub(crate) fn decimal_unscaled(text: &str, precision: u8, scale: u8) -> Result<i128, String> {
    let t = text.trim();
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let bad = || format!("\"{text}\" is not a decimal number");
    if (int.is_empty() && frac.is_empty()) || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let mut value: i128 = 0;
    let push = |v: i128, d: u8| v.checked_mul(10).and_then(|v| v.checked_add((d - b'0') as i128));
    for d in int.bytes() {
        value = push(value, d).ok_or_else(bad)?;
    }
    let frac = frac.as_bytes();
    for i in 0..scale as usize {
        value = push(value, *frac.get(i).unwrap_or(&b'0')).ok_or_else(bad)?;
    }
    if frac.get(scale as usize).is_some_and(|&d| d >= b'5') {
        value += 1;
    }
    if value >= 10i128.pow(precision as u32) {
        return Err(format!("{t} does not fit DECIMAL({precision}, {scale})"));
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
    }
}
