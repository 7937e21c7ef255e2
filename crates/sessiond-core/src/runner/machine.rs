//! Jobs: sessions driven by a state machine (`mode` on create; R10, R12, R14, R15).
//!
//! Definition format (the seed leaves `states[]` open; this is what sessiond accepts):
//!
//! ```json
//! { "name": "release", "prompt": "Ship the release",
//!   "states": [ { "name": "research", "prompt": "Collect the changes", "kind": "agent" },
//!               { "name": "draft", "prompt": "Write the notes", "next": "review" },
//!               { "name": "review", "prompt": "Check the notes" } ] }
//! ```
//!
//! Every state needs a unique non-empty `name` and a non-empty `prompt`; `kind` is an optional
//! label shown on the ordered path; `next` names the state that follows (default: the next one in
//! the list; the last state ends the machine). The runner runs one turn per state with the state's
//! prompt; the create prompt is the machine's input. A completed turn advances the machine, a
//! failed one ends it `failed`, an interrupted one ends it `interrupted`; `ask` and `sleep` pause
//! it (`waiting`, `sleeping`) until the answer or the wake continues the same state.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::error::{Error, Result};
use crate::store::QueueKind;
use crate::store::claims::{MachineMove, MachineRules, Machines, StoredMachine};

const MAX_STATES: usize = 64;

/// The seed's closed `MachineDefinition`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Definition {
    pub name: String,
    pub prompt: String,
    pub states: Vec<Map<String, Value>>,
}

/// One state as sessiond reads it.
#[derive(Debug, Clone)]
pub struct StateDef {
    pub name: String,
    pub prompt: String,
    pub kind: Option<String>,
    pub next: Option<String>,
}

impl Definition {
    fn steps(&self) -> Vec<StateDef> {
        self.states
            .iter()
            .map(|s| StateDef {
                name: s
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                prompt: s
                    .get("prompt")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                kind: s.get("kind").and_then(Value::as_str).map(str::to_owned),
                next: s.get("next").and_then(Value::as_str).map(str::to_owned),
            })
            .collect()
    }

    fn index_of(&self, name: &str) -> Option<usize> {
        self.steps().iter().position(|s| s.name == name)
    }

    /// The state after `name`: its `next`, else the following one in the list.
    fn successor(&self, name: &str) -> Option<String> {
        let steps = self.steps();
        let i = steps.iter().position(|s| s.name == name)?;
        match &steps[i].next {
            Some(next) if !next.is_empty() => Some(next.clone()),
            Some(_) => None,
            None => steps.get(i + 1).map(|s| s.name.clone()),
        }
    }
}

/// Checks a `mode` body and returns the definition, or a 400 naming the field.
pub fn validate(mode: &Value) -> Result<Definition> {
    let bad = |field: &str, why: &str| Error::invalid(format!("mode/{field}: {why}"));
    let def: Definition = serde_json::from_value(json!({
        "name": mode.get("name"),
        "prompt": mode.get("prompt"),
        "states": mode.get("states"),
    }))
    .map_err(|_| Error::invalid("mode: needs name, prompt and states"))?;
    if def.name.trim().is_empty() {
        return Err(bad("name", "must not be empty"));
    }
    if def.states.is_empty() || def.states.len() > MAX_STATES {
        return Err(bad(
            "states",
            &format!("must hold 1 to {MAX_STATES} states"),
        ));
    }
    let steps = def.steps();
    for (i, (raw, step)) in def.states.iter().zip(&steps).enumerate() {
        if !matches!(raw.get("name"), Some(Value::String(n)) if !n.trim().is_empty()) {
            return Err(bad(
                &format!("states/{i}/name"),
                "must be a non-empty string",
            ));
        }
        if !matches!(raw.get("prompt"), Some(Value::String(p)) if !p.trim().is_empty()) {
            return Err(bad(
                &format!("states/{i}/prompt"),
                "must be a non-empty string",
            ));
        }
        for key in ["kind", "next"] {
            if raw.get(key).is_some_and(|v| !v.is_string()) {
                return Err(bad(&format!("states/{i}/{key}"), "must be a string"));
            }
        }
        if steps[..i].iter().any(|s| s.name == step.name) {
            return Err(bad(
                &format!("states/{i}/name"),
                "duplicates an earlier state",
            ));
        }
    }
    for (i, step) in steps.iter().enumerate() {
        if let Some(next) = &step.next
            && !next.is_empty()
            && !steps.iter().any(|s| &s.name == next)
        {
            return Err(bad(
                &format!("states/{i}/next"),
                "names no state of this machine",
            ));
        }
    }
    Ok(def)
}

