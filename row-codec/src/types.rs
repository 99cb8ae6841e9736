//! Fluss column types as the sink understands them, parsed from and printed
//! as Fluss's SQL type names (`BIGINT`, `DECIMAL(10, 2)`, `TIMESTAMP(6)`, ...).

use std::fmt;
use std::str::FromStr;

/// A Fluss column type the sink can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `BOOLEAN`
    Boolean,
    /// `TINYINT`
    TinyInt,
    /// `SMALLINT`
    SmallInt,
    /// `INT` / `INTEGER`
    Int,
    /// `BIGINT`
    BigInt,
    /// `FLOAT`
    Float,
    /// `DOUBLE`
    Double,
    /// `STRING`
    String,
    /// `CHAR(n)`
    Char(u32),
    /// `BYTES`
    Bytes,
    /// `BINARY(n)`
    Binary(u32),
    /// `DECIMAL(precision, scale)`
    Decimal(u8, u8),
    /// `DATE`
    Date,
    /// `TIME(precision)`
    Time(u8),
    /// `TIMESTAMP(precision)`, without time zone.
    Timestamp(u8),
    /// `TIMESTAMP_LTZ(precision)`, an instant.
    TimestampLtz(u8),
}

/// A type name that is not one the sink can write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported or malformed column type `{text}`: {reason}")]
pub struct TypeParseError {
    /// The text as given.
    pub text: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl DataType {
    /// True for the integer types.
    pub fn is_integer(self) -> bool {
        matches!(self, Self::TinyInt | Self::SmallInt | Self::Int | Self::BigInt)
    }
}

impl FromStr for DataType {
    type Err = TypeParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason| TypeParseError {
            text: text.to_string(),
            reason,
        };
        let upper = text.trim().to_ascii_uppercase();
        let upper = upper.strip_suffix(" NOT NULL").unwrap_or(&upper).trim();
        let (name, args) = match upper.find('(') {
            Some(open) => {
                let close = upper
                    .rfind(')')
                    .ok_or_else(|| fail("missing closing parenthesis"))?;
                if close < open {
                    return Err(fail("misplaced parenthesis"));
                }
                let args = upper[open + 1..close]
                    .split(',')
                    .map(|a| a.trim().parse::<u32>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| fail("type arguments must be whole numbers"))?;
                let rest = upper[close + 1..].trim();
                let name = match rest {
                    "" => upper[..open].trim().to_string(),
                    "WITH LOCAL TIME ZONE" => format!("{}_LTZ", upper[..open].trim()),
                    _ => return Err(fail("text after the closing parenthesis")),
                };
                (name, args)
            }
            None => (upper.to_string(), Vec::new()),
        };
        let precision = |default: u32, max: u32| -> Result<u8, TypeParseError> {
            let p = match args.as_slice() {
                [] => default,
                [p] => *p,
                _ => return Err(fail("expected one argument")),
            };
            if p > max {
                return Err(fail("precision out of range"));
            }
            Ok(p as u8)
        };
        let no_args = |t: DataType| {
            if args.is_empty() {
                Ok(t)
            } else {
                Err(fail("this type takes no arguments"))
            }
        };
        match name.as_str() {
            "BOOLEAN" => no_args(Self::Boolean),
            "TINYINT" => no_args(Self::TinyInt),
            "SMALLINT" => no_args(Self::SmallInt),
            "INT" | "INTEGER" => no_args(Self::Int),
            "BIGINT" => no_args(Self::BigInt),
            "FLOAT" => no_args(Self::Float),
            "DOUBLE" => no_args(Self::Double),
            "STRING" => no_args(Self::String),
            "BYTES" => no_args(Self::Bytes),
            "DATE" => no_args(Self::Date),
            "CHAR" => Ok(Self::Char(match args.as_slice() {
                [n] if *n > 0 => *n,
                _ => return Err(fail("CHAR takes one positive length")),
            })),
            "BINARY" => Ok(Self::Binary(match args.as_slice() {
                [n] if *n > 0 => *n,
                _ => return Err(fail("BINARY takes one positive length")),
            })),
            "DECIMAL" => {
                let (p, s) = match args.as_slice() {
                    [] => (10, 0),
                    [p] => (*p, 0),
                    [p, s] => (*p, *s),
                    _ => return Err(fail("DECIMAL takes precision and scale")),
                };
                if !(1..=38).contains(&p) || s > p {
                    return Err(fail("DECIMAL needs 1 <= precision <= 38 and scale <= precision"));
                }
                Ok(Self::Decimal(p as u8, s as u8))
            }
            "TIME" => Ok(Self::Time(precision(0, 9)?)),
            "TIMESTAMP" | "TIMESTAMP_NTZ" => Ok(Self::Timestamp(precision(6, 9)?)),
            "TIMESTAMP_LTZ" | "TIMESTAMP WITH LOCAL TIME ZONE" => Ok(Self::TimestampLtz(precision(6, 9)?)),
            _ => Err(fail("not a type the sink can write")),
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Boolean => f.write_str("BOOLEAN"),
            Self::TinyInt => f.write_str("TINYINT"),
            Self::SmallInt => f.write_str("SMALLINT"),
            Self::Int => f.write_str("INT"),
            Self::BigInt => f.write_str("BIGINT"),
            Self::Float => f.write_str("FLOAT"),
            Self::Double => f.write_str("DOUBLE"),
            Self::String => f.write_str("STRING"),
            Self::Char(n) => write!(f, "CHAR({n})"),
            Self::Bytes => f.write_str("BYTES"),
            Self::Binary(n) => write!(f, "BINARY({n})"),
            Self::Decimal(p, s) => write!(f, "DECIMAL({p}, {s})"),
            Self::Date => f.write_str("DATE"),
            Self::Time(p) => write!(f, "TIME({p})"),
            Self::Timestamp(p) => write!(f, "TIMESTAMP({p})"),
            Self::TimestampLtz(p) => write!(f, "TIMESTAMP_LTZ({p})"),
        }
    }
}

