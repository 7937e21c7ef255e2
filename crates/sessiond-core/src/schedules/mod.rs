//! Agent run schedules: a cadence (a cron expression in an IANA time zone, or an interval) on
//! which an agent gets a fresh session, started with the schedule's initial input.
//!
//! This module holds every schedule operation of `/agentex/agents/{agent_id}/schedules` as one
//! call, and the firing of a tick; [`scheduler`] is the timer that fires them, [`cadence`] says
//! when they fall. The rules a user relies on:
//!
//! * **Exactly once.** A tick's session is created in the same transaction that moves the
//!   schedule on to its next tick (`next_due_at`) and records the run (`schedule_runs`), so a tick
//!   makes one session or none, also when sessiond crashes halfway. Every change is a
//!   compare-and-swap on the row: a tick fires only from the row it was computed from.
//! * **Missed ticks.** A due tick fires once, late if need be. When more than one tick fell due
//!   while sessiond was down (or a tick was delayed past the next one), they are folded into one
//!   *catch-up* run, named after the latest of them, and the schedule continues from now — an
//!   agent is not flooded with a backlog of identical runs after an outage, and nothing the
//!   schedule promised is dropped silently.
//! * **Paused** schedules have no next tick; resuming continues from now (ticks that fell in the
//!   pause are not made up). A manual trigger fires even a paused schedule.
//! * **Provenance.** A tick's session runs as the schedule's creator (their user, or their app),
//!   on the [`Channel::Schedule`] channel, and only while that creator still belongs to the
//!   workspace; its title names the schedule and the tick.

pub mod cadence;
pub mod scheduler;

use std::collections::BTreeSet;
use std::sync::Arc;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use self::cadence::{Cadence, DEFAULT_TIMEZONE, Timing};
use crate::agentex;
use crate::clock;
use crate::config::SchedulesConfig;
use crate::error::{Error, Result};
use crate::sessions::{Actor, Channel, InputCommon, MessageIn, OpenIn, Opened, Sessions};
use crate::store::Store;
use crate::store::agentex::AgentKey;
use crate::store::schedules::{ScheduleRef, ScheduleRow, ScheduleRunRow, TriggerType};
use crate::store::submit::{OpenLink, ScheduleAdvance, ScheduleCreator};
use crate::timeline::{Behavior, Sender};

/// How many upcoming tick times a schedule shows.
pub const NEXT_TIMES: usize = 10;
/// Longest schedule name (lowercase letters, digits and inner hyphens).
const MAX_NAME_LEN: usize = 64;
const MAX_DESCRIPTION_CHARS: usize = 2000;
const MAX_NOTE_CHARS: usize = 1000;
/// Largest `task_params` / `task_metadata` document, serialized.
const MAX_JSON_BYTES: usize = 16 * 1024;
/// Most future ticks one schedule may skip.
const MAX_SKIPS: usize = 100;
const MAX_INTERVAL_SECONDS: i64 = 10 * 366 * 86_400;
/// How often a mutation retries when a tick (or another request) changed the row under it.
const MAX_ATTEMPTS: usize = 8;

/// The author attributed to the initial input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Author {
    #[default]
    User,
    Agent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum InputType {
    #[default]
    #[serde(rename = "text")]
    Text,
}

/// The first input of every session a schedule creates. It becomes the session's first prompt;
/// `author` is kept and shown, but sessiond's timeline has no agent-authored inputs, so an
/// `agent` author changes nothing about how the input is delivered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitialInput {
    pub content: String,
    #[serde(default)]
    pub author: Author,
    #[serde(default, rename = "type")]
    pub kind: InputType,
}

/// The body of a create.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSchedule {
    pub name: String,
    pub initial_input: InitialInput,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub cron_expression: Option<String>,
    #[serde(default)]
    pub interval_seconds: Option<i64>,
    #[serde(default)]
    pub timezone: Option<String>,
    #[serde(default)]
    pub start_at: Option<String>,
    #[serde(default)]
    pub end_at: Option<String>,
    #[serde(default)]
    pub paused: Option<bool>,
    #[serde(default)]
    pub task_params: Option<Map<String, Value>>,
    #[serde(default)]
    pub task_metadata: Option<Map<String, Value>>,
}