/// The seed's `StateMachineState`, as stored in `sessions.machine_state`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineState {
    pub definition: Definition,
    pub prompt: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_input: Option<Map<String, Value>>,
    pub progress: Progress,
    pub history: Vec<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminal: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminal_acknowledged: Option<bool>,
    pub created_at: f64,
    pub updated_at: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Progress {
    pub states: BTreeMap<String, Map<String, Value>>,
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

impl MachineState {
    pub fn new(def: Definition, input_prompt: &str, now: i64) -> MachineState {
        let first = def.steps().first().map(|s| s.name.clone());
        MachineState {
            prompt: def.prompt.clone(),
            definition: def,
            current_state: first,
            current_input: Some(obj(json!({ "prompt": input_prompt }))),
            progress: Progress::default(),
            history: Vec::new(),
            terminal: None,
            terminal_acknowledged: None,
            created_at: now as f64,
            updated_at: now as f64,
        }
    }

    pub fn is_finished(&self) -> bool {
        self.terminal.is_some()
    }

    /// The prompt of the state to run now.
    pub fn current_prompt(&self) -> Option<String> {
        let name = self.current_state.as_deref()?;
        self.definition
            .steps()
            .into_iter()
            .find(|s| s.name == name)
            .map(|s| s.prompt)
    }

    fn record(&mut self, state: &str, status: &str, result: Option<&str>, now: i64) {
        let mut entry = obj(json!({ "status": status, "updatedAt": now }));
        if let Some(r) = result {
            entry.insert("result".into(), json!(r));
        }
        self.progress.states.insert(state.to_owned(), entry);
        self.history
            .push(obj(json!({ "state": state, "status": status, "at": now })));
        self.updated_at = now as f64;
    }

    fn finish(&mut self, outcome: &str, now: i64) {
        self.terminal = Some(obj(json!({ "status": outcome, "at": now })));
        self.terminal_acknowledged = Some(false);
        self.updated_at = now as f64;
    }

    /// Marks the current state running (a turn took it).
    pub fn start_step(&mut self, now: i64) {
        if let Some(name) = self.current_state.clone() {
            self.progress
                .states
                .entry(name)
                .or_default()
                .insert("status".into(), json!("running"));
            self.updated_at = now as f64;
        }
    }

    /// Advances after the turn of the current state ended. Returns the next state's prompt when
    /// the machine goes on.
    pub fn advance(&mut self, end: StepEnd, result: Option<&str>, now: i64) -> Option<String> {
        let current = self.current_state.clone()?;
        match end {
            StepEnd::Completed => {
                self.record(&current, "completed", result, now);
                match self.definition.successor(&current) {
                    Some(next) => {
                        self.current_state = Some(next);
                        self.current_prompt()
                    }
                    None => {
                        self.finish("completed", now);
                        None
                    }
                }
            }
            StepEnd::Failed => {
                self.record(&current, "failed", result, now);
                self.finish("failed", now);
                None
            }
            StepEnd::Interrupted => {
                self.record(&current, "interrupted", None, now);
                self.finish("interrupted", now);
                None
            }
            StepEnd::Paused => {
                self.updated_at = now as f64;
                None
            }
        }
    }

    /// The compact `MachineProjection` for list items and the detail (R14, R15).
    pub fn projection(&self, activity: &str, next_wake_at: Option<i64>) -> Value {
        let steps = self.definition.steps();
        let visited: Vec<&str> = self
            .history
            .iter()
            .filter_map(|h| h.get("state").and_then(Value::as_str))
            .collect();
        let current = if self.is_finished() {
            None
        } else {
            self.current_state.as_deref()
        };
        let mut path: Vec<Value> = steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let phase = if Some(s.name.as_str()) == current {
                    "current"
                } else if visited.contains(&s.name.as_str()) {
                    "past"
                } else {
                    "future"
                };
                let mut item = json!({ "key": s.name, "index": i, "name": s.name, "phase": phase });
                if let Some(kind) = &s.kind {
                    item["kind"] = json!(kind);
                }
                item
            })
            .collect();
        let outcome = self
            .terminal
            .as_ref()
            .and_then(|t| t.get("status"))
            .and_then(Value::as_str);
        if let Some(outcome) = outcome {
            let mut item = json!({ "key": "outcome", "index": steps.len(), "name": outcome, "phase": "outcome" });
            if matches!(outcome, "completed" | "failed" | "cancelled" | "error") {
                item["terminalStatus"] = json!(outcome);
            }
            path.push(item);
        }
        let completed = self
            .progress
            .states
            .values()
            .filter(|s| s.get("status").and_then(Value::as_str) == Some("completed"))
            .count();
        let mut p = json!({
            "definitionName": self.definition.name,
            "progress": { "completed": completed, "total": steps.len() },
            "orderedPath": path,
            "activity": activity,
        });
        if let Some(cur) = current {
            p["currentState"] = json!(cur);
            if let Some(i) = self.definition.index_of(cur)
                && let Some(following) = steps.get(i + 1)
            {
                p["followingDefinitionState"] = json!(following.name);
            }
        }
        if let Some(at) = next_wake_at {
            p["nextWakeAt"] = json!(at);
        }
        if let Some(outcome) = outcome {
            p["outcome"] = json!(outcome);
        }
        p
    }
}

pub use crate::store::claims::StepEnd;

/// The machine's rules as the store's turn units apply them to the machine they read (a claim
/// starts a step, a terminal ends it): the store stores what they answer and knows no machine.
struct Rules;

