//! What crosses the seam: a parameter ([`Value`]) and a column ([`Column`]), each one of the
//! five kinds SQLite stores, and the conversions of the store's own types to and from them.

use super::{DbError, DbResult};

/// A statement's parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a str),
    Blob(&'a [u8]),
}

/// A value a row holds.
pub(crate) type Column<'a> = Value<'a>;

impl<'a> From<rusqlite::types::ValueRef<'a>> for Value<'a> {
    fn from(v: rusqlite::types::ValueRef<'a>) -> Value<'a> {
        use rusqlite::types::ValueRef;
        match v {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Int(i),
            ValueRef::Real(f) => Value::Real(f),
            // SQLite may hold text that is not UTF-8; it is read as not-text, never as
            // replaced characters.
            ValueRef::Text(t) => std::str::from_utf8(t).map_or(Value::Blob(t), Value::Text),
            ValueRef::Blob(b) => Value::Blob(b),
        }
    }
}

impl rusqlite::ToSql for Value<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match *self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(i),
            Value::Real(f) => ValueRef::Real(f),
            Value::Text(t) => ValueRef::Text(t.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

impl Value<'_> {
    /// What kind of value it is, for an error.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Int(_) => "an integer",
            Value::Real(_) => "a real",
            Value::Text(_) => "text",
            Value::Blob(_) => "bytes",
        }
    }
}

/// The parameters, as SQLite binds them.
pub(super) fn sqlite_params<'a>(params: &'a [&'a dyn ToValue]) -> DbResult<Vec<Value<'a>>> {
    params.iter().map(|p| p.to_value()).collect()
}

/// A type a statement takes as a parameter.
pub(crate) trait ToValue {
    fn to_value(&self) -> DbResult<Value<'_>>;
}

/// A type a store reads from a column.
pub(crate) trait FromColumn: Sized {
    /// `Err` says what was found instead.
    fn from_column(column: Column<'_>) -> Result<Self, String>;
}

fn unexpected(column: Column<'_>, wanted: &str) -> String {
    format!("{} where {wanted} was expected", column.kind())
}

impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> DbResult<Value<'_>> {
        (**self).to_value()
    }
}

impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> DbResult<Value<'_>> {
        match self {
            Some(v) => v.to_value(),
            None => Ok(Value::Null),
        }
    }
}

impl<T: FromColumn> FromColumn for Option<T> {
    fn from_column(column: Column<'_>) -> Result<Self, String> {
        match column {
            Value::Null => Ok(None),
            other => T::from_column(other).map(Some),
        }
    }
}

impl ToValue for str {
    fn to_value(&self) -> DbResult<Value<'_>> {
        Ok(Value::Text(self))
    }
}

impl ToValue for String {
    fn to_value(&self) -> DbResult<Value<'_>> {
        Ok(Value::Text(self))
    }
}

impl ToValue for std::borrow::Cow<'_, str> {
    fn to_value(&self) -> DbResult<Value<'_>> {
        Ok(Value::Text(self))
    }
}

impl FromColumn for String {
    fn from_column(column: Column<'_>) -> Result<Self, String> {
        match column {
            Value::Text(t) => Ok(t.to_owned()),
            other => Err(unexpected(other, "text")),
        }
    }
}

impl ToValue for [u8] {
    fn to_value(&self) -> DbResult<Value<'_>> {
        Ok(Value::Blob(self))
    }
}

impl ToValue for Vec<u8> {
    fn to_value(&self) -> DbResult<Value<'_>> {
        Ok(Value::Blob(self))
    }
}

impl FromColumn for Vec<u8> {
    fn from_column(column: Column<'_>) -> Result<Self, String> {
        match column {
            Value::Blob(b) => Ok(b.to_vec()),
            Value::Text(t) => Ok(t.as_bytes().to_vec()),
            other => Err(unexpected(other, "bytes")),
        }
    }
}

impl ToValue for bool {
    fn to_value(&self) -> DbResult<Value<'_>> {
        Ok(Value::Int(i64::from(*self)))
    }
}

impl FromColumn for bool {
    fn from_column(column: Column<'_>) -> Result<Self, String> {
        match column {
            Value::Int(i) => Ok(i != 0),
            other => Err(unexpected(other, "a boolean")),
        }
    }
}

impl ToValue for f64 {
    fn to_value(&self) -> DbResult<Value<'_>> {
        Ok(Value::Real(*self))
    }
}

impl FromColumn for f64 {
    fn from_column(column: Column<'_>) -> Result<Self, String> {
        match column {
            Value::Real(f) => Ok(f),
            Value::Int(i) => Ok(i as f64),
            other => Err(unexpected(other, "a number")),
        }
    }
}

impl ToValue for i64 {
    fn to_value(&self) -> DbResult<Value<'_>> {
        Ok(Value::Int(*self))
    }
}

impl FromColumn for i64 {
    fn from_column(column: Column<'_>) -> Result<Self, String> {
        match column {
            Value::Int(i) => Ok(i),
            other => Err(unexpected(other, "an integer")),
        }
    }
}

/// The other integers: stored as SQLite's (and PostgreSQL's `bigint`) 64 bits, signed. An
/// unsigned one past `i64::MAX` is refused, never wrapped; a stored one that does not fit the
/// type read is an error, never cut.
macro_rules! integer {
    ($($t:ty),+) => {$(
        impl ToValue for $t {
            fn to_value(&self) -> DbResult<Value<'_>> {
                i64::try_from(*self).map(Value::Int).map_err(|_| {
                    DbError::Value(format!("{} does not fit a stored integer", self))
                })
            }
        }

        impl FromColumn for $t {
            fn from_column(column: Column<'_>) -> Result<Self, String> {
                match column {
                    Value::Int(i) => <$t>::try_from(i)
                        .map_err(|_| format!("{i} does not fit {}", stringify!($t))),
                    other => Err(unexpected(other, "an integer")),
                }
            }
        }
    )+};
}

integer!(i32, i16, u8, u16, u32, u64, usize);