/// `Some(None)` for a field sent as `null`, `None` for a field left out.
fn present<'de, D, T>(d: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// The body of an update: only the fields present change. `null` clears `description`,
/// `start_at`, `end_at`, `task_params` and `task_metadata`; a `null` name, time zone, `paused`
/// or initial input leaves it as it is. Setting one cadence clears the other.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleChange {
    #[serde(default, deserialize_with = "present")]
    pub name: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub description: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub cron_expression: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub interval_seconds: Option<Option<i64>>,
    #[serde(default, deserialize_with = "present")]
    pub timezone: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub start_at: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub end_at: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub paused: Option<Option<bool>>,
    #[serde(default, deserialize_with = "present")]
    pub task_params: Option<Option<Map<String, Value>>>,
    #[serde(default, deserialize_with = "present")]
    pub task_metadata: Option<Option<Map<String, Value>>>,
    #[serde(default, deserialize_with = "present")]
    pub initial_input: Option<Option<InitialInput>>,
}

/// Who created a schedule, without any credential: the user, or the app (a service account).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "principal_type", rename_all = "snake_case")]
pub enum Creator {
    User { user_id: String },
    ServiceAccount { service_account_id: String },
}

impl Creator {
    fn of(actor: &Actor) -> Result<Creator> {
        match &actor.sender {
            Sender::User { user_id } => Ok(Creator::User {
                user_id: user_id.clone(),
            }),
            Sender::App { app_id } => Ok(Creator::ServiceAccount {
                service_account_id: app_id.clone(),
            }),
            Sender::Session { .. } | Sender::System => Err(Error::Forbidden(
                "schedules are created by a user or an app".into(),
            )),
        }
    }

    fn sender(&self) -> Sender {
        match self {
            Creator::User { user_id } => Sender::User {
                user_id: user_id.clone(),
            },
            Creator::ServiceAccount { service_account_id } => Sender::App {
                app_id: service_account_id.clone(),
            },
        }
    }

    /// The id an actor carries as its user (an app acts as itself, as its keys do).
    fn user_id(&self) -> &str {
        match self {
            Creator::User { user_id } => user_id,
            Creator::ServiceAccount { service_account_id } => service_account_id,
        }
    }
}

/// What kind of cadence a schedule has.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CadenceSpec {
    Cron(String),
    Interval(i64),
}

/// The editable part of a schedule, checked as a whole.
#[derive(Debug, Clone)]
struct Definition {
    name: String,
    description: Option<String>,
    cadence: CadenceSpec,
    timezone: String,
    anchor_at: i64,
    start_at: Option<i64>,
    end_at: Option<i64>,
    paused: bool,
    initial_input: InitialInput,
    task_params: Option<Map<String, Value>>,
    task_metadata: Option<Map<String, Value>>,
}

/// A schedule as the core and the API see it: its row and what the row means.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub row: ScheduleRow,
    pub timing: Timing,
    pub zone: TimeZone,
    pub initial_input: InitialInput,
    pub creator: Creator,
    pub task_params: Option<Value>,
    pub task_metadata: Option<Value>,
}

fn corrupt(what: &str, id: &str) -> Error {
    Error::Internal(format!("schedule {id}: stored {what} is unreadable"))
}

fn parse_skipped(text: &str) -> Option<BTreeSet<i64>> {
    serde_json::from_str::<Vec<i64>>(text)
        .ok()
        .map(|v| v.into_iter().collect())
}

fn encode_skipped(skipped: &BTreeSet<i64>) -> String {
    Value::from(skipped.iter().copied().collect::<Vec<_>>()).to_string()
}

fn parse_object(text: Option<&str>) -> Option<Option<Value>> {
    match text {
        None => Some(None),
        Some(t) => serde_json::from_str::<Value>(t).ok().map(Some),
    }
}

/// A whole-second instant at or before `ms` (interval ticks fall on whole seconds).
fn whole_second(ms: i64) -> i64 {
    ms.div_euclid(1000) * 1000
}

impl Schedule {
    fn from_row(row: ScheduleRow) -> Result<Schedule> {
        let (zone, _) = cadence::zone(&row.timezone).map_err(|_| corrupt("timezone", &row.id))?;
        let cadence = match (&row.cron_expression, row.interval_seconds) {
            (Some(expr), None) => {
                Cadence::cron(expr, zone.clone()).map_err(|_| corrupt("cadence", &row.id))?
            }
            (None, Some(secs)) => Cadence::interval(secs, row.anchor_at),
            _ => return Err(corrupt("cadence", &row.id)),
        };
        let skipped = parse_skipped(&row.skipped).ok_or_else(|| corrupt("skips", &row.id))?;
        let initial_input = serde_json::from_str(&row.initial_input)
            .map_err(|_| corrupt("initial input", &row.id))?;
        let creator =
            serde_json::from_str(&row.creator).map_err(|_| corrupt("creator", &row.id))?;
        let task_params = parse_object(row.task_params.as_deref())
            .ok_or_else(|| corrupt("task params", &row.id))?;
        let task_metadata = parse_object(row.task_metadata.as_deref())
            .ok_or_else(|| corrupt("task metadata", &row.id))?;
        Ok(Schedule {
            timing: Timing {
                cadence,
                start_at: row.start_at,
                end_at: row.end_at,
                skipped,
            },
            zone,
            initial_input,
            creator,
            task_params,
            task_metadata,
            row,
        })
    }