/// One column of a table, as the mapping and the checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The column's name.
    pub name: String,
    /// Its Fluss type.
    pub data_type: DataType,
    /// Whether it accepts NULL.
    pub nullable: bool,
}

impl Column {
    /// A column from its parts.
    pub fn new(name: impl Into<String>, data_type: DataType, nullable: bool) -> Self {
        Self {
            name: name.into(),
            data_type,
            nullable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_every_type() {
        for (text, expected) in [
            ("boolean", DataType::Boolean),
            ("TINYINT", DataType::TinyInt),
            ("SMALLINT", DataType::SmallInt),
            ("INTEGER", DataType::Int),
            ("BIGINT NOT NULL", DataType::BigInt),
            ("FLOAT", DataType::Float),
            ("DOUBLE", DataType::Double),
            ("STRING", DataType::String),
            ("CHAR(3)", DataType::Char(3)),
            ("BYTES", DataType::Bytes),
            ("BINARY(16)", DataType::Binary(16)),
            ("DECIMAL(10, 2)", DataType::Decimal(10, 2)),
            ("DATE", DataType::Date),
            ("TIME", DataType::Time(0)),
            ("TIMESTAMP(3)", DataType::Timestamp(3)),
            ("TIMESTAMP", DataType::Timestamp(6)),
            ("TIMESTAMP_LTZ(6)", DataType::TimestampLtz(6)),
            ("TIMESTAMP(3) WITH LOCAL TIME ZONE", DataType::TimestampLtz(3)),
        ] {
            let parsed: DataType = text.parse().unwrap();
            assert_eq!(parsed, expected, "{text}");
            assert_eq!(parsed.to_string().parse::<DataType>().unwrap(), expected);
        }
    }

    #[test]
    fn rejects_what_it_cannot_write() {
        for text in [
            "ARRAY<INT>",
            "DECIMAL(40, 2)",
            "DECIMAL(4, 5)",
            "INT(3)",
            "CHAR",
            "TIMESTAMP(12)",
            "MAP<STRING,INT>",
        ] {
            let err = text.parse::<DataType>().unwrap_err();
            assert_eq!(err.text, text);
        }
    }
}
