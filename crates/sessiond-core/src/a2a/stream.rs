//! A task followed live: the timeline events after a point read as A2A `StreamResponse`s
//! (`statusUpdate`, `artifactUpdate`), after the `task` itself as the first response. The
//! stream ends with the state the turn ends in (completed, failed, canceled, or input-required:
//! the protocol's interrupted states end a stream too). The resumable SSE machinery that
//! carries these is the one every family shares (`api::stream`).

use serde_json::{Value, json};

use super::reading::{self, Reading, State};
use super::task;

pub struct Updates {
    task_id: String,
    first: Option<Value>,
    state: Option<State>,
    ended: bool,
}

impl Updates {
    /// A stream of task `task_id` that starts with `first` (its `Task`).
    pub fn new(task_id: &str, first: Value) -> Updates {
        Updates {
            task_id: task_id.to_owned(),
            first: Some(first),
            state: None,
            ended: false,
        }
    }

    /// The `{"task": …}` response, the first time it is asked for.
    pub fn first(&mut self) -> Option<Value> {
        self.first.take().map(|t| json!({ "task": t }))
    }

    /// Whether the stream has sent its last response.
    pub fn ended(&self) -> bool {
        self.ended
    }

    fn status_update(&mut self, state: State, message: Option<(u64, &str)>, at: i64) -> Value {
        self.state = Some(state);
        json!({ "statusUpdate": {
            "taskId": self.task_id,
            "contextId": self.task_id,
            "status": task::status(&self.task_id, state, message, at),
        }})
    }

    /// The responses one stored event makes (none once the stream has ended).
    pub fn event(&mut self, seq: u64, created_at: i64, event: &Value) -> Vec<Value> {
        if self.ended {
            return vec![];
        }
        match reading::read(event) {
            Reading::Working if self.state != Some(State::Working) => {
                vec![self.status_update(State::Working, None, created_at)]
            }
            Reading::AgentText(text) => {
                vec![self.status_update(State::Working, Some((seq, &text)), created_at)]
            }
            Reading::Ended { state, text, reply } => {
                let mut out = Vec::with_capacity(2);
                if let Some(reply) = &reply {
                    out.push(json!({ "artifactUpdate": {
                        "taskId": self.task_id,
                        "contextId": self.task_id,
                        "artifact": reading::reply_artifact(seq, reply),
                        "append": false,
                        "lastChunk": true,
                    }}));
                }
                out.push(self.status_update(state, text.as_deref().map(|t| (seq, t)), created_at));
                self.ended = state.ends_stream();
                out
            }
            _ => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_reads_as_working_reply_and_completed_then_ends() {
        let mut u = Updates::new("t", json!({"id": "t"}));
        assert!(u.first().is_some());
        assert!(u.first().is_none());
        let started = u.event(3, 1, &json!({"type": "turn_started"}));
        assert_eq!(
            started[0]["statusUpdate"]["status"]["state"],
            "TASK_STATE_WORKING"
        );
        assert!(u.event(4, 1, &json!({"type": "turn_started"})).is_empty());
        let done = u.event(
            5,
            2,
            &json!({"type": "complete", "status": "completed", "result": "hi"}),
        );
        assert_eq!(
            done[0]["artifactUpdate"]["artifact"]["parts"][0]["text"],
            "hi"
        );
        assert_eq!(
            done[1]["statusUpdate"]["status"]["state"],
            "TASK_STATE_COMPLETED"
        );
        assert!(u.ended());
        assert!(u.event(6, 3, &json!({"type": "turn_started"})).is_empty());
    }

    #[test]
    fn an_ask_ends_the_stream_input_required() {
        let mut u = Updates::new("t", json!({}));
        let ask = json!({"type": "ask", "questions": [
            {"question": "Which?", "options": [{"label": "a"}, {"label": "b"}]}
        ]});
        let out = u.event(2, 1, &ask);
        let status = &out[0]["statusUpdate"]["status"];
        assert_eq!(status["state"], "TASK_STATE_INPUT_REQUIRED");
        assert_eq!(status["message"]["parts"][0]["text"], "Which?\n- a\n- b");
        assert!(u.ended());
    }
}