    /// The next tick times after `now` (none while paused).
    pub fn next_times(&self, now: i64) -> Vec<i64> {
        if self.row.paused {
            return Vec::new();
        }
        // A tick that is due but not fired yet still comes first.
        let from = match self.row.next_due_at {
            Some(due) if due <= now => due - 1,
            _ => now,
        };
        self.timing.upcoming(from, NEXT_TIMES)
    }

    /// The skipped ticks still ahead.
    pub fn skipped_times(&self, now: i64) -> Vec<i64> {
        self.timing.skipped.range(now + 1..).copied().collect()
    }

    fn definition(&self) -> Result<Definition> {
        let r = &self.row;
        let as_map = |v: &Option<Value>| match v {
            Some(Value::Object(m)) => Ok(Some(m.clone())),
            None => Ok(None),
            Some(_) => Err(corrupt("task fields", &r.id)),
        };
        Ok(Definition {
            name: r.name.clone(),
            description: r.description.clone(),
            cadence: match (&r.cron_expression, r.interval_seconds) {
                (Some(e), _) => CadenceSpec::Cron(e.clone()),
                (None, Some(s)) => CadenceSpec::Interval(s),
                (None, None) => return Err(corrupt("cadence", &r.id)),
            },
            timezone: r.timezone.clone(),
            anchor_at: r.anchor_at,
            start_at: r.start_at,
            end_at: r.end_at,
            paused: r.paused,
            initial_input: self.initial_input.clone(),
            task_params: as_map(&self.task_params)?,
            task_metadata: as_map(&self.task_metadata)?,
        })
    }

    /// The next tick of a schedule whose timing or pause changed, counted from `now`.
    fn reschedule(&self, now: i64) -> Option<i64> {
        if self.row.paused {
            None
        } else {
            self.timing.next_after(now)
        }
    }

    /// A wall-clock label of a tick in the schedule's zone, e.g. `2030-03-09 09:00 EST`.
    fn label(&self, at: i64) -> String {
        let format = if self.row.interval_seconds.is_some() {
            "%Y-%m-%d %H:%M:%S %Z"
        } else {
            "%Y-%m-%d %H:%M %Z"
        };
        Timestamp::from_millisecond(at)
            .map(|t| t.to_zoned(self.zone.clone()).strftime(format).to_string())
            .unwrap_or_else(|_| clock::rfc3339(at))
    }
}

fn check_name(name: &str) -> Result<()> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-';
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "name: 1 to {MAX_NAME_LEN} characters of a-z, 0-9 and '-', not starting or ending with '-'"
        )))
    }
}

fn check_object(field: &str, value: &Option<Map<String, Value>>) -> Result<()> {
    if let Some(m) = value {
        let size = Value::Object(m.clone()).to_string().len();
        if size > MAX_JSON_BYTES {
            return Err(Error::invalid(format!(
                "{field}: at most {MAX_JSON_BYTES} bytes of JSON"
            )));
        }
    }
    Ok(())
}

fn instant(field: &str, text: Option<&str>) -> Result<Option<i64>> {
    text.map(|t| cadence::parse_instant(field, t).map_err(|e| Error::invalid(e.0)))
        .transpose()
}