/// The stored machine, unless it is unreadable or finished (nothing moves it then).
fn live(stored: &StoredMachine<'_>) -> Option<MachineState> {
    serde_json::from_str::<MachineState>(stored.state)
        .ok()
        .filter(|m| !m.is_finished())
}

/// What the machine's projection says it is doing (`running`, `waiting`, `sleeping`, `idle`).
fn activity(stored: &StoredMachine<'_>) -> Option<String> {
    stored
        .projection
        .and_then(|m| serde_json::from_str::<Value>(m).ok())
        .and_then(|m| m.get("activity").and_then(Value::as_str).map(str::to_owned))
}

fn moved(
    m: &MachineState,
    activity: &str,
    wake_at: Option<i64>,
    prompt: Option<String>,
) -> Option<MachineMove> {
    Some(MachineMove {
        // A state of strings and maps always serialises.
        state: serde_json::to_value(m).ok()?,
        projection: m.projection(activity, wake_at),
        prompt,
    })
}

impl MachineRules for Rules {
    fn step_starts(
        &self,
        stored: StoredMachine<'_>,
        input: QueueKind,
        now: i64,
    ) -> Option<MachineMove> {
        let mut m = live(&stored)?;
        let paused = matches!(activity(&stored).as_deref(), Some("waiting" | "sleeping"));
        let step = match input {
            QueueKind::Initial | QueueKind::Machine => true,
            // A paused Job continues with whatever reaches it first: the answer, the wake, or a
            // message that answers or wakes it early.
            QueueKind::Answer | QueueKind::Wake | QueueKind::Message => paused,
        };
        if !step {
            return None;
        }
        let prompt = match input {
            QueueKind::Initial | QueueKind::Machine => m.current_prompt(),
            _ => None,
        };
        m.start_step(now);
        moved(&m, "running", None, prompt)
    }

    fn step_ends(
        &self,
        stored: StoredMachine<'_>,
        end: StepEnd,
        result: Option<&str>,
        wake_at: Option<i64>,
        now: i64,
    ) -> Option<MachineMove> {
        let mut m = live(&stored)?;
        let next = m.advance(end, result, now);
        let activity = match (end, &next) {
            (_, Some(_)) => "running",
            (StepEnd::Paused, None) if wake_at.is_some() => "sleeping",
            (StepEnd::Paused, None) => "waiting",
            _ => "idle",
        };
        moved(&m, activity, wake_at, next)
    }

    fn step_running(&self, stored: StoredMachine<'_>) -> bool {
        activity(&stored).as_deref() == Some("running")
    }
}

/// The rules every turn unit is given.
pub(crate) fn rules() -> Machines {
    static RULES: std::sync::LazyLock<Machines> = std::sync::LazyLock::new(|| Arc::new(Rules));
    Arc::clone(&RULES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def() -> Value {
        json!({"name": "m", "prompt": "p", "states": [
            {"name": "a", "prompt": "/reply a"},
            {"name": "b", "prompt": "/reply b", "next": "d"},
            {"name": "c", "prompt": "/reply c"},
            {"name": "d", "prompt": "/reply d", "kind": "review"}
        ]})
    }

    #[test]
    fn validation_names_the_field() {
        assert!(validate(&def()).is_ok());
        let e = validate(&json!({"name": "m", "prompt": "p", "states": []})).unwrap_err();
        assert!(e.to_string().contains("mode/states"));
        let e =
            validate(&json!({"name": "m", "prompt": "p", "states": [{"name": "a"}]})).unwrap_err();
        assert!(e.to_string().contains("states/0/prompt"));
        let e = validate(&json!({"name": "m", "prompt": "p", "states": [{"name": "a", "prompt": "x", "next": "zz"}]})).unwrap_err();
        assert!(e.to_string().contains("states/0/next"));
        let e = validate(&json!({"name": "m", "prompt": "p", "states": [{"name": "a", "prompt": "x"}, {"name": "a", "prompt": "y"}]})).unwrap_err();
        assert!(e.to_string().contains("duplicates"));
    }

    #[test]
    fn walks_next_links_and_classifies_the_path() {
        let mut m = MachineState::new(validate(&def()).unwrap(), "go", 1);
        assert_eq!(m.current_prompt().as_deref(), Some("/reply a"));
        assert_eq!(
            m.advance(StepEnd::Completed, Some("a"), 2).as_deref(),
            Some("/reply b")
        );
        assert_eq!(
            m.advance(StepEnd::Completed, Some("b"), 3).as_deref(),
            Some("/reply d")
        );
        let p = m.projection("running", None);
        let phases: Vec<&str> = p["orderedPath"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["phase"].as_str().unwrap())
            .collect();
        assert_eq!(phases, ["past", "past", "future", "current"]);
        assert_eq!(m.advance(StepEnd::Completed, Some("d"), 4), None);
        let p = m.projection("idle", None);
        assert_eq!(p["outcome"], "completed");
        assert_eq!(p["progress"]["completed"], 3);
        assert_eq!(p["orderedPath"][4]["phase"], "outcome");
    }
}
