//! The rules on a text a client hands a session, written once for every face.
//!
//! A prompt, an answer, a message's content or a tool's text argument is at most
//! `limits.max_prompt_chars` characters (`[limits]`, counted in characters, not bytes, so the
//! same text is accepted on every face whatever its script), and a prompt is not blank. Each
//! face names the field as its request does (`prompt`, `params/content`, `contents/2/content`),
//! so the message points at what to fix; the rule and its wording are here alone.

use std::fmt::Display;

use crate::error::{Error, Result};

/// Refuses `text` longer than `max_chars` characters (400, `invalid_request`).
pub fn check_length(field: impl Display, text: &str, max_chars: usize) -> Result<()> {
    // Counting stops at the first character past the limit: a huge text costs no more than one
    // at the limit.
    if text.chars().nth(max_chars).is_some() {
        return Err(Error::invalid(format!(
            "{field}: longer than {max_chars} characters"
        )));
    }
    Ok(())
}

/// Refuses a prompt that is blank or longer than `max_chars` characters.
pub fn check_prompt(field: impl Display, text: &str, max_chars: usize) -> Result<()> {
    if text.trim().is_empty() {
        return Err(Error::invalid(format!("{field}: must not be empty")));
    }
    check_length(field, text, max_chars)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_counts_characters_and_names_the_field() {
        assert!(check_length("prompt", "ééé", 3).is_ok());
        let e = check_length("prompt", "éééé", 3).unwrap_err();
        assert_eq!(e.to_string(), "prompt: longer than 3 characters");
        assert!(check_length(format_args!("contents/{}/content", 2), "", 0).is_ok());
    }

    #[test]
    fn a_prompt_is_not_blank() {
        let e = check_prompt("prompt", " \n\t", 10).unwrap_err();
        assert_eq!(e.to_string(), "prompt: must not be empty");
        assert!(matches!(
            check_prompt("params/content", "hello", 4),
            Err(Error::InvalidRequest(_))
        ));
        assert!(check_prompt("prompt", "hello", 5).is_ok());
    }
}