impl Definition {
    /// Checks every field and the whole; returns the timing it defines.
    fn check(&mut self, limits: &SchedulesConfig, max_prompt_chars: usize) -> Result<Timing> {
        check_name(&self.name)?;
        if let Some(d) = &self.description
            && d.chars().count() > MAX_DESCRIPTION_CHARS
        {
            return Err(Error::invalid(format!(
                "description: at most {MAX_DESCRIPTION_CHARS} characters"
            )));
        }
        let content = &self.initial_input.content;
        if content.trim().is_empty() {
            return Err(Error::invalid("initial_input/content: must not be empty"));
        }
        if content.chars().count() > max_prompt_chars {
            return Err(Error::invalid(format!(
                "initial_input/content: at most {max_prompt_chars} characters"
            )));
        }
        check_object("task_params", &self.task_params)?;
        check_object("task_metadata", &self.task_metadata)?;
        let (zone, canonical) = cadence::zone(&self.timezone).map_err(|e| Error::invalid(e.0))?;
        self.timezone = canonical;
        if let (Some(start), Some(end)) = (self.start_at, self.end_at)
            && end <= start
        {
            return Err(Error::invalid("end_at: must be after start_at"));
        }
        let cadence = match &self.cadence {
            CadenceSpec::Cron(expr) => {
                let cadence = Cadence::cron(expr, zone).map_err(|e| Error::invalid(e.0))?;
                let probe = Timing {
                    cadence: cadence.clone(),
                    start_at: None,
                    end_at: None,
                    skipped: BTreeSet::new(),
                };
                if probe.next_after(clock::now_ms()).is_none() {
                    return Err(Error::invalid(format!(
                        "cron_expression: {expr} never matches a date"
                    )));
                }
                cadence
            }
            CadenceSpec::Interval(secs) => {
                let min = i64::from(limits.min_interval_seconds);
                if !(min..=MAX_INTERVAL_SECONDS).contains(secs) {
                    return Err(Error::invalid(format!(
                        "interval_seconds: must be from {min} to {MAX_INTERVAL_SECONDS} (this server's minimum is schedules.min_interval_seconds = {min})"
                    )));
                }
                Cadence::interval(*secs, self.anchor_at)
            }
        };
        Ok(Timing {
            cadence,
            start_at: self.start_at,
            end_at: self.end_at,
            skipped: BTreeSet::new(),
        })
    }

    /// `row` with this definition's columns. Its next tick is counted from `now`, except that a
    /// tick already due (and about to fire) stays due if the new timing still has it, so an edit
    /// never makes a tick vanish.
    fn write_into(self, row: ScheduleRow, timing: &Timing, now: i64) -> Result<ScheduleRow> {
        let next_due_at = match row.next_due_at {
            _ if self.paused => None,
            Some(due) if due <= now && timing.is_tick(due) && !timing.skipped.contains(&due) => {
                Some(due)
            }
            _ => timing.next_after(now),
        };
        let (cron_expression, interval_seconds) = match &self.cadence {
            CadenceSpec::Cron(e) => (Some(e.trim().to_owned()), None),
            CadenceSpec::Interval(s) => (None, Some(*s)),
        };
        Ok(ScheduleRow {
            name: self.name,
            description: self.description,
            cron_expression,
            interval_seconds,
            timezone: self.timezone,
            anchor_at: self.anchor_at,
            start_at: self.start_at,
            end_at: self.end_at,
            paused: self.paused,
            initial_input: to_json(&self.initial_input)?,
            task_params: self.task_params.map(|m| Value::Object(m).to_string()),
            task_metadata: self.task_metadata.map(|m| Value::Object(m).to_string()),
            skipped: encode_skipped(&timing.skipped),
            next_due_at,
            updated_at: now,
            ..row
        })
    }
}

fn cadence_of(cron: Option<String>, interval: Option<i64>) -> Result<CadenceSpec> {
    match (cron, interval) {
        (Some(c), None) => Ok(CadenceSpec::Cron(c)),
        (None, Some(s)) => Ok(CadenceSpec::Interval(s)),
        (Some(_), Some(_)) => Err(Error::invalid(
            "give only one of cron_expression and interval_seconds",
        )),
        (None, None) => Err(Error::invalid(
            "give one of cron_expression and interval_seconds",
        )),
    }
}

/// One firing of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fire {
    /// The tick the scheduler found due (`due` is the row's `next_due_at`); `fire_time` is the
    /// tick it stands for (the latest missed one for a catch-up) and `next` the one after now.
    Tick {
        due: i64,
        fire_time: i64,
        catch_up: bool,
        next: Option<i64>,
    },
    /// A trigger: an extra run now, outside the cadence.
    Manual { at: i64 },
}

impl Fire {
    fn trigger_type(&self) -> TriggerType {
        match self {
            Fire::Tick {
                catch_up: false, ..
            } => TriggerType::Scheduled,
            Fire::Tick { catch_up: true, .. } => TriggerType::CatchUp,
            Fire::Manual { .. } => TriggerType::Manual,
        }
    }

