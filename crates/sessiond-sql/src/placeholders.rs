//! SQLite's placeholders (`?1`, `?`, `:name`) rewritten as PostgreSQL's (`$1`), outside string
//! literals, quoted identifiers and comments. PostgreSQL's own `::type` casts pass through.

/// A statement's text for PostgreSQL, and the names of its named parameters in the order of
/// their numbers (empty when its parameters are positional).
#[derive(Debug, PartialEq, Eq)]
pub struct Translated {
    pub sql: String,
    pub names: Vec<String>,
}

pub fn translate(sql: &str) -> Translated {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut names: Vec<String> = Vec::new();
    // SQLite numbers a bare `?` one above the largest number used so far.
    let mut highest = 0usize;
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < bytes.len() {
                    if bytes[i] == q {
                        // A doubled quote is one quote character inside the literal.
                        if bytes.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b':' if bytes.get(i + 1) == Some(&b':') => i += 2,
            b'?' => {
                out.push_str(&sql[copied..i]);
                let start = i + 1;
                let mut end = start;
                while end < bytes.len() && bytes[end].is_ascii_digit() {
                    end += 1;
                }
                let n = if end > start {
                    sql[start..end].parse::<usize>().unwrap_or(0)
                } else {
                    highest + 1
                };
                highest = highest.max(n);
                out.push('$');
                out.push_str(&n.to_string());
                i = end;
                copied = i;
            }
            b':' if bytes
                .get(i + 1)
                .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_') =>
            {
                out.push_str(&sql[copied..i]);
                let mut end = i + 1;
                while end < bytes.len()
                    && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_')
                {
                    end += 1;
                }
                let name = &sql[i..end];
                let n = match names.iter().position(|n| n == name) {
                    Some(p) => p + 1,
                    None => {
                        names.push(name.to_owned());
                        names.len()
                    }
                };
                out.push('$');
                out.push_str(&n.to_string());
                i = end;
                copied = i;
            }
            b if (b.is_ascii_alphabetic() || b == b'_')
                && (i == 0
                    || !(bytes[i - 1].is_ascii_alphanumeric()
                        || bytes[i - 1] == b'_'
                        || bytes[i - 1] == b'.')) =>
            {
                let mut end = i;
                while end < bytes.len()
                    && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_')
                {
                    end += 1;
                }
                let word = &sql[i..end];
                let mut next = end;
                while next < bytes.len() && bytes[next].is_ascii_whitespace() {
                    next += 1;
                }
                let renamed =
                    if word.eq_ignore_ascii_case("max") || word.eq_ignore_ascii_case("min") {
                        // SQLite's scalar max(a, b) and min(a, b) (two or more arguments) are
                        // PostgreSQL's GREATEST and LEAST; with one argument they are aggregates.
                        (bytes.get(next) == Some(&b'(') && has_top_level_comma(&bytes[next..]))
                            .then(|| {
                                if word.eq_ignore_ascii_case("max") {
                                    "GREATEST"
                                } else {
                                    "LEAST"
                                }
                            })
                    } else if word.eq_ignore_ascii_case("is") && bytes.get(next) == Some(&b'?') {
                        // `x IS ?` compares with NULL as a value.
                        Some("IS NOT DISTINCT FROM")
                    } else {
                        None
                    };
                if let Some(name) = renamed {
                    out.push_str(&sql[copied..i]);
                    out.push_str(name);
                    copied = end;
                }
                i = end;
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied.min(sql.len())..]);
    Translated { sql: out, names }
}

/// Whether the parenthesised list that `b` starts with has a comma outside nested parentheses
/// and string literals.
fn has_top_level_comma(b: &[u8]) -> bool {
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return false;
                }
            }
            b',' if depth == 1 => return true,
            q @ (b'\'' | b'"') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_bare_and_named_placeholders_become_dollar_numbers() {
        assert_eq!(
            translate("SELECT a FROM t WHERE b = ?2 AND c = ?1").sql,
            "SELECT a FROM t WHERE b = $2 AND c = $1"
        );
        assert_eq!(
            translate("VALUES (?, ?, ?5, ?)").sql,
            "VALUES ($1, $2, $5, $6)"
        );
        let t = translate("WHERE ws = :ws AND (id = :id OR parent = :id) AND ws2 = :ws");
        assert_eq!(
            t.sql,
            "WHERE ws = $1 AND (id = $2 OR parent = $2) AND ws2 = $1"
        );
        assert_eq!(t.names, [":ws", ":id"]);
    }

    #[test]
    fn scalar_max_and_min_and_is_a_parameter_are_spelled_for_postgres() {
        assert_eq!(
            translate(
                "SET a = max(a, ?2), b = MIN(coalesce(b, 0), ?3), c = (SELECT max(x) FROM t)"
            )
            .sql,
            "SET a = GREATEST(a, $2), b = LEAST(coalesce(b, 0), $3), c = (SELECT max(x) FROM t)"
        );
        assert_eq!(
            translate("WHERE cwd IS ?2 AND x IS NULL").sql,
            "WHERE cwd IS NOT DISTINCT FROM $2 AND x IS NULL"
        );
        assert_eq!(
            translate("SELECT t.max, maximum(a, b)").sql,
            "SELECT t.max, maximum(a, b)"
        );
    }

    #[test]
    fn literals_identifiers_comments_and_casts_are_left_alone() {
        let sql = "SELECT '?1 :x', \"a?b\", 'it''s ?' , x::bigint -- ?3 :y\n FROM t /* ?4 */ WHERE y = ?1";
        assert_eq!(
            translate(sql).sql,
            "SELECT '?1 :x', \"a?b\", 'it''s ?' , x::bigint -- ?3 :y\n FROM t /* ?4 */ WHERE y = $1"
        );
        assert_eq!(
            translate("json_extract(body, '$.a')").sql,
            "json_extract(body, '$.a')"
        );
    }
}
