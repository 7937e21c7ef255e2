//! Engines run one turn of a session: they read the input, stream progress, append durable steps
//! and end with a terminal. The runner owns everything around them (claiming, fencing, terminals,
//! delivery); an engine only talks to its [`TurnIo`], the port the runner implements.

pub mod acp;
pub mod command;
pub mod io;
pub mod openai;
pub mod scripted;
pub mod title;
pub mod tools;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::config::Policy;
use crate::error::Result;
use crate::timeline::{AskQuestion, AttachmentRef, StoredImageRef, Tier};

pub use io::{ChildSession, Delivered, DeltaSink, Origin, SessionMessage, SessionOps, TurnIo};

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
    /// The seq of the timeline event that brought the input (a message or an answer from
    /// outside); `None` for the runner's own inputs (wakes, a Job's next state).
    pub input_seq: Option<u64>,
    /// The continuation the engine returned with its last `ask` or `sleep`, when resuming.
    pub resume: Option<Value>,
    /// The tier frozen when the input was accepted (R22).
    pub tier: Option<Tier>,
    pub cwd: Option<String>,
    /// Images sent with the input (read them with [`TurnIo::image`]).
    pub images: Vec<StoredImageRef>,
    /// Drive files attached to the input.
    pub attachments: Vec<AttachmentRef>,
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

    /// The agent program this engine is, as the `/v2` family names it (`harness`): the Claude
    /// Code and Codex CLIs are `claude_code` and `codex`, the others go by their engine's name.
    fn harness(&self) -> &'static str {
        self.name()
    }

    /// What the start-up log says about this engine beyond its name (model and endpoint).
    fn describe(&self) -> String {
        String::new()
    }
    fn run<'a>(
        &'a self,
        io: &'a mut dyn TurnIo,
        input: TurnInput,
    ) -> BoxFuture<'a, Result<TurnEnd>>;

    /// Whether the engine records the usage of its model calls itself (measured, or estimated
    /// where its model reports none), so the runner writes no estimate of its own for its turns.
    fn records_usage(&self) -> bool {
        false
    }

    /// The tier this engine runs a turn at when `requested` is asked for; a different answer is
    /// recorded as `tier_clamped`.
    fn honoured_tier(&self, requested: Tier) -> Tier {
        requested
    }

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

/// Which engine an agent uses, from its `engine` configuration (`{}` = the server's default).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum EngineConfig {
    /// The deterministic demo and test engine; `tiers` limits the tiers it honours.
    Scripted {
        #[serde(default)]
        tiers: Vec<Tier>,
    },
    /// An OpenAI-compatible chat-completions endpoint.
    Openai(Box<openai::OpenAiConfig>),
    /// An agent CLI run per turn in the session's working directory.
    Command(command::CommandConfig),
    /// An agent's own ACP server (an agent built with the AgentEx SDK that registered).
    Acp(acp::AcpConfig),
}

impl EngineConfig {
    /// Reads an agent's `engine` JSON; `None` for `{}` (use the default).
    pub fn parse(json: &str) -> Result<Option<EngineConfig>> {
        let value: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| crate::Error::invalid(format!("engine: {e}")))?;
        if value.as_object().is_some_and(|o| o.is_empty()) {
            return Ok(None);
        }
        let cfg: EngineConfig = serde_json::from_value(value)
            .map_err(|e| crate::Error::invalid(format!("engine: {e}")))?;
        cfg.check()?;
        Ok(Some(cfg))
    }

    fn check(&self) -> Result<()> {
        match self {
            EngineConfig::Scripted { .. } => Ok(()),
            EngineConfig::Openai(c) => c.check(),
            EngineConfig::Command(c) => c.validate(),
            EngineConfig::Acp(c) => c.check(),
        }
    }

    /// [`Engine::harness`] of the engine this configuration builds.
    pub fn harness(&self) -> &'static str {
        match self {
            EngineConfig::Scripted { .. } => "scripted",
            EngineConfig::Openai(_) => "openai",
            EngineConfig::Command(c) => c.protocol.harness(),
            EngineConfig::Acp(_) => "acp",
        }
    }

    /// Whether this machine's operator lets agents run what this configuration would run
    /// (`[policy]` in the config file).
    pub fn permitted(&self, policy: &Policy) -> Result<()> {
        match self {
            EngineConfig::Command(c) if !policy.programs.contains(&c.program) => {
                Err(crate::Error::invalid(format!(
                    "engine/program: {:?} is not among the programs this server lets agents run \
                     (policy.programs in its config file)",
                    c.program
                )))
            }
            EngineConfig::Openai(c) => c.permitted(policy),
            EngineConfig::Acp(c) => c.permitted(policy),
            _ => Ok(()),
        }
    }

    /// The engine of this configuration; `acp` engines find their platform in `platform`.
    pub fn build(&self, platform: &acp::PlatformSlot) -> Result<Arc<dyn Engine>> {
        Ok(match self {
            EngineConfig::Scripted { tiers } => Arc::new(scripted::ScriptedEngine {
                tiers: tiers.clone(),
                ..Default::default()
            }),
            EngineConfig::Openai(c) => openai::build(c)?,
            EngineConfig::Command(c) => Arc::new(c.build()),
            EngineConfig::Acp(c) => Arc::new(acp::AcpEngine::new(c.clone(), Arc::clone(platform))),
        })
    }
}