    fn fire_time(&self) -> i64 {
        match self {
            Fire::Tick { fire_time, .. } => *fire_time,
            Fire::Manual { at } => *at,
        }
    }
}

/// The error a firing reports when the schedule changed after it was read: nothing was written,
/// and the scheduler looks again.
const CHANGED: &str = "schedule_changed";

/// How an agent's schedules are reached and fired.
#[derive(Clone)]
pub struct Schedules {
    sessions: Sessions,
    /// Tells the scheduler that a schedule's next tick may have moved.
    wake: Arc<Notify>,
}

impl Schedules {
    pub fn new(sessions: Sessions) -> Schedules {
        Schedules {
            sessions,
            wake: Arc::new(Notify::new()),
        }
    }

    fn store(&self) -> &Store {
        self.sessions.store()
    }

    /// Tells the scheduler that a schedule's next tick moved (every operation here does it after
    /// its commit; this is for writers outside this module, such as benchmarks).
    pub fn poke(&self) {
        self.wake.notify_one();
    }

    fn limits(&self) -> &SchedulesConfig {
        &self.sessions.config().schedules
    }

    /// Checks the agent exists in the actor's workspace (404 `agent_not_found` otherwise, also
    /// for another workspace's agent): the agent platform API's own lookup.
    pub async fn check_agent(&self, actor: &Actor, agent_id: &str) -> Result<()> {
        agentex::agents::find(&self.sessions, actor, AgentKey::Id(agent_id)).await?;
        Ok(())
    }

    pub async fn create(
        &self,
        actor: &Actor,
        agent_id: &str,
        spec: NewSchedule,
    ) -> Result<Schedule> {
        self.check_agent(actor, agent_id).await?;
        let creator = Creator::of(actor)?;
        let now = clock::now_ms();
        let start_at = instant("start_at", spec.start_at.as_deref())?;
        let mut def = Definition {
            name: spec.name,
            description: spec.description,
            cadence: cadence_of(spec.cron_expression, spec.interval_seconds)?,
            timezone: spec.timezone.unwrap_or_else(|| DEFAULT_TIMEZONE.to_owned()),
            anchor_at: start_at.unwrap_or_else(|| whole_second(now)),
            start_at,
            end_at: instant("end_at", spec.end_at.as_deref())?,
            paused: spec.paused.unwrap_or(false),
            initial_input: spec.initial_input,
            task_params: spec.task_params,
            task_metadata: spec.task_metadata,
        };
        let timing = def.check(
            self.limits(),
            self.sessions.config().limits.max_prompt_chars,
        )?;
        let base = ScheduleRow {
            id: crate::ids::new_id(),
            workspace_id: actor.workspace_id.clone(),
            agent_id: agent_id.to_owned(),
            name: String::new(),
            description: None,
            cron_expression: None,
            interval_seconds: None,
            timezone: String::new(),
            anchor_at: 0,
            start_at: None,
            end_at: None,
            paused: false,
            initial_input: String::new(),
            task_params: None,
            task_metadata: None,
            creator: to_json(&creator)?,
            skipped: String::new(),
            next_due_at: None,
            num_actions: 0,
            last_action_at: None,
            created_at: now,
            updated_at: now,
        };
        let row = def.write_into(base, &timing, now)?;
        let max = u64::from(self.limits().max_per_agent);
        if !self
            .store()
            .schedules()
            .insert_within(row.clone(), max)
            .await?
        {
            return Err(Error::Conflict(
                "schedule_limit",
                format!(
                    "the agent already has {max} schedules, the most this server allows (schedules.max_per_agent); delete one first"
                ),
            ));
        }
        self.wake.notify_one();
        Schedule::from_row(row)
    }

    pub async fn get(&self, actor: &Actor, agent_id: &str, r: &ScheduleRef) -> Result<Schedule> {
        self.check_agent(actor, agent_id).await?;
        let row = self
            .store()
            .schedules()
            .get(&actor.workspace_id, agent_id, r)
            .await?
            .ok_or(Error::NotFound)?;
        Schedule::from_row(row)
    }

    /// The agent's schedules, oldest first.
    pub async fn list(&self, actor: &Actor, agent_id: &str, limit: u32) -> Result<Vec<Schedule>> {
        self.check_agent(actor, agent_id).await?;
        let found = self
            .store()
            .schedules()
            .of_agent(&actor.workspace_id, agent_id, limit)
            .await?;
        found.into_iter().map(Schedule::from_row).collect()
    }

