//! U+0000 (NUL) in text. PostgreSQL's `text` cannot hold it and its `jsonb` refuses the `\u0000`
//! escape, so no text sessiond keeps holds it, on either backend alike: a request carrying it is
//! refused before anything is written (`api::body::refuse_nul`, and `%00` in a URI by the request
//! middleware), and the one place text from outside a request enters — what an engine (a model
//! server, an agent CLI) emits — has it replaced by U+FFFD when the event is stored
//! (`store::Tx::append`), so a stray NUL in a model's output can neither fail a turn's write nor
//! poison later reads of the timeline.

use serde_json::Value;

/// What a NUL becomes in text sessiond keeps: the replacement character.
pub const REPLACEMENT: char = '\u{FFFD}';

/// Whether the JSON text `json` holds a NUL in one of its strings, that is a `\u0000` escape (a
/// raw NUL is not JSON at all). An escape is one when an odd number of backslashes precede its
/// `u`: `\\u0000` is the six characters `\u0000`, not a NUL.
pub fn escaped_in(json: &[u8]) -> bool {
    const ESCAPE: &[u8] = b"u0000";
    let mut from = 0;
    while let Some(at) = json[from..]
        .windows(ESCAPE.len())
        .position(|w| w == ESCAPE)
        .map(|i| from + i)
    {
        let backslashes = json[..at].iter().rev().take_while(|&&b| b == b'\\').count();
        if backslashes % 2 == 1 {
            return true;
        }
        from = at + 1;
    }
    false
}

/// Replaces every NUL in the strings (and keys) of `value` by [`REPLACEMENT`].
pub fn replace_in(value: &mut Value) {
    match value {
        Value::String(s) => replace_in_str(s),
        Value::Array(items) => items.iter_mut().for_each(replace_in),
        Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                let entries = std::mem::take(map);
                for (mut k, v) in entries {
                    replace_in_str(&mut k);
                    map.insert(k, v);
                }
            }
            map.values_mut().for_each(replace_in);
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

fn replace_in_str(s: &mut String) {
    if s.contains('\0') {
        *s = s.replace('\0', &REPLACEMENT.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_escape_is_found_only_where_it_means_nul() {
        let with = serde_json::to_string(&json!({"prompt": "a\u{0}b"})).unwrap();
        assert!(escaped_in(with.as_bytes()), "{with}");
        assert!(
            escaped_in(br#"{"a":"\\\u0000"}"#),
            "an escaped backslash, then a NUL"
        );
        assert!(
            !escaped_in(br#"{"a":"\\u0000"}"#),
            "the text \\u0000 is no NUL"
        );
        assert!(!escaped_in(br#"{"a":"\\\\u0000"}"#));
        assert!(!escaped_in(br#"{"a":"u0000","b":"\u0001"}"#));
        assert!(!escaped_in(b""));
    }

    #[test]
    fn nuls_are_replaced_everywhere_and_nothing_else_changes() {
        let mut v = json!({"a\u{0}": ["x\u{0}y", {"n": 1, "t": "\u{0}"}], "k": "plain"});
        replace_in(&mut v);
        assert_eq!(
            v,
            json!({"a\u{FFFD}": ["x\u{FFFD}y", {"n": 1, "t": "\u{FFFD}"}], "k": "plain"})
        );
        assert!(!escaped_in(serde_json::to_string(&v).unwrap().as_bytes()));
    }
}
