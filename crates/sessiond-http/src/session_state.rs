//! The Sessions API's state extension: `include=state` adds each session's `state` (and
//! `stateReason`, and on the detail `inputClosed`) to the list and the detail, and `state=…`
//! filters the list by state (`attention` stands for asking, failed and over budget). Without
//! either the responses are the seed's, field for field.

use serde_json::{Value, json};

use super::body::Query;
use sessiond_core::error::{Error, Result};
use sessiond_core::sessions::state::{self, Standing, State};
use sessiond_core::store::intake::Closure;

/// What a list or detail request asks of the state extension.
#[derive(Debug, Default)]
pub struct StateQuery {
    /// Add `state` and `stateReason` to each session.
    pub include: bool,
    /// Only sessions in one of these states.
    pub filter: Option<Vec<State>>,
}

/// Parses `include` (only `state` is known) and `state`.
pub fn state_query(q: &Query) -> Result<StateQuery> {
    let include = match q.get("include") {
        None => false,
        Some("state") => true,
        Some(_) => return Err(Error::invalid("include: must be state")),
    };
    let filter = match q.get("state") {
        None => None,
        Some(v) => Some(state::parse_filter(v).ok_or_else(|| {
            Error::invalid(format!(
                "state: a comma-separated list of {} or attention",
                State::ALL.map(State::as_str).join(", ")
            ))
        })?),
    };
    Ok(StateQuery {
        include: include || filter.is_some(),
        filter,
    })
}

/// Adds `state` and `stateReason` (when there is one) to a summary; with `detail`, also
/// `inputClosed` `{code, message, successorId?}` when the session takes no input (the successor
/// of a handoff).
pub fn put_state(session: &mut Value, s: &Standing, detail: bool) {
    let Some(obj) = session.as_object_mut() else {
        return;
    };
    obj.insert("state".into(), json!(s.state.as_str()));
    if let Some(reason) = &s.reason {
        obj.insert("stateReason".into(), json!(reason));
    }
    if detail && let Some(c) = &s.input_closed {
        let mut closed = json!({"code": c.code(), "message": state::closed_words(c)});
        if let Closure::HandedOff { successor } = c {
            closed["successorId"] = json!(successor);
        }
        obj.insert("inputClosed".into(), closed);
    }
}

/// The query parameters of the extension in `/openapi.json`, for the operations that take them
/// (`listSessions`, `getSession`).
pub fn openapi_params(op_id: &str) -> Vec<Value> {
    let states: Vec<&str> = State::ALL.map(State::as_str).into_iter().collect();
    let include = json!({
        "name": "include", "in": "query", "required": false,
        "schema": {"enum": ["state"]},
        "description": "`state` adds sessiond's fields to each session (not in the seed's closed \
            objects): `state` (one of the `state` filter's states), `stateReason` when there is \
            one, and on the detail `inputClosed` {code, message} when the session takes no input",
    });
    match op_id {
        "listSessions" => vec![
            include,
            json!({
                "name": "state", "in": "query", "required": false,
                "schema": {"type": "string", "minLength": 1},
                "description": format!(
                    "Only sessions in these states (comma-separated; implies include=state): {}; \
                     `attention` stands for asking, failed and over_budget. A request reads at \
                     most {} sessions, so a page may come back short with a nextCursor",
                    states.join(", "),
                    state::STATE_SCAN_MAX
                ),
            }),
        ],
        "getSession" => vec![include],
        _ => Vec::new(),
    }
}

/// The seed's response schema of `op_id` as `/openapi.json` describes it: for `listSessions` and
/// `getSession`, the closed objects widened by exactly the optional fields `include=state` adds,
/// so that a client (or a fuzzer) that asks for them finds them described.
pub fn widen_response(op_id: &str, mut schema: Value) -> Value {
    let states: Vec<&str> = State::ALL.map(State::as_str).into_iter().collect();
    let fields = |detail: bool| {
        let mut f = json!({
            "state": {"enum": states, "description": "sessiond's extension (include=state)"},
            "stateReason": {"type": "string", "description": "sessiond's extension (include=state)"},
        });
        if detail {
            f["inputClosed"] = json!({
                "type": "object", "required": ["code", "message"], "additionalProperties": false,
                "properties": {
                    "code": {"enum": ["task_closed", "session_closed", "budget_hit"]},
                    "message": {"type": "string"},
                    "successorId": {"type": "string"},
                },
                "description": "sessiond's extension (include=state): why the session takes no input",
            });
        }
        f
    };
    let (target, detail) = match op_id {
        "listSessions" => (
            schema.pointer_mut("/properties/sessions/items/properties"),
            false,
        ),
        "getSession" => (schema.pointer_mut("/properties"), true),
        _ => (None, false),
    };
    if let (Some(Value::Object(props)), Value::Object(add)) = (target, fields(detail)) {
        props.extend(add);
    }
    schema
}
