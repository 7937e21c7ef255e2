//! The `Message` a client sends, read as the text of a session's input: text parts as they
//! are, data parts as their JSON; file parts (bytes or URLs) are a content type sessiond's
//! agents do not take.

use serde_json::Value;

use super::error::{A2aError, A2aResult, CONTENT_TYPE_NOT_SUPPORTED};

/// What a `SendMessage` asks for.
#[derive(Debug)]
pub struct Incoming {
    pub text: String,
    /// The task (the session) it continues: `taskId`, else `contextId`.
    pub task_id: Option<String>,
}

fn opt_str<'a>(v: &'a Value, field: &str) -> A2aResult<Option<&'a str>> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(A2aError::invalid_params(format!(
            "message.{field}: must be a string"
        ))),
    }
}

/// Reads `params.message` (at most `max_chars` characters of text).
pub fn parse(message: Option<&Value>, max_chars: usize) -> A2aResult<Incoming> {
    let m = match message {
        Some(m @ Value::Object(_)) => m,
        Some(_) => return Err(A2aError::invalid_params("message: must be an object")),
        None => return Err(A2aError::invalid_params("message: required")),
    };
    if opt_str(m, "messageId")?.is_none() {
        return Err(A2aError::invalid_params("message.messageId: required"));
    }
    match opt_str(m, "role")? {
        None | Some("ROLE_USER") => {}
        Some(other) => {
            return Err(A2aError::invalid_params(format!(
                "message.role: {other} is not a client's role (ROLE_USER)"
            )));
        }
    }
    let task = opt_str(m, "taskId")?;
    let context = opt_str(m, "contextId")?;
    if let (Some(t), Some(c)) = (task, context)
        && t != c
    {
        return Err(A2aError::invalid_params(
            "message.contextId: a task's context is the task itself (its session)",
        ));
    }
    let parts = match m.get("parts") {
        Some(Value::Array(parts)) if !parts.is_empty() => parts,
        _ => {
            return Err(A2aError::invalid_params(
                "message.parts: at least one part is required",
            ));
        }
    };
    let mut texts = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        if let Some(t) = p.get("text") {
            let t = t.as_str().ok_or_else(|| {
                A2aError::invalid_params(format!("message.parts[{i}].text: must be a string"))
            })?;
            texts.push(t.to_owned());
        } else if let Some(d) = p.get("data") {
            texts.push(d.to_string());
        } else if p.get("raw").is_some() || p.get("url").is_some() {
            return Err(A2aError::new(
                CONTENT_TYPE_NOT_SUPPORTED,
                format!("message.parts[{i}]: file parts are not supported; send text or data"),
            ));
        } else {
            return Err(A2aError::invalid_params(format!(
                "message.parts[{i}]: a part has text, data, raw or url"
            )));
        }
    }
    let text = texts.join("\n");
    if text.trim().is_empty() {
        return Err(A2aError::invalid_params(
            "message.parts: the message has no text",
        ));
    }
    if text.chars().count() > max_chars {
        return Err(A2aError::invalid_params(format!(
            "message.parts: longer than {max_chars} characters"
        )));
    }
    Ok(Incoming {
        text,
        task_id: task.or(context).map(str::to_owned),
    })
}

/// `historyLength`: absent, or a count from 0.
pub fn history_length(params: &Value, field: &str) -> A2aResult<Option<usize>> {
    match params.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n <= i32::MAX as u64)
            .map(|n| Some(n as usize))
            .ok_or_else(|| A2aError::invalid_params(format!("{field}: a count from 0"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_and_data_parts_join() {
        let m = json!({"messageId": "m1", "role": "ROLE_USER", "parts": [
            {"text": "hello"}, {"data": {"a": 1}}
        ]});
        let got = parse(Some(&m), 100).unwrap();
        assert_eq!(got.text, "hello\n{\"a\":1}");
        assert_eq!(got.task_id, None);
    }

    #[test]
    fn file_parts_and_bad_shapes_are_refused() {
        let file = json!({"messageId": "m", "parts": [{"url": "https://x/y.png"}]});
        assert_eq!(
            parse(Some(&file), 100).unwrap_err().code,
            CONTENT_TYPE_NOT_SUPPORTED
        );
        for bad in [
            json!({"parts": [{"text": "x"}]}),
            json!({"messageId": "m", "parts": []}),
            json!({"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}),
            json!({"messageId": "m", "taskId": "a", "contextId": "b", "parts": [{"text": "x"}]}),
            json!({"messageId": "m", "parts": [{"text": 3}]}),
        ] {
            assert_eq!(
                parse(Some(&bad), 100).unwrap_err().code,
                super::super::error::INVALID_PARAMS,
                "{bad}"
            );
        }
        let long = json!({"messageId": "m", "parts": [{"text": "xxxx"}]});
        assert!(parse(Some(&long), 3).is_err());
    }
}
