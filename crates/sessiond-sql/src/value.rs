//! Values as both backends see them: SQLite's five storage classes. A parameter is one of them
//! ([`ToSql`]); a column is read from one of them ([`FromSql`]).

use std::fmt;
use std::sync::Arc;

/// A borrowed value: a parameter on its way in, a column on its way out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    Null,
    Integer(i64),
    Real(f64),
    /// UTF-8 text.
    Text(&'a [u8]),
    Blob(&'a [u8]),
}

/// An owned value, for parameter lists built at run time.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Value {
    pub(crate) fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Null => ValueRef::Null,
            Value::Integer(i) => ValueRef::Integer(*i),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }
    }
}

impl ValueRef<'_> {
    pub fn as_str(&self) -> FromSqlResult<&str> {
        match self {
            ValueRef::Text(t) => std::str::from_utf8(t).map_err(|e| FromSqlError::Other(e.into())),
            _ => Err(FromSqlError::InvalidType),
        }
    }

    pub fn as_i64(&self) -> FromSqlResult<i64> {
        match self {
            ValueRef::Integer(i) => Ok(*i),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

impl<'a> From<rusqlite::types::ValueRef<'a>> for ValueRef<'a> {
    fn from(v: rusqlite::types::ValueRef<'a>) -> Self {
        use rusqlite::types::ValueRef as R;
        match v {
            R::Null => ValueRef::Null,
            R::Integer(i) => ValueRef::Integer(i),
            R::Real(f) => ValueRef::Real(f),
            R::Text(t) => ValueRef::Text(t),
            R::Blob(b) => ValueRef::Blob(b),
        }
    }
}

/// A parameter's value, borrowed or made for the occasion.
pub enum ToSqlOutput<'a> {
    Borrowed(ValueRef<'a>),
    Owned(Value),
}

impl ToSqlOutput<'_> {
    pub fn value(&self) -> ValueRef<'_> {
        match self {
            ToSqlOutput::Borrowed(v) => *v,
            ToSqlOutput::Owned(v) => v.as_ref(),
        }
    }

    /// The value, owned (to keep it past the borrow it was made from).
    pub fn into_owned(self) -> Value {
        match self {
            ToSqlOutput::Owned(v) => v,
            ToSqlOutput::Borrowed(v) => match v {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(i) => Value::Integer(i),
                ValueRef::Real(f) => Value::Real(f),
                // Text reaches a parameter from a `str` or a `String`: it is UTF-8.
                ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => Value::Blob(b.to_vec()),
            },
        }
    }
}

/// What can be a statement's parameter.
pub trait ToSql {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError>;
}

impl<T: ToSql + ?Sized> ToSql for &T {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        (**self).to_sql()
    }
}

impl<T: ToSql + ?Sized> ToSql for Box<T> {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        (**self).to_sql()
    }
}

impl<T: ToSql + ?Sized> ToSql for Arc<T> {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        (**self).to_sql()
    }
}

impl<T: ToSql> ToSql for Option<T> {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        match self {
            Some(v) => v.to_sql(),
            None => Ok(ToSqlOutput::Borrowed(ValueRef::Null)),
        }
    }
}

impl ToSql for Value {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        Ok(ToSqlOutput::Borrowed(self.as_ref()))
    }
}

impl ToSql for ValueRef<'_> {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        Ok(ToSqlOutput::Borrowed(*self))
    }
}

impl ToSql for str {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Text(self.as_bytes())))
    }
}

impl ToSql for String {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        self.as_str().to_sql()
    }
}

impl ToSql for [u8] {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Blob(self)))
    }
}

impl ToSql for Vec<u8> {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        self.as_slice().to_sql()
    }
}

impl ToSql for bool {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Integer(i64::from(*self))))
    }
}

impl ToSql for f64 {
    fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
        Ok(ToSqlOutput::Borrowed(ValueRef::Real(*self)))
    }
}

macro_rules! integer_to_sql {
    ($($t:ty)*) => {$(
        impl ToSql for $t {
            fn to_sql(&self) -> Result<ToSqlOutput<'_>, FromSqlError> {
                let i = i64::try_from(*self).map_err(|_| FromSqlError::OutOfRange(i64::MAX))?;
                Ok(ToSqlOutput::Borrowed(ValueRef::Integer(i)))
            }
        }
    )*};
}

integer_to_sql!(i8 i16 i32 i64 u8 u16 u32 u64 usize isize);

