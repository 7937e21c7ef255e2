//! Page-numbered lists of the agent platform's records: the order (`Direction`, `SortKey`), the
//! page, JSON containment filters on both backends, and the `List` query builder the record
//! stores share. It names no record type, so every store module that lists can use it.

use serde_json::{Map, Value};

use super::sql::{Db, Dialect, Value as SqlValue, params_from_iter};
use crate::error::{Error, Result};

/// Ascending or descending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Asc,
    Desc,
}

impl Direction {
    /// The order, with NULL the smallest value on both backends (SQLite's rule; PostgreSQL's
    /// default puts NULL last when ascending).
    pub(super) fn sql(self) -> &'static str {
        match self {
            Direction::Asc => "ASC NULLS FIRST",
            Direction::Desc => "DESC NULLS LAST",
        }
    }
}

/// The field a list is ordered by (the contract's `order_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    CreatedAt,
    UpdatedAt,
    Name,
    Status,
    PromotedAt,
    StartTime,
    EndTime,
    /// A deployment history row's time of change.
    DeploymentTimestamp,
    /// A deployment history row's deployment's creation.
    BuildTimestamp,
}

impl SortKey {
    /// The name the contract gives it.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::CreatedAt => "created_at",
            SortKey::UpdatedAt => "updated_at",
            SortKey::Name => "name",
            SortKey::Status => "status",
            SortKey::PromotedAt => "promoted_at",
            SortKey::StartTime => "start_time",
            SortKey::EndTime => "end_time",
            SortKey::DeploymentTimestamp => "deployment_timestamp",
            SortKey::BuildTimestamp => "build_timestamp",
        }
    }
}

/// A page of a page-numbered list: `limit` rows after skipping `offset`.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    pub limit: u32,
    pub offset: u64,
}

/// SQL conditions that a JSON column contains `filter` (JSONB containment, as the wire contract
/// describes it): every key of `filter` is present under the path `base` with a value that
/// contains the filter's value — objects recursively, other values by equality. Paths and values
/// are bound parameters (in the order of the conditions' `?`), never SQL text.
pub(super) fn containment(
    dialect: Dialect,
    column: &str,
    base: &[String],
    filter: &Map<String, Value>,
    args: &mut Vec<SqlValue>,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for (key, value) in filter {
        if key.contains('"') || key.contains('\\') {
            return Err(Error::invalid(format!(
                "metadata filter: key {key:?} may not contain quotes or backslashes"
            )));
        }
        let mut path = base.to_vec();
        path.push(key.clone());
        if let Value::Object(inner) = value
            && !inner.is_empty()
        {
            out.extend(containment(dialect, column, &path, inner, args)?);
            continue;
        }
        out.push(match dialect {
            Dialect::Sqlite => sqlite_leaf(column, &path, value, args),
            Dialect::Postgres => postgres_leaf(column, &path, value, args),
        });
    }
    Ok(out)
}

/// One leaf of [`containment`] with SQLite's JSON functions (the path as `$."a"."b"`).
fn sqlite_leaf(column: &str, path: &[String], value: &Value, args: &mut Vec<SqlValue>) -> String {
    let path = std::iter::once("$".to_owned())
        .chain(path.iter().map(|k| format!("\"{k}\"")))
        .collect::<Vec<_>>()
        .join(".");
    let path = SqlValue::Text(path);
    let of_type = |t: &str| format!("json_type({column}, ?) = '{t}'");
    match value {
        Value::Object(_) => {
            args.push(path);
            of_type("object")
        }
        Value::Null => {
            args.push(path);
            of_type("null")
        }
        Value::Bool(b) => {
            args.push(path);
            of_type(if *b { "true" } else { "false" })
        }
        Value::String(s) => {
            args.extend([path.clone(), path, SqlValue::Text(s.clone())]);
            format!("({} AND json_extract({column}, ?) = ?)", of_type("text"))
        }
        Value::Number(n) => {
            args.extend([path.clone(), path, number(n)]);
            format!(
                "(json_type({column}, ?) IN ('integer', 'real') AND json_extract({column}, ?) = ?)"
            )
        }
        Value::Array(_) => {
            args.extend([path, SqlValue::Text(value.to_string())]);
            format!("json_extract({column}, ?) = json(?)")
        }
    }
}

