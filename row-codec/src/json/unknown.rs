//! Fields that name no column: skipped, noted, or refused (for a sink
//! that adds their columns first), and how a refusal names its field.

use super::MapError;

/// How [`MapError::UnknownField`] reads: a refusal whose text starts so
/// names a field the table lacks (see [`MapError::unknown_field_of`]).
pub const UNKNOWN_FIELD: &str = "payload field without a column:";

impl MapError {
    /// The field a refusal's text (`MapError::to_string`) names when it is
    /// an [`MapError::UnknownField`].
    pub fn unknown_field_of(text: &str) -> Option<&str> {
        text.strip_prefix(UNKNOWN_FIELD)?
            .strip_prefix(" `")?
            .strip_suffix('`')
    }
}

impl MapError {
    /// Whether a refusal's text (`MapError::to_string`) is a
    /// [`MapError::Convert`]: a value its column's type does not take.
    pub fn is_conversion(text: &str) -> bool {
        let Some(rest) = text.strip_prefix("column `") else {
            return false;
        };
        let missing = MapError::MissingValue(String::new()).to_string();
        let missing_tail = missing.strip_prefix("column ``").unwrap_or(&missing);
        rest.contains("` (") && !rest.ends_with(missing_tail)
    }
}

/// What a [`JsonMapper`] does with a field that names no column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownFields {
    /// Skips it (the default).
    #[default]
    Ignore,
    /// Refuses the payload with [`MapError::UnknownField`] unless the
    /// field's value is `null`: for a sink that adds the column first.
    Refuse,
    /// Skips it, and notes that one was met (see
    /// [`JsonMapper::take_unknown_field_noted`]): for a sink that looks
    /// at its table's columns again when a payload names one it lacks.
    Note,
}