    /// Applies `change` to the schedule's definition.
    pub async fn update(
        &self,
        actor: &Actor,
        agent_id: &str,
        r: &ScheduleRef,
        change: ScheduleChange,
    ) -> Result<Schedule> {
        let max_prompt = self.sessions.config().limits.max_prompt_chars;
        let limits = self.limits().clone();
        let start_at = change
            .start_at
            .as_ref()
            .map(|v| instant("start_at", v.as_deref()))
            .transpose()?;
        let end_at = change
            .end_at
            .as_ref()
            .map(|v| instant("end_at", v.as_deref()))
            .transpose()?;
        if let (Some(Some(_)), Some(Some(_))) = (&change.cron_expression, &change.interval_seconds)
        {
            return Err(Error::invalid(
                "give only one of cron_expression and interval_seconds",
            ));
        }
        self.mutate(actor, agent_id, r, move |s, now| {
            let mut def = s.definition()?;
            let c = change.clone();
            if let Some(Some(name)) = c.name {
                def.name = name;
            }
            if let Some(d) = c.description {
                def.description = d;
            }
            let (mut cron, mut interval) = match &def.cadence {
                CadenceSpec::Cron(e) => (Some(e.clone()), None),
                CadenceSpec::Interval(s) => (None, Some(*s)),
            };
            let mut reanchor = false;
            if let Some(v) = c.cron_expression {
                if v.is_some() {
                    interval = None;
                }
                cron = v;
            }
            if let Some(v) = c.interval_seconds {
                if v.is_some() {
                    cron = None;
                    reanchor = true;
                }
                interval = v;
            }
            def.cadence = cadence_of(cron, interval)?;
            if let Some(Some(tz)) = c.timezone {
                def.timezone = tz;
            }
            if let Some(v) = start_at {
                def.start_at = v;
                reanchor = true;
            }
            if let Some(v) = end_at {
                def.end_at = v;
            }
            if let Some(Some(p)) = c.paused {
                def.paused = p;
            }
            if let Some(v) = c.task_params {
                def.task_params = v;
            }
            if let Some(v) = c.task_metadata {
                def.task_metadata = v;
            }
            if let Some(Some(input)) = c.initial_input {
                def.initial_input = input;
            }
            if reanchor {
                def.anchor_at = def.start_at.unwrap_or_else(|| whole_second(now));
            }
            let mut timing = def.check(&limits, max_prompt)?;
            timing.skipped = s.timing.skipped.range(now + 1..).copied().collect();
            def.write_into(s.row.clone(), &timing, now)
        })
        .await
    }

    pub async fn delete(&self, actor: &Actor, agent_id: &str, r: &ScheduleRef) -> Result<String> {
        let s = self.get(actor, agent_id, r).await?;
        let id = s.row.id.clone();
        self.store().schedules().delete(&id).await?;
        self.wake.notify_one();
        Ok(id)
    }

    /// Pauses (no more ticks) or resumes (ticks again from now). The note is logged.
    pub async fn set_paused(
        &self,
        actor: &Actor,
        agent_id: &str,
        r: &ScheduleRef,
        paused: bool,
        note: Option<String>,
    ) -> Result<Schedule> {
        if let Some(n) = &note
            && n.chars().count() > MAX_NOTE_CHARS
        {
            return Err(Error::invalid(format!(
                "note: at most {MAX_NOTE_CHARS} characters"
            )));
        }
        let current = self.get(actor, agent_id, r).await?;
        if current.row.paused == paused {
            // Already so: nothing to write (and a tick that is due stays due).
            return Ok(current);
        }
        let s = self
            .mutate(actor, agent_id, r, move |s, now| {
                let mut next = s.clone();
                next.row.paused = paused;
                Ok(ScheduleRow {
                    paused,
                    next_due_at: next.reschedule(now),
                    updated_at: now,
                    ..s.row.clone()
                })
            })
            .await?;
        tracing::info!(
            schedule = %s.row.id,
            paused,
            note = note.as_deref().unwrap_or(""),
            "schedule {}", if paused { "paused" } else { "resumed" }
        );
        Ok(s)
    }

