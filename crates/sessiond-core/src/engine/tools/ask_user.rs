//! `ask_user`: the model asks the user one or more questions; the turn ends with `ask` and the
//! answer resumes it as this call's result.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, Outcome, Tool, args};
use crate::error::Result;
use crate::timeline::{AskOption, AskQuestion};

pub struct AskUser;

#[async_trait]
impl Tool for AskUser {
    fn name(&self) -> &'static str {
        "ask_user"
    }

    fn description(&self) -> &'static str {
        "Ask the user one or more questions and wait for the answer. Use only when you cannot continue without a decision."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "questions": {
                    "type": "array", "minItems": 1, "maxItems": 4,
                    "items": {
                        "type": "object",
                        "properties": {
                            "question": {"type": "string"},
                            "header": {"type": "string", "description": "A short label for the question"},
                            "options": {
                                "type": "array",
                                "items": {"type": "object", "properties": {
                                    "label": {"type": "string"},
                                    "description": {"type": "string"}
                                }, "required": ["label"]}
                            },
                            "multiSelect": {"type": "boolean"}
                        },
                        "required": ["question"]
                    }
                }
            },
            "required": ["questions"]
        })
    }

    fn pauses(&self) -> bool {
        true
    }

    async fn call(&self, _cx: Call<'_>, input: &Value) -> Result<Outcome> {
        Ok(ask_user(input))
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OptionIn {
    Label(String),
    Full {
        label: String,
        description: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QuestionIn {
    question: String,
    header: Option<String>,
    #[serde(default)]
    options: Vec<OptionIn>,
    multi_select: Option<bool>,
}

#[derive(Deserialize)]
struct AskIn {
    questions: Vec<QuestionIn>,
}

fn ask_user(input: &Value) -> Outcome {
    let parsed: AskIn = match args("ask_user", input) {
        Ok(a) => a,
        Err(e) => return e,
    };
    if parsed.questions.is_empty() || parsed.questions.len() > 4 {
        return Outcome::error("ask_user takes 1 to 4 questions");
    }
    let mut questions = Vec::new();
    for q in parsed.questions {
        let question = q.question.trim().to_owned();
        if question.is_empty() || question.chars().count() > 2_000 {
            return Outcome::error("every question needs 1 to 2000 characters of text");
        }
        if q.options.len() > 10 {
            return Outcome::error("at most 10 options per question");
        }
        let options = q
            .options
            .into_iter()
            .map(|o| match o {
                OptionIn::Label(label) => AskOption {
                    label,
                    description: None,
                },
                OptionIn::Full { label, description } => AskOption { label, description },
            })
            .filter(|o| !o.label.trim().is_empty())
            .collect();
        questions.push(AskQuestion {
            question,
            header: q.header.filter(|h| !h.trim().is_empty()),
            options,
            multi_select: q.multi_select,
        });
    }
    Outcome::Ask(questions)
}
