//! Engines run one turn of a session: they read the input, stream progress, append durable steps
//! and end with a terminal. The runner owns everything around them (claiming, fencing, terminals,
//! delivery); an engine only talks to its [`TurnIo`].

pub mod scripted;

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use crate::error::Result;
use crate::runner::TurnIo;
use crate::timeline::{AskQuestion, Tier};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What started this turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    Prompt,
    Answer,
    Wake,
}

#[derive(Debug, Clone)]
pub struct TurnInput {
    pub kind: InputKind,
    /// The prompt or answer text (empty for a wake).
    pub text: String,
    /// The continuation the engine returned with its last `ask` or `sleep`, when resuming.
    pub resume: Option<Value>,
    /// The tier frozen when the input was accepted (R22).
    pub tier: Option<Tier>,
    pub cwd: Option<String>,
}

/// How a turn ended, as the engine reports it; the runner turns it into the terminal event.
#[derive(Debug, Clone)]
pub enum TurnEnd {
    Complete {
        result: Option<String>,
    },
    Failed {
        error: String,
    },
    /// Waiting for a person; `resume` comes back with the answer.
    Ask {
        questions: Vec<AskQuestion>,
        resume: Value,
    },
    /// Wake at `wake_at` (ms since the epoch) with `resume`.
    Sleep {
        wake_at: i64,
        resume: Value,
    },
    /// The engine saw the interrupt and stopped.
    Interrupted,
}

/// A pluggable way of running turns. Implementations must return promptly once
/// [`TurnIo::is_cancelled`] turns true (the runner cuts them off after a grace period anyway).
pub trait Engine: Send + Sync {
    fn name(&self) -> &'static str;
    fn run<'a>(&'a self, io: &'a mut TurnIo, input: TurnInput) -> BoxFuture<'a, Result<TurnEnd>>;

    /// A short title for a session from its first prompt and reply, when the engine can make one;
    /// `None` keeps the excerpt title.
    fn title<'a>(
        &'a self,
        _prompt: &'a str,
        _reply: &'a str,
    ) -> Option<BoxFuture<'a, Result<String>>> {
        None
    }
}