    /// Leaves one future tick out (`skip`) or puts it back (`!skip`). The time must be a tick of
    /// the cadence still ahead; skipping a skipped tick or unskipping one that is not skipped
    /// changes nothing.
    pub async fn skip(
        &self,
        actor: &Actor,
        agent_id: &str,
        r: &ScheduleRef,
        scheduled_time: &str,
        skip: bool,
    ) -> Result<Schedule> {
        let at = cadence::parse_instant("scheduled_time", scheduled_time)
            .map_err(|e| Error::invalid(e.0))?;
        self.mutate(actor, agent_id, r, move |s, now| {
            let mut skipped: BTreeSet<i64> = s.timing.skipped.range(now + 1..).copied().collect();
            if skip {
                if at <= now || !s.timing.is_tick(at) {
                    return Err(Error::invalid(format!(
                        "scheduled_time: {} is not an upcoming tick of this schedule (see next_action_times)",
                        clock::rfc3339(at)
                    )));
                }
                if !skipped.contains(&at) && skipped.len() >= MAX_SKIPS {
                    return Err(Error::Conflict(
                        "skip_limit",
                        format!("a schedule may skip at most {MAX_SKIPS} upcoming ticks"),
                    ));
                }
                skipped.insert(at);
            } else {
                skipped.remove(&at);
            }
            let mut next = s.clone();
            next.timing.skipped = skipped.clone();
            // A tick that is already due stays due, unless it is the one being skipped.
            let next_due = match s.row.next_due_at {
                Some(due) if due <= now && due != at => Some(due),
                _ => next.reschedule(now),
            };
            Ok(ScheduleRow {
                skipped: encode_skipped(&skipped),
                next_due_at: next_due,
                updated_at: now,
                ..s.row.clone()
            })
        })
        .await
    }

    /// Fires the schedule once now, outside its cadence (also while paused).
    pub async fn trigger(
        &self,
        actor: &Actor,
        agent_id: &str,
        r: &ScheduleRef,
    ) -> Result<Schedule> {
        let s = self.get(actor, agent_id, r).await?;
        self.fire(
            &s,
            Fire::Manual {
                at: clock::now_ms(),
            },
        )
        .await?;
        self.get(actor, agent_id, &ScheduleRef::Id(s.row.id)).await
    }

    /// Reads the schedule, computes its new row with `f` and writes it only if the row did not
    /// change meanwhile (a tick or another request); retries a few times otherwise.
    async fn mutate<F>(
        &self,
        actor: &Actor,
        agent_id: &str,
        r: &ScheduleRef,
        f: F,
    ) -> Result<Schedule>
    where
        F: Fn(&Schedule, i64) -> Result<ScheduleRow>,
    {
        for _ in 0..MAX_ATTEMPTS {
            let current = self.get(actor, agent_id, r).await?;
            let new = f(&current, clock::now_ms())?;
            let done = self
                .store()
                .schedules()
                .replace_if_unchanged(current.row, new.clone())
                .await?;
            if done {
                self.wake.notify_one();
                return Schedule::from_row(new);
            }
        }
        Err(Error::Conflict(
            CHANGED,
            "the schedule kept changing while it was being updated; try again".into(),
        ))
    }

    /// The slug of a workspace (a firing's actor needs it for the workspace's drive).
    pub(crate) async fn workspace_slug(&self, workspace_id: &str) -> Result<String> {
        self.store()
            .schedules()
            .workspace_slug(workspace_id)
            .await?
            .ok_or(Error::NotFound)
    }

    /// Creates the session of one firing, moving the schedule on in the same transaction.
    /// A tick fires only from the row it was computed from (else `schedule_changed`, nothing
    /// written). Returns the new session's id.
    pub async fn fire(&self, s: &Schedule, fire: Fire) -> Result<String> {
        let slug = self.workspace_slug(&s.row.workspace_id).await?;
        self.fire_in(s, fire, slug).await
    }