/// One leaf of [`containment`] with PostgreSQL's `jsonb` (the path as a `text[]`, `{"a","b"}`).
fn postgres_leaf(column: &str, path: &[String], value: &Value, args: &mut Vec<SqlValue>) -> String {
    let path = format!(
        "{{{}}}",
        path.iter()
            .map(|k| format!("\"{k}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    args.push(SqlValue::Text(path));
    let at = format!("({column}::jsonb #> (?::text)::text[])");
    match value {
        Value::Object(_) => format!("jsonb_typeof({at}) = 'object'"),
        Value::Null => format!("jsonb_typeof({at}) = 'null'"),
        Value::Bool(b) => format!("{at} = '{b}'::jsonb"),
        Value::String(s) => {
            args.push(SqlValue::Text(s.clone()));
            format!("{at} = to_jsonb(?::text)")
        }
        Value::Number(n) => {
            args.push(number(n));
            format!("{at} = to_jsonb(?::float8)")
        }
        Value::Array(_) => {
            args.push(SqlValue::Text(value.to_string()));
            format!("{at} = ?::jsonb")
        }
    }
}

fn number(n: &serde_json::Number) -> SqlValue {
    match n.as_i64() {
        Some(i) => SqlValue::Integer(i),
        None => SqlValue::Real(n.as_f64().unwrap_or(0.0)),
    }
}

pub(super) fn push_page(sql: &mut String, args: &mut Vec<SqlValue>, page: Page) {
    sql.push_str(" LIMIT ? OFFSET ?");
    args.push(SqlValue::Integer(i64::from(page.limit)));
    args.push(SqlValue::Integer(page.offset.min(i64::MAX as u64) as i64));
}

/// A page-numbered list: a SELECT scoped by its first condition, narrowed by filters, then
/// ordered (ties broken by a unique column) and cut to one page.
pub(super) struct List {
    sql: String,
    args: Vec<SqlValue>,
}

impl List {
    pub(super) fn new(select: &str, scope: &str, value: &str) -> List {
        List {
            sql: format!("{select} WHERE {scope} = ?"),
            args: vec![SqlValue::Text(value.to_owned())],
        }
    }

    /// `AND <cond>` (one `?`) when the filter has a value.
    pub(super) fn filter(&mut self, cond: &str, value: Option<&str>) {
        if let Some(v) = value {
            self.sql.push_str(" AND ");
            self.sql.push_str(cond);
            self.args.push(SqlValue::Text(v.to_owned()));
        }
    }

    /// Containment conditions on a JSON column.
    pub(super) fn contains(
        &mut self,
        dialect: Dialect,
        column: &str,
        base: &[&str],
        filter: Option<&Map<String, Value>>,
    ) -> Result<()> {
        if let Some(f) = filter {
            let base: Vec<String> = base.iter().map(|k| (*k).to_owned()).collect();
            for cond in containment(dialect, column, &base, f, &mut self.args)? {
                self.sql.push_str(" AND ");
                self.sql.push_str(&cond);
            }
        }
        Ok(())
    }

    pub(super) fn run<T>(
        mut self,
        conn: &Db,
        order: &str,
        tie: &str,
        direction: Direction,
        page: Page,
        from_row: fn(&super::sql::Row<'_>) -> super::sql::Result<T>,
    ) -> Result<Vec<T>> {
        let dir = direction.sql();
        self.sql
            .push_str(&format!(" ORDER BY {order} {dir}, {tie} {dir}"));
        push_page(&mut self.sql, &mut self.args, page);
        let mut stmt = conn.prepare_cached(&self.sql)?;
        let rows = stmt.query_map(params_from_iter(self.args), from_row)?;
        Ok(rows.collect::<super::sql::Result<_>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containment_builds_one_condition_per_leaf() {
        let filter = json!({"a": "x", "b": {"c": 1, "d": true}, "e": [1, 2]});
        for d in [Dialect::Sqlite, Dialect::Postgres] {
            let mut args = Vec::new();
            let conds = containment(d, "m", &[], filter.as_object().unwrap(), &mut args).unwrap();
            assert_eq!(conds.len(), 4);
            let marks: usize = conds.iter().map(|c| c.matches('?').count()).sum();
            assert_eq!(marks, args.len(), "{d:?}: one argument per placeholder");
            let path = match d {
                Dialect::Sqlite => "$.\"b\".\"c\"",
                Dialect::Postgres => "{\"b\",\"c\"}",
            };
            assert!(
                args.contains(&SqlValue::Text(path.into())),
                "{d:?}: {args:?}"
            );
            // Keys reach the database as bound values only.
            let sneaky = json!({"x') OR 1=1 --": 1});
            let mut args = Vec::new();
            let conds = containment(d, "m", &[], sneaky.as_object().unwrap(), &mut args).unwrap();
            assert!(!conds[0].contains("OR 1=1"), "{}", conds[0]);
            let bad = json!({"a\"": 1});
            assert!(containment(d, "m", &[], bad.as_object().unwrap(), &mut Vec::new()).is_err());
        }
    }
}