/// Why a value could not be read as the type asked for.
#[derive(Debug)]
pub enum FromSqlError {
    InvalidType,
    OutOfRange(i64),
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl fmt::Display for FromSqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FromSqlError::InvalidType => f.write_str("invalid type"),
            FromSqlError::OutOfRange(i) => write!(f, "value {i} out of range"),
            FromSqlError::Other(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for FromSqlError {}

pub type FromSqlResult<T> = Result<T, FromSqlError>;

/// What a column can be read as.
pub trait FromSql: Sized {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self>;
}

impl FromSql for i64 {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value.as_i64()
    }
}

macro_rules! integer_from_sql {
    ($($t:ty)*) => {$(
        impl FromSql for $t {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                let i = value.as_i64()?;
                <$t>::try_from(i).map_err(|_| FromSqlError::OutOfRange(i))
            }
        }
    )*};
}

integer_from_sql!(i8 i16 i32 u8 u16 u32 u64 usize isize);

impl FromSql for bool {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        Ok(value.as_i64()? != 0)
    }
}

impl FromSql for f64 {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Real(f) => Ok(f),
            ValueRef::Integer(i) => Ok(i as f64),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

impl FromSql for String {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value.as_str().map(str::to_owned)
    }
}

impl FromSql for Box<str> {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value.as_str().map(Box::from)
    }
}

impl FromSql for Arc<str> {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value.as_str().map(Arc::from)
    }
}

impl FromSql for Vec<u8> {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Blob(b) | ValueRef::Text(b) => Ok(b.to_vec()),
            _ => Err(FromSqlError::InvalidType),
        }
    }
}

impl FromSql for Value {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        Ok(match value {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Integer(i),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(_) => Value::Text(value.as_str()?.to_owned()),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        })
    }
}

impl<T: FromSql> FromSql for Option<T> {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        match value {
            ValueRef::Null => Ok(None),
            v => T::column_result(v).map(Some),
        }
    }
}

/// A parameter handed to rusqlite.
pub(super) struct Sqlite<'a>(pub &'a dyn ToSql);

impl rusqlite::ToSql for Sqlite<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput as O, Value as V, ValueRef as R};
        let inner: &dyn ToSql = self.0;
        let out = inner
            .to_sql()
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        Ok(match out {
            ToSqlOutput::Borrowed(v) => O::Borrowed(match v {
                ValueRef::Null => R::Null,
                ValueRef::Integer(i) => R::Integer(i),
                ValueRef::Real(f) => R::Real(f),
                ValueRef::Text(t) => R::Text(t),
                ValueRef::Blob(b) => R::Blob(b),
            }),
            ToSqlOutput::Owned(v) => O::Owned(match v {
                Value::Null => V::Null,
                Value::Integer(i) => V::Integer(i),
                Value::Real(f) => V::Real(f),
                Value::Text(t) => V::Text(t),
                Value::Blob(b) => V::Blob(b),
            }),
        })
    }
}

/// `FromSql` for enums a row stores as their names, read back with `<T>::parse(&str) ->
/// Option<T>`: a stored name the type does not know fails the read (the row is refused, not
/// guessed at). `$what` names the kind in that error.
#[macro_export]
macro_rules! from_sql_by_name {
    ($($ty:ty: $what:literal),* $(,)?) => {$(
        impl $crate::FromSql for $ty {
            fn column_result(value: $crate::ValueRef<'_>) -> $crate::FromSqlResult<Self> {
                let name = value.as_str()?;
                <$ty>::parse(name).ok_or_else(|| {
                    $crate::FromSqlError::Other(format!("unknown {} {name:?}", $what).into())
                })
            }
        }
    )*};
}

/// [`from_sql_by_name!`], and `ToSql` writing the name (`as_str`).
#[macro_export]
macro_rules! stored_by_name {
    ($($ty:ty: $what:literal),* $(,)?) => {$(
        $crate::from_sql_by_name!($ty: $what);

        impl $crate::ToSql for $ty {
            fn to_sql(&self) -> std::result::Result<$crate::ToSqlOutput<'_>, $crate::FromSqlError> {
                $crate::ToSql::to_sql(self.as_str())
            }
        }
    )*};
}

// The model's enums rows store (the model cannot name this crate, so they are stored from here).
crate::stored_by_name!(
    sessiond_model::timeline::Tier: "tier",
    sessiond_model::timeline::Behavior: "behavior",
);