    /// [`Schedules::fire`] for a caller that knows the workspace's slug. The tick's task is a
    /// session opened for the schedule's agent with the initial input as its first message, and
    /// an agent platform task (named after the schedule and the tick, with the schedule's params
    /// and metadata). It runs as the schedule's creator, on the schedule channel, and only while
    /// the creator still belongs to the workspace (checked in the transaction that creates it).
    pub(crate) async fn fire_in(&self, s: &Schedule, fire: Fire, slug: String) -> Result<String> {
        let actor = Actor {
            workspace_id: s.row.workspace_id.clone(),
            workspace_slug: slug,
            user_id: s.creator.user_id().to_owned(),
            sender: s.creator.sender(),
            channel: Channel::Schedule,
        };
        let creator = s.creator.clone();
        let fire_time = fire.fire_time();
        let label = s.label(fire_time);
        let title = match fire {
            Fire::Tick {
                catch_up: false, ..
            } => format!("{} · {label}", s.row.name),
            Fire::Tick { catch_up: true, .. } => format!("{} · {label} (catch-up)", s.row.name),
            Fire::Manual { .. } => format!("{} · {label} (run now)", s.row.name),
        };
        let session_id = crate::ids::new_id();
        // Task names are unique in a workspace: a tick's names its schedule and nominal time (one
        // task per tick), a manual run's its own id.
        let task_name = match fire {
            Fire::Tick { .. } => {
                format!("scheduled-run:{}:{}", s.row.id, clock::rfc3339(fire_time))
            }
            Fire::Manual { .. } => format!("scheduled-run:{}:manual:{session_id}", s.row.id),
        };
        let mut metadata = Map::new();
        metadata.insert("display_name".into(), json!(title));
        if let Some(Value::Object(m)) = &s.task_metadata {
            metadata.extend(m.clone());
        }
        metadata.insert("schedule_id".into(), json!(s.row.id));
        metadata.insert("schedule_name".into(), json!(s.row.name));
        metadata.insert("trigger_type".into(), json!(fire.trigger_type().name()));
        metadata.insert("fire_time".into(), json!(clock::rfc3339(fire_time)));
        let task_metadata = Value::Object(metadata).to_string();
        let task_params = s.task_params.as_ref().map(Value::to_string);
        let run = ScheduleRunRow {
            schedule_id: s.row.id.clone(),
            fire_time,
            trigger_type: fire.trigger_type(),
        };
        let expected = s.row.clone();
        let skipped_now = s.timing.skipped.clone();
        let input = OpenIn {
            id: session_id,
            agent_id: s.row.agent_id.clone(),
            title: Some(title),
            engine: None,
            first: Some(MessageIn {
                prompt: s.initial_input.content.clone(),
                tier: None,
                behavior: Behavior::Steer,
                common: InputCommon::default(),
                busy: crate::sessions::busy::BusyPolicy::Enqueue,
            }),
        };
        // Every check is made in the transaction, after the session's rows are in place but
        // before the commit: an error there creates nothing.
        let advance: ScheduleAdvance =
            std::sync::Arc::new(move |current: ScheduleRow, now: i64| {
                Ok(match fire {
                    Fire::Tick { next, .. } => {
                        if current != expected || current.paused {
                            return Err(crate::store::Error::Conflict(
                                CHANGED,
                                "the schedule changed".into(),
                            ));
                        }
                        let kept: BTreeSet<i64> = skipped_now.range(now + 1..).copied().collect();
                        ScheduleRow {
                            next_due_at: next,
                            skipped: encode_skipped(&kept),
                            num_actions: current.num_actions + 1,
                            last_action_at: Some(now),
                            ..current
                        }
                    }
                    Fire::Manual { .. } => ScheduleRow {
                        num_actions: current.num_actions + 1,
                        last_action_at: Some(now),
                        ..current
                    },
                })
            });
        let link = OpenLink::ScheduleRun {
            schedule_id: s.row.id.clone(),
            creator: match creator {
                Creator::User { user_id } => ScheduleCreator::User(user_id),
                Creator::ServiceAccount { service_account_id } => {
                    ScheduleCreator::ServiceAccount(service_account_id)
                }
            },
            advance,
            task_name,
            task_params,
            task_metadata,
            run,
        };
        let opened = self.sessions.open(&actor, input, link).await?;
        // No wake-up: the scheduler fired this itself, and a trigger leaves the next tick be.
        match opened {
            Opened::Created {
                submitted: Some(submitted),
                ..
            } => Ok(submitted.key.id),
            _ => Err(Error::Internal(
                "a schedule's task was opened without its first message".into(),
            )),
        }
    }

    /// Moves a schedule past a tick that cannot make a session (its creator left the workspace,
    /// its agent's folder cannot be made), so one broken schedule never stalls the others.
    async fn consume(&self, row: &ScheduleRow, next: Option<i64>) -> Result<()> {
        Ok(self
            .store()
            .schedules()
            .advance_if_unchanged(row.clone(), move |expected, now| {
                let kept: BTreeSet<i64> = parse_skipped(&expected.skipped)
                    .unwrap_or_default()
                    .range(now + 1..)
                    .copied()
                    .collect();
                ScheduleRow {
                    next_due_at: next,
                    skipped: encode_skipped(&kept),
                    ..expected
                }
            })
            .await
            .map(|_| ())?)
    }
}

fn to_json<T: Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Internal(format!("cannot encode: {e}")))
}
