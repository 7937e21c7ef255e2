//! What a session title written by an engine looks like: models ignore "at most six words" and
//! wrap their answer in quotes, markdown or a `Title:` label, so their reply is cleaned up before it
//! becomes the title: its first line, trimmed of decoration, cut at a word boundary to at most
//! [`MAX_CHARS`] characters, without trailing punctuation.

/// The longest automatic title, in characters.
pub const MAX_CHARS: usize = 60;

/// Characters that decorate a title rather than belong to it, at either end.
fn decoration(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '"' | '\'' | '`' | '*' | '#' | '_' | '>' | '“' | '”' | '‘' | '’'
        )
}

/// Punctuation a title does not end with.
fn trailing(c: char) -> bool {
    decoration(c) || matches!(c, '.' | ',' | ';' | ':' | '!' | '?' | '…' | '-' | '–' | '—')
}

/// The title in a model's reply, or `None` when nothing usable is left (the session keeps its
/// excerpt title).
pub fn clean(reply: &str) -> Option<String> {
    let line = reply
        .lines()
        .map(|l| l.trim_matches(decoration))
        .find(|l| !l.is_empty())?;
    let line = match line.split_once(':') {
        Some((label, rest)) if label.trim().eq_ignore_ascii_case("title") => {
            rest.trim_matches(decoration)
        }
        _ => line,
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut title = String::new();
    for word in words {
        let extra = usize::from(!title.is_empty()) + word.chars().count();
        if title.chars().count() + extra > MAX_CHARS {
            if title.is_empty() {
                // One word longer than a title: cut it, since nothing else is left.
                title = word.chars().take(MAX_CHARS).collect();
            }
            break;
        }
        if !title.is_empty() {
            title.push(' ');
        }
        title.push_str(word);
    }
    let title = title
        .trim_end_matches(trailing)
        .trim_start_matches(decoration);
    (!title.is_empty()).then(|| title.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_without_decoration_or_trailing_punctuation() {
        assert_eq!(
            clean("\"Fixing the build.\"").as_deref(),
            Some("Fixing the build")
        );
        assert_eq!(
            clean("\n\n**Title:** Rust lifetimes!\nMore text").as_deref(),
            Some("Rust lifetimes")
        );
        assert_eq!(clean("# Weekly plan —").as_deref(), Some("Weekly plan"));
        assert_eq!(clean("“Quoted”").as_deref(), Some("Quoted"));
        assert_eq!(clean("a   b\tc").as_deref(), Some("a b c"));
    }

    #[test]
    fn long_titles_are_cut_at_a_word_boundary() {
        let long = "This model did not listen to the instruction about six words and kept going on";
        let t = clean(long).unwrap();
        assert!(t.chars().count() <= MAX_CHARS, "{t}");
        assert!(long.starts_with(&t));
        assert!(long[t.len()..].starts_with(' '), "cut between words: {t:?}");
        assert_eq!(
            t,
            "This model did not listen to the instruction about six words"
        );
        // A cut that lands after punctuation drops it.
        let t =
            clean("Planning the migration, step by step, with the whole team and the stakeholders")
                .unwrap();
        assert!(!t.ends_with(','), "{t}");
        // A single huge word is cut at the limit.
        assert_eq!(clean(&"x".repeat(100)).unwrap().chars().count(), MAX_CHARS);
    }

    #[test]
    fn nothing_usable_is_none() {
        assert_eq!(clean(""), None);
        assert_eq!(clean("  \n\t\n"), None);
        assert_eq!(clean("\"...\""), None);
        assert_eq!(clean("Title:"), None);
    }
}