/// The engines of all agents: the server default plus one per distinct agent configuration,
/// built on first use.
pub struct Engines {
    default: Arc<dyn Engine>,
    policy: Policy,
    built: Mutex<HashMap<String, Arc<dyn Engine>>>,
    acp_platform: acp::PlatformSlot,
}

/// Stands in for an agent's engine that cannot run here (not permitted, or not buildable): every
/// turn fails with the reason, rather than silently running on another engine.
struct Unavailable {
    reason: String,
}

impl Engine for Unavailable {
    fn name(&self) -> &'static str {
        "unavailable"
    }

    fn describe(&self) -> String {
        self.reason.clone()
    }

    fn run<'a>(
        &'a self,
        _io: &'a mut dyn TurnIo,
        _input: TurnInput,
    ) -> BoxFuture<'a, Result<TurnEnd>> {
        Box::pin(async move {
            Ok(TurnEnd::Failed {
                error: format!("the agent's engine cannot run: {}", self.reason),
            })
        })
    }
}

impl Engines {
    /// `policy` limits what agents' engines may do (the server default is the operator's own
    /// choice and is not checked).
    pub fn new(default: Arc<dyn Engine>, policy: Policy) -> Engines {
        Engines {
            default,
            policy,
            built: Mutex::new(HashMap::new()),
            acp_platform: Arc::default(),
        }
    }

    /// Where `acp` engines find the agent platform; the server fills it once the platform exists.
    pub fn acp_platform(&self) -> acp::PlatformSlot {
        Arc::clone(&self.acp_platform)
    }

    pub fn default_engine(&self) -> &Arc<dyn Engine> {
        &self.default
    }

    /// [`Engine::harness`] of an agent's `engine` JSON, without building it (`{}`: the default's).
    pub fn harness(&self, json: &str) -> &'static str {
        match EngineConfig::parse(json) {
            Ok(Some(config)) => config.harness(),
            Ok(None) | Err(_) => self.default.harness(),
        }
    }

    /// The engine for an agent's `engine` JSON (`{}`: the default).
    pub fn for_config(&self, json: &str) -> Arc<dyn Engine> {
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = built.get(json) {
            return Arc::clone(e);
        }
        let engine = match EngineConfig::parse(json).and_then(|c| {
            c.map(|c| {
                c.permitted(&self.policy)
                    .and_then(|()| c.build(&self.acp_platform))
            })
            .transpose()
        }) {
            Ok(Some(engine)) => engine,
            Ok(None) => Arc::clone(&self.default),
            Err(e) => {
                tracing::error!(error = %e, "an agent's engine cannot run");
                Arc::new(Unavailable {
                    reason: e.to_string(),
                })
            }
        };
        built.insert(json.to_owned(), Arc::clone(&engine));
        engine
    }
}

/// Tokens in `text` when nothing measured them: about 4 bytes of UTF-8 a token, rounded up. For
/// English that is the usual rule of thumb of 4 characters a token; counting bytes rather than
/// characters keeps the estimate of the same order for text byte-level tokenizers split finer
/// (an emoji is 4 bytes and 2 to 4 tokens, a CJK character 3 bytes and 1 or 2 tokens), where a
/// count of characters would be several times too low. Estimates are marked as such.
pub fn estimated_tokens(text: &str) -> u64 {
    text.len().div_ceil(4) as u64
}

/// The model that last answered a session's model engine, as its endpoint named it, from the
/// engine's memo (see [`TurnIo::memo`]): `answered`, else the `model` the engine asked for (a memo
/// of a turn whose call has not answered yet). The Session record's `tokens.model` shows it, and
/// `/v2`'s `usage.updated` when its usage event names no model.
pub fn answered_model(memo: &Value) -> Option<&str> {
    memo.get("answered")
        .or_else(|| memo.get("model"))
        .and_then(Value::as_str)
}

/// The supported tier closest to `requested` (ties go to the cheaper one); `requested` itself when
/// `supported` is empty or contains it.
pub fn nearest_tier(requested: Tier, supported: &[Tier]) -> Tier {
    fn rank(t: Tier) -> i32 {
        match t {
            Tier::Economy => 0,
            Tier::Balanced => 1,
            Tier::Frontier => 2,
        }
    }
    if supported.is_empty() || supported.contains(&requested) {
        return requested;
    }
    supported
        .iter()
        .copied()
        .min_by_key(|t| ((rank(*t) - rank(requested)).abs(), rank(*t)))
        .unwrap_or(requested)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_count_bytes_so_emoji_and_cjk_are_not_undercounted() {
        assert_eq!(estimated_tokens(""), 0);
        assert_eq!(estimated_tokens("Four words right here."), 6);
        // Four emoji: a byte-level tokenizer spends 2 to 4 tokens on each.
        assert_eq!(estimated_tokens("👋😊🙂👍"), 4);
        // Six CJK characters, 3 bytes each: 1 or 2 tokens each.
        assert_eq!(estimated_tokens("你好，世界！"), 5);
    }

    #[test]
    fn nearest_tier_prefers_the_closest_then_the_cheaper() {
        use Tier::*;
        assert_eq!(nearest_tier(Frontier, &[]), Frontier);
        assert_eq!(nearest_tier(Frontier, &[Economy, Balanced]), Balanced);
        assert_eq!(nearest_tier(Balanced, &[Economy, Frontier]), Economy);
        assert_eq!(nearest_tier(Economy, &[Frontier]), Frontier);
    }
}
