//! Listing a workspace's sessions and searching their prompts: the keyset list and its filters,
//! the plan of a search, an agent's activity view, and the rows of the prompt search index (runs
//! of a session's prompts, see `prompt_rows`), which the writer feeds.

use super::prompt_rows::{
    PROMPT_CLASS_ENDS, PROMPT_ROWS_JOINED, prompt_row_class, prompt_run, prompt_search_key,
};
use super::session_rows::{SESSION_COLUMNS, session_from_row};
use super::sql::{Db, Dialect, Value as SqlValue, params};
use super::{SessionKey, SessionRow, Tx, session_row_by_pk};
use crate::error::Result;

/// The statements of [`Tx::write_prompt_index`] in each dialect. Each takes the session's pk as
/// `?1` (SQLite's statements leave it unused: their rowids hold it) and a key range `?2 ..< ?3`.
struct PromptRowSql {
    /// The newest [`PROMPT_ROWS_JOINED`]` - 1` rows before the key `?3`, newest first: key and
    /// bytes. The limit is written out: SQLite plans a full-text table's query for its `LIMIT`'s
    /// value, so a bound limit would have the statement prepared again at every run.
    newest: &'static str,
    /// The text of the rows in the range, in order.
    texts: &'static str,
    delete: &'static str,
    /// A row at key `?2` with text `?3`.
    insert: &'static str,
}

const _: () = assert!(
    PROMPT_ROWS_JOINED - 1 == 7,
    "the LIMIT of `PromptRowSql::newest`"
);

impl PromptRowSql {
    fn of(postgres: bool) -> PromptRowSql {
        if postgres {
            PromptRowSql {
                newest: "SELECT seq, octet_length(prompts) FROM session_search_prompts
                         WHERE session_pk = ?1 AND seq >= ?2 AND seq < ?3
                         ORDER BY seq DESC LIMIT 7",
                texts: "SELECT prompts FROM session_search_prompts
                        WHERE session_pk = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq",
                delete: "DELETE FROM session_search_prompts
                         WHERE session_pk = ?1 AND seq >= ?2 AND seq < ?3",
                insert: "INSERT INTO session_search_prompts (session_pk, seq, prompts)
                         VALUES (?1, ?2, ?3)",
            }
        } else {
            PromptRowSql {
                newest: "SELECT rowid, octet_length(prompts) FROM session_search_prompts
                         WHERE rowid >= ?2 AND rowid < ?3
                         ORDER BY rowid DESC LIMIT 7",
                texts: "SELECT prompts FROM session_search_prompts
                        WHERE rowid >= ?2 AND rowid < ?3 ORDER BY rowid",
                delete: "DELETE FROM session_search_prompts
                         WHERE rowid >= ?2 AND rowid < ?3",
                insert: "INSERT INTO session_search_prompts (rowid, prompts)
                         VALUES (?2, ?3)",
            }
        }
    }
}

/// Filters of the session list (seed S9).
#[derive(Debug, Default, Clone)]
pub struct ListFilter {
    pub bucket: Option<String>,
    pub archived_only: bool,
    /// Archived and unarchived sessions alike (`archived_only` is then ignored).
    pub include_archived: bool,
    pub agent_id: Option<String>,
    pub exclude_default: bool,
    /// An FTS5 query already built from the user's words.
    pub fts_query: Option<String>,
    /// Keyset position: rows strictly older than `(created_at, id)`.
    pub after: Option<(i64, String)>,
    pub limit: u32,
}

/// One page of the list, newest first, plus whether more rows follow.
///
/// Without a search the page walks an index in list order and stops after `limit + 1` rows. With
/// one, few matches (fewer than [`SEARCH_MIN_BOUND`]) are read from the full-text index, joined
/// and sorted, which costs their number and nothing else. Many are found on SQLite by walking the
/// list in chunks and asking the full-text index only for the matches within each chunk's range
/// of keys ([`SearchPlan::InRanges`]): a common word soon fills a page, and each range costs the
/// matches in it, not all of them. A walk that passes many rows without filling the page falls
/// back to the choice of [`search_plan`]. PostgreSQL always takes that choice. Every plan gives
/// the same rows.
pub(crate) fn list_sessions(
    conn: &Db,
    workspace_id: &str,
    user_id: &str,
    f: &ListFilter,
) -> Result<(Vec<SessionRow>, bool)> {
    let Some(q) = &f.fts_query else {
        return list_sessions_with(conn, workspace_id, user_id, f, None);
    };
    if conn.dialect() == Dialect::Postgres || !ranges_seek(&search_terms(q)) {
        let plan = search_plan(conn, q, f.limit)?;
        return list_sessions_with(conn, workspace_id, user_id, f, Some(plan));
    }
    if count_matches(conn, q, SEARCH_MIN_BOUND)? < SEARCH_MIN_BOUND {
        return list_sessions_with(
            conn,
            workspace_id,
            user_id,
            f,
            Some(SearchPlan::FromMatches),
        );
    }
    let mut walk = RangeWalk::new(conn, f)?;
    let budget = (f.limit as usize + 1) * WALK_BUDGET_PER_ROW;
    walk.run(conn, workspace_id, f, Some(budget.max(WALK_BUDGET_MIN)))?;
    if !walk.done && search_plan(conn, q, f.limit)? == SearchPlan::FromMatches {
        return list_sessions_with(
            conn,
            workspace_id,
            user_id,
            f,
            Some(SearchPlan::FromMatches),
        );
    }
    while !walk.done {
        // Ranges that have covered the whole key space once cost what one read of every match
        // costs; the rest of the page is then found by the walk over the set of all matches.
        if walk.span > walk.keys {
            let rest = ListFilter {
                after: walk.after.clone(),
                limit: (f.limit as usize + 1 - walk.found.len()) as u32,
                ..f.clone()
            };
            let (sql, args) = list_query(
                conn.dialect(),
                workspace_id,
                &rest,
                Some(SearchPlan::FromList),
                ListColumns::Keys,
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let pks = stmt.query_map(named(&args).as_slice(), |r| r.get::<_, i64>(0))?;
            for pk in pks {
                walk.found.push(pk?);
            }
            break;
        }
        walk.run(conn, workspace_id, f, Some(WALK_BUDGET_MIN))?;
    }
    walk.rows(conn, user_id, f.limit)
}

/// Rows a walk in ranges may pass per row of the page before the plan is reconsidered, and at
/// least this many in all: a word that has not filled the page by then is not common, and
/// reading its matches may cost less than walking on.
const WALK_BUDGET_PER_ROW: usize = 64;

const WALK_BUDGET_MIN: usize = 4_096;

/// The first chunk of a walk holds this many rows per row of the page (a word in one session in
/// eight fills the page in one chunk); each next chunk is at most twice as long, and no longer
/// than the matches found so far say the page needs, up to the largest.
const WALK_FIRST_CHUNK_PER_ROW: usize = 8;

const WALK_MAX_CHUNK: usize = 8_192;

/// The prefix lengths the full-text indexes keep (migration 0013): a prefix term of one of these
/// lengths is one doclist that FTS5 seeks by rowid.
const PREFIX_INDEX_CHARS: std::ops::RangeInclusive<usize> = 1..=12;

/// Whether every term of an FTS5 query of the query builder is a doclist that FTS5 seeks by
/// rowid: a plain word always, a prefix when the prefix index holds its length. A longer prefix
/// is merged from every term that starts with it on each query, however narrow its rowid range.
fn ranges_seek(terms: &[&str]) -> bool {
    terms.iter().all(|t| match t.strip_suffix('*') {
        Some(word) => PREFIX_INDEX_CHARS.contains(&word.trim_matches('"').chars().count()),
        None => true,
    })
}

/// The sessions' largest key: the size of the key space a range walk covers.
fn max_session_pk(conn: &Db) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT COALESCE(max(pk), 0) FROM sessions")?
        .query_row([], |r| r.get(0))?)
}

/// A walk of the list in chunks ([`SearchPlan::InRanges`]), resumable: the matches found so far
/// in list order and where the walk stands.
struct RangeWalk {
    found: Vec<i64>,
    after: Option<(i64, String)>,
    chunk: usize,
    /// The sum of the chunks' key ranges (what the full-text index has been asked to cover).
    span: i64,
    /// The rows the walk has passed.
    passed: usize,
    /// The sessions' largest key: the size of the key space.
    keys: i64,
    done: bool,
    want: usize,
}

impl RangeWalk {
    fn new(conn: &Db, f: &ListFilter) -> Result<RangeWalk> {
        let want = f.limit as usize + 1;
        Ok(RangeWalk {
            found: Vec::new(),
            after: f.after.clone(),
            chunk: (want * WALK_FIRST_CHUNK_PER_ROW).clamp(64, WALK_MAX_CHUNK),
            span: 0,
            passed: 0,
            keys: max_session_pk(conn)?,
            done: false,
            want,
        })
    }

    /// Walks on until the page is full, the list ends or (with a budget) `budget` more rows have
    /// been passed. Each chunk is read in list order with the page's filters (keys only); the
    /// full-text index is then asked for the matches with keys between the chunk's least and
    /// greatest, and the chunk's rows among them are kept in order.
    fn run(
        &mut self,
        conn: &Db,
        workspace_id: &str,
        f: &ListFilter,
        budget: Option<usize>,
    ) -> Result<()> {
        let terms = search_terms(f.fts_query.as_deref().unwrap_or_default());
        let residual = residual_conditions(f);
        let mut passed = 0;
        while !self.done && budget.is_none_or(|b| passed < b) {
            // The bucket and the agent pick the index walked; whether a session is archived or
            // some owner's default is asked of the matches only (the same index is walked either
            // way, and the chunk's rows need no table row of their own).
            let chunk = ListFilter {
                fts_query: None,
                after: self.after.clone(),
                // The list query reads one row past its limit.
                limit: self.chunk as u32 - 1,
                include_archived: true,
                exclude_default: false,
                ..f.clone()
            };
            let (sql, args) = list_query(
                conn.dialect(),
                workspace_id,
                &chunk,
                None,
                ListColumns::Keys,
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            let rows: Vec<(i64, i64, String)> = stmt
                .query_map(named(&args).as_slice(), |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?
                .collect::<super::sql::Result<_>>()?;
            passed += rows.len();
            let passed_now = rows.len();
            if rows.is_empty() {
                self.done = true;
                break;
            }
            let mut matches = std::collections::HashSet::new();
            for range in key_ranges(rows.iter().map(|r| r.0).collect()) {
                self.span = self.span.saturating_add(range.1 - range.0 + 1);
                matches.extend(matches_in_range(conn, &terms, range, self.keys)?);
            }
            let full = rows.len() == self.chunk;
            for (pk, at, id) in rows {
                let kept = matches.contains(&pk)
                    && match &residual {
                        Some(sql) => conn
                            .prepare_cached(sql)?
                            .query_row([pk], |r| r.get::<_, bool>(0))?,
                        None => true,
                    };
                if kept {
                    self.found.push(pk);
                    if self.found.len() == self.want {
                        self.done = true;
                        break;
                    }
                }
                self.after = Some((at, id));
            }
            self.done |= !full;
            self.passed += passed_now;
            // The next chunk is twice as long, or as long as the density of matches so far says
            // the rest of the page needs (and a quarter more), if that is less.
            let needed = match self.found.len() {
                0 => usize::MAX,
                found => (self.want - found.min(self.want)) * self.passed * 5 / (found * 4),
            };
            self.chunk = (self.chunk * 2).min(needed.max(64)).min(WALK_MAX_CHUNK);
        }
        Ok(())
    }

    /// The page of the matches found, as full rows, and whether more follow.
    ///
    /// The walk's statements each read the database as it is when they run, so a session deleted
    /// since the walk found it is left out of the page (it is gone), not an error of the list.
    fn rows(self, conn: &Db, user_id: &str, limit: u32) -> Result<(Vec<SessionRow>, bool)> {
        let more = self.found.len() > limit as usize;
        let mut rows = Vec::with_capacity(self.found.len().min(limit as usize));
        for pk in self.found.iter().take(limit as usize) {
            if let Some(row) = session_row_by_pk(conn, *pk, Some(user_id))? {
                rows.push(row);
            }
        }
        Ok((rows, more))
    }
}

/// The conditions of `f` that a walk in ranges asks of each match rather than of every row it
/// passes, as one query of the session's key (`?1`), or `None` when there are none.
fn residual_conditions(f: &ListFilter) -> Option<String> {
    let mut conditions = Vec::new();
    if !f.include_archived {
        conditions.push(if f.archived_only {
            "s.archived_at IS NOT NULL"
        } else {
            "s.archived_at IS NULL"
        });
    }
    if f.exclude_default {
        conditions.push("NOT EXISTS (SELECT 1 FROM default_sessions d WHERE d.session_id = s.id)");
    }
    (!conditions.is_empty()).then(|| {
        format!(
            "SELECT {} FROM sessions s WHERE s.pk = ?1",
            conditions.join(" AND ")
        )
    })
}

/// A session's prompt row key with `low` in its low 32 bits, or the largest key when it does not
/// fit (no prompt row has such a key: see `prompt_rows::prompt_search_key`).
fn prompt_key(pk: i64, low: i64) -> i64 {
    pk.checked_mul(super::prompt_rows::PROMPT_SEQS)
        .and_then(|k| k.checked_add(low))
        .unwrap_or(i64::MAX)
}

/// At most this many key ranges are read for one chunk.
const MAX_RANGES_PER_CHUNK: usize = 8;

/// The ranges of keys that cover `pks` (a chunk of the list): one from the least to the greatest,
/// cut at the widest gaps that are wider than the chunk is long (at most
/// [`MAX_RANGES_PER_CHUNK`] ranges). Keys mostly follow the list's order, so a chunk's keys are
/// close together, but not always: a session whose clock was ahead or behind, or one created by
/// another process, sits among keys far from its own, and a single range would span every
/// session between them.
fn key_ranges(mut pks: Vec<i64>) -> Vec<(i64, i64)> {
    pks.sort_unstable();
    let wide = pks.len() as i64;
    let mut cuts: Vec<(i64, usize)> = pks
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w[1] - w[0] > wide)
        .map(|(i, w)| (w[1] - w[0], i + 1))
        .collect();
    cuts.sort_unstable_by(|a, b| b.cmp(a));
    cuts.truncate(MAX_RANGES_PER_CHUNK - 1);
    let mut cuts: Vec<usize> = cuts.into_iter().map(|(_, at)| at).collect();
    cuts.sort_unstable();
    let mut ranges = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for end in cuts.into_iter().chain(std::iter::once(pks.len())) {
        if let (Some(lo), Some(hi)) = (pks.get(start), pks.get(end.wrapping_sub(1))) {
            ranges.push((*lo, *hi));
        }
        start = end;
    }
    ranges
}

/// The sessions (`pk`) from `lo` to `hi` in which every term of an FTS5 search is found, as
/// [`search_matches`] finds them in all sessions: per term, the title index's rowids (the
/// sessions' keys) and the prompt rows' (`lo·2^32 ..= hi·2^32 + 2^32-1`) between them; with
/// several terms, the sets' intersection. FTS5 seeks each term's doclist to the range and stops
/// past it, from whichever end of the key space (`keys`) the range is nearer: a seek into a
/// doclist costs more the further it goes, and a page of the list is mostly the newest sessions.
fn matches_in_range(
    conn: &Db,
    terms: &[&str],
    (lo, hi): (i64, i64),
    keys: i64,
) -> Result<std::collections::HashSet<i64>> {
    let order = if keys - hi < lo {
        " ORDER BY rowid DESC"
    } else {
        ""
    };
    let titles = format!(
        "SELECT rowid FROM session_search WHERE session_search MATCH ?1 AND rowid BETWEEN ?2 AND ?3{order}"
    );
    let prompts = format!(
        "SELECT rowid >> 32 FROM session_search_prompts
         WHERE session_search_prompts MATCH ?1 AND rowid BETWEEN ?2 AND ?3{order}"
    );
    let (plo, phi) = (
        prompt_key(lo, 0),
        prompt_key(hi, super::prompt_rows::PROMPT_SEQS - 1),
    );
    let mut all: Option<std::collections::HashSet<i64>> = None;
    for term in terms {
        let mut found = std::collections::HashSet::new();
        for (sql, from, to) in [(&titles, lo, hi), (&prompts, plo, phi)] {
            let mut stmt = conn.prepare_cached(sql)?;
            for pk in stmt.query_map(params![*term, from, to], |r| r.get::<_, i64>(0))? {
                let pk = pk?;
                if all.as_ref().is_none_or(|a| a.contains(&pk)) {
                    found.insert(pk);
                }
            }
        }
        if found.is_empty() {
            return Ok(found);
        }
        all = Some(found);
    }
    Ok(all.unwrap_or_default())
}

/// How a search page finds its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchPlan {
    /// Read every match from the full-text index, keep the workspace's, sort them.
    FromMatches,
    /// Walk the list's index newest first and keep the rows found in the set of every match.
    FromList,
    /// Walk the list's index newest first in chunks and ask the full-text index for the matches
    /// within each chunk's range of keys (SQLite only; see [`list_sessions`]).
    InRanges,
}

/// Picks the cheaper of [`SearchPlan::FromMatches`] and [`SearchPlan::FromList`] for a search
/// page of `limit` rows.
///
/// Reading the matches and sorting them costs their number `m`. Walking the list index costs the
/// rows it passes before the page is full, about `limit · n / m` for `n` sessions, plus gathering
/// the matches (which FTS5 does for a prefix term in any case: it merges the doclists of every
/// term with that prefix). The walk only pays off when `m` is large, and the two meet near
/// `m = √(limit · n)`; so the matches are counted up to that bound (never further) and the side
/// of it they fall on decides. FTS5 cannot return matches in the list's `(created_at, id)` order
/// (its rowid is the session's insertion key), so no plan can read only a page of them.
pub(crate) fn search_plan(conn: &Db, fts_query: &str, limit: u32) -> Result<SearchPlan> {
    let sessions = max_session_pk(conn)?;
    let bound = ((f64::from(limit) + 1.0) * sessions as f64).sqrt() as i64;
    let bound = bound.clamp(SEARCH_MIN_BOUND, SEARCH_MAX_BOUND);
    Ok(if count_matches(conn, fts_query, bound)? < bound {
        SearchPlan::FromMatches
    } else {
        SearchPlan::FromList
    })
}

/// The number of sessions a search matches, counted up to `bound` (never further). A match is
/// a session, however many of its prompt rows hold the words.
///
/// With several terms, SQLite's `INTERSECT` gathers every term's sessions in full before it
/// yields one, so on SQLite the sessions whose title, or one of whose prompt rows, holds every
/// term are counted first: FTS5 finds those with one query and stops at `bound`. They are a part
/// of the matches, so when they reach `bound` the matches do.
fn count_matches(conn: &Db, fts_query: &str, bound: i64) -> Result<i64> {
    let terms = search_terms(fts_query);
    let dialect = conn.dialect();
    let count = |terms: &[&str]| -> Result<i64> {
        let sql = format!(
            "SELECT count(*) FROM (SELECT DISTINCT pk FROM ({}) m LIMIT :bound) d",
            search_matches(dialect, terms.len(), "UNION ALL")
        );
        let mut args = term_args(dialect, terms);
        args.push((":bound".into(), SqlValue::Integer(bound)));
        Ok(conn
            .prepare_cached(&sql)?
            .query_row(named(&args).as_slice(), |r| r.get(0))?)
    };
    if terms.len() > 1 && dialect == Dialect::Sqlite {
        let within_one_row = count(&[fts_query])?;
        if within_one_row >= bound {
            return Ok(within_one_row);
        }
    }
    count(&terms)
}

/// Below this many matches a search always reads them all (a few hundred rows cost well under
/// a millisecond).
const SEARCH_MIN_BOUND: i64 = 256;

/// Above this many matches a search always walks the list: sorting tens of thousands of joined
/// rows would cost more than a walk that finds a page among them.
const SEARCH_MAX_BOUND: i64 = 20_000;

/// The sessions (`pk`) in which every term of a search (parameters `:q0`, `:q1`, …; `terms` of
/// them) is found in the title or in any prompt, as they were when one document held them all: a
/// term's sessions are those whose title or one of whose prompt rows (a few consecutive prompts,
/// see `Tx::index_prompt`) match it, and the terms' sets are intersected. The title index's rowid
/// is the session's pk, a prompt row's rowid holds it above its low 32 bits
/// (`prompt_rows::prompt_search_key`). With one term, `union` is `UNION` for distinct sessions,
/// `UNION ALL` where the consumer removes duplicates itself (an intersection is always distinct).
///
/// On PostgreSQL the same sets come from the `tsvector` columns of both tables (keyed by
/// `session_pk`), each term a `tsquery` of one word.
fn search_matches(dialect: Dialect, terms: usize, union: &str) -> String {
    let term = |i: usize, union: &str| match dialect {
        Dialect::Sqlite => format!(
            "SELECT rowid AS pk FROM session_search WHERE session_search MATCH :q{i}
             {union} SELECT rowid >> 32 FROM session_search_prompts
             WHERE session_search_prompts MATCH :q{i}"
        ),
        Dialect::Postgres => format!(
            "SELECT session_pk AS pk FROM session_search
             WHERE document @@ to_tsquery('session_search', :q{i})
             {union} SELECT session_pk FROM session_search_prompts
             WHERE document @@ to_tsquery('session_search', :q{i})"
        ),
    };
    match terms {
        0 | 1 => term(0, union),
        // Compound operators bind left to right: each term's union is a subquery of its own.
        n => (0..n)
            .map(|i| format!("SELECT pk FROM ({}) t{i}", term(i, "UNION")))
            .collect::<Vec<_>>()
            .join(" INTERSECT "),
    }
}

/// The terms of an FTS5 query built by the store's query builder: quoted words separated by
/// spaces (the words hold no quote or space), the last one maybe a prefix (`"w"*`).
fn search_terms(fts_query: &str) -> Vec<&str> {
    let terms: Vec<&str> = fts_query.split(' ').filter(|t| !t.is_empty()).collect();
    if terms.is_empty() {
        vec![fts_query]
    } else {
        terms
    }
}

/// The `:q0`, `:q1`, … parameters of [`search_matches`]: the FTS5 terms as they are, or each as
/// a PostgreSQL `tsquery` of the same word (`'w'`, a prefix `'w':*`).
fn term_args(dialect: Dialect, terms: &[&str]) -> Vec<(String, SqlValue)> {
    terms
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let text = match dialect {
                Dialect::Sqlite => (*t).to_owned(),
                Dialect::Postgres => tsquery_term(t),
            };
            (format!(":q{i}"), SqlValue::Text(text))
        })
        .collect()
}

/// An FTS5 term of the query builder (`"w"` or `"w"*`) as a `tsquery`.
fn tsquery_term(term: &str) -> String {
    let (word, prefix) = match term.strip_suffix('*') {
        Some(w) => (w, true),
        None => (term, false),
    };
    let word = word
        .trim_matches('"')
        .replace('\\', "\\\\")
        .replace('\'', "''");
    if prefix {
        format!("'{word}':*")
    } else {
        format!("'{word}'")
    }
}

/// Named parameters as statements take them.
fn named<K: AsRef<str>>(args: &[(K, SqlValue)]) -> Vec<(&str, &dyn super::sql::ToSql)> {
    args.iter()
        .map(|(k, v)| (k.as_ref(), v as &dyn super::sql::ToSql))
        .collect()
}

/// [`list_sessions`] with the search plan chosen by the caller (tests compare the plans).
/// [`SearchPlan::InRanges`] walks to the end of the page, however many rows that takes.
pub(crate) fn list_sessions_with(
    conn: &Db,
    workspace_id: &str,
    user_id: &str,
    f: &ListFilter,
    plan: Option<SearchPlan>,
) -> Result<(Vec<SessionRow>, bool)> {
    if plan == Some(SearchPlan::InRanges) && f.fts_query.is_some() {
        let mut walk = RangeWalk::new(conn, f)?;
        walk.run(conn, workspace_id, f, None)?;
        return walk.rows(conn, user_id, f.limit);
    }
    let (sql, mut args) = list_query(conn.dialect(), workspace_id, f, plan, ListColumns::Rows);
    args.push((":user".into(), SqlValue::Text(user_id.to_owned())));
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows: Vec<SessionRow> = stmt
        .query_map(named(&args).as_slice(), session_from_row)?
        .collect::<super::sql::Result<_>>()?;
    let more = rows.len() > f.limit as usize;
    rows.truncate(f.limit as usize);
    Ok((rows, more))
}

/// What a list query reads of each row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListColumns {
    /// [`SESSION_COLUMNS`], which also take `:user`.
    Rows,
    /// `s.pk, s.created_at, s.id`: what the list's indexes hold, so that a walk without other
    /// conditions reads no table row (every session has its agent: a foreign key).
    Keys,
}

/// The SQL of a list page (at most `limit + 1` rows) and its named parameters. A search is part
/// of the query with [`SearchPlan::FromMatches`] and [`SearchPlan::FromList`] only.
fn list_query(
    dialect: Dialect,
    workspace_id: &str,
    f: &ListFilter,
    plan: Option<SearchPlan>,
    columns: ListColumns,
) -> (String, Vec<(std::borrow::Cow<'static, str>, SqlValue)>) {
    let (columns, agents) = match columns {
        ListColumns::Rows => (SESSION_COLUMNS, " JOIN agents a ON a.id = s.agent_id"),
        ListColumns::Keys => ("s.pk, s.created_at, s.id", ""),
    };
    let search = match plan {
        Some(SearchPlan::FromMatches | SearchPlan::FromList) => f.fts_query.as_deref(),
        _ => None,
    };
    let terms = search.map(search_terms).unwrap_or_default();
    let mut sql = match (search, plan) {
        // SQLite's CROSS JOIN keeps the matches as the outer loop; PostgreSQL plans joins itself.
        (Some(_), Some(SearchPlan::FromMatches)) => format!(
            "SELECT {columns} FROM ({}) f {} sessions s ON s.pk = f.pk{agents}
             WHERE s.workspace_id = :ws",
            search_matches(dialect, terms.len(), "UNION"),
            match dialect {
                Dialect::Sqlite => "CROSS JOIN",
                Dialect::Postgres => "JOIN",
            }
        ),
        _ => format!("SELECT {columns} FROM sessions s{agents} WHERE s.workspace_id = :ws"),
    };
    let mut args: Vec<(std::borrow::Cow<'static, str>, SqlValue)> = vec![
        (":ws".into(), SqlValue::Text(workspace_id.to_owned())),
        (":limit".into(), SqlValue::Integer(f.limit as i64 + 1)),
    ];
    if !f.include_archived {
        sql.push_str(if f.archived_only {
            " AND s.archived_at IS NOT NULL"
        } else {
            " AND s.archived_at IS NULL"
        });
    }
    if let Some(bucket) = &f.bucket {
        sql.push_str(" AND s.bucket = :bucket");
        args.push((":bucket".into(), SqlValue::Text(bucket.clone())));
    }
    if let Some(agent) = &f.agent_id {
        sql.push_str(" AND s.agent_id = :agent");
        args.push((":agent".into(), SqlValue::Text(agent.clone())));
    }
    if f.exclude_default {
        sql.push_str(
            " AND NOT EXISTS (SELECT 1 FROM default_sessions d WHERE d.session_id = s.id)",
        );
    }
    if let Some((at, id)) = &f.after {
        sql.push_str(" AND (s.created_at < :at OR (s.created_at = :at AND s.id < :after_id))");
        args.push((":at".into(), SqlValue::Integer(*at)));
        args.push((":after_id".into(), SqlValue::Text(id.clone())));
    }
    if search.is_some() {
        if plan == Some(SearchPlan::FromList) {
            // The matches are gathered once into a set that each row of the walk is looked up
            // in (a per-row FTS5 probe costs ~100 µs: it rebuilds the query's doclists).
            sql.push_str(&format!(
                " AND s.pk IN ({})",
                search_matches(dialect, terms.len(), "UNION ALL")
            ));
        }
        args.extend(
            term_args(dialect, &terms)
                .into_iter()
                .map(|(k, v)| (k.into(), v)),
        );
    }
    sql.push_str(" ORDER BY s.created_at DESC, s.id DESC LIMIT :limit");
    (sql, args)
}

/// An agent's sessions for the activity view: asking > running > scheduled > done, newest first;
/// archived sessions and the agent's default chat are left out. Returns `limit + 1` rows at most.
///
/// The ORDER BY is the expression of the `sessions_activity` index (migration 0009), so the page
/// is read in index order and costs the same for ten sessions or a million; keep the two equal.
pub(crate) fn agent_activity(
    conn: &Db,
    agent_id: &str,
    user_id: &str,
    limit: u32,
) -> Result<Vec<SessionRow>> {
    let mut stmt = conn.prepare_cached(&activity_sql())?;
    let rows = stmt.query_map(
        sessiond_sql::named_params! {":agent": agent_id, ":user": user_id, ":limit": limit as i64 + 1},
        session_from_row,
    )?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

fn activity_sql() -> String {
    format!(
        "SELECT {SESSION_COLUMNS} FROM sessions s JOIN agents a ON a.id = s.agent_id
         WHERE s.agent_id = :agent AND s.archived_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM default_sessions d WHERE d.agent_id = s.agent_id AND d.session_id = s.id)
         ORDER BY CASE s.bucket WHEN 'asking' THEN 0 WHEN 'running' THEN 1 WHEN 'scheduled' THEN 2 ELSE 3 END,
                  s.created_at DESC, s.id DESC
         LIMIT :limit"
    )
}

impl Tx<'_> {
    /// Indexes the prompt of the `prompt_submitted` event at `seq` for search, in a row of the
    /// session's prompt index (see [`Tx::write_prompt_index`] for how rows are kept).
    ///
    /// On SQLite the prompt goes to the search backlog after the batch's last job (see
    /// [`super::writer::QueuedPrompt`]), in the same transaction, and into the index with many
    /// others later (see `prompt_backlog`); on PostgreSQL into the index at once, in the job's
    /// own statements.
    pub(crate) fn index_prompt(&mut self, key: &SessionKey, seq: u64, prompt: &str) -> Result<()> {
        if self.conn.dialect() == Dialect::Postgres {
            return self.write_prompt_index(key, seq, prompt);
        }
        self.prompts.push(super::writer::QueuedPrompt {
            key: key.clone(),
            seq,
            text: prompt.to_owned(),
        });
        Ok(())
    }

    /// Writes a prompt's search row now (see [`Tx::index_prompt`]).
    ///
    /// A full-text index re-reads a row's whole text to change it, so a row that grew by one
    /// prompt at a time would cost its whole size for every prompt. A prompt therefore gets a
    /// row of its own, and the session's newest rows of its [`prompt_row_class`] or smaller are
    /// joined with it into one row (holding them in order, one per line) as soon as they reach
    /// that class's end ([`PROMPT_CLASS_ENDS`]; see [`prompt_run`]). Like the carry of a
    /// counter, the joined row may join the rows before it in turn. A prompt's text is thus
    /// re-indexed about twice per class it climbs (a few times its size in all), and a session's
    /// rows are mostly sealed rows of 1–2 KiB with a few smaller ones after them: a search
    /// gathers about one row per 1–2 KiB of prompts, whatever their lengths and their mix.
    ///
    /// A row is keyed by its session and the seq of its first prompt (on SQLite packed into the
    /// rowid, see [`prompt_search_key`]; on PostgreSQL the key's two columns). A prompt whose key
    /// does not fit (a session pk past 2^31 or a seq past 2^32, far beyond what one machine
    /// writes) is left out of search rather than failing the write that carries it.
    pub(super) fn write_prompt_index(
        &mut self,
        key: &SessionKey,
        seq: u64,
        prompt: &str,
    ) -> Result<()> {
        let postgres = self.conn.dialect() == Dialect::Postgres;
        // The key range of the session's rows before this prompt, in the dialect's terms.
        let (lo, row) = if postgres {
            (0, seq as i64)
        } else {
            match (prompt_search_key(key.pk, 0), prompt_search_key(key.pk, seq)) {
                (Some(lo), Some(row)) => (lo, row),
                _ => {
                    tracing::warn!(
                        session = %key.id,
                        seq,
                        "prompt not indexed for search: its key is out of range"
                    );
                    return Ok(());
                }
            }
        };
        let sql = PromptRowSql::of(postgres);
        // The row being written: its key and text. Joining it with the rows before it makes a
        // row of a higher class, which may join the rows before it in turn (the carry).
        let (mut row, mut text) = (row, prompt.to_owned());
        loop {
            // A sealed row joins nothing: no need to read the rows before it.
            if prompt_row_class(text.len()) == PROMPT_CLASS_ENDS.len() {
                break;
            }
            let newest: Vec<(i64, i64)> = self
                .conn
                .prepare_cached(sql.newest)?
                .query_map(params![key.pk, lo, row], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<super::sql::Result<_>>()?;
            let Some((first, bytes)) = prompt_run(&newest, text.len()) else {
                break;
            };
            let mut joined = String::with_capacity(bytes);
            for part in self
                .conn
                .prepare_cached(sql.texts)?
                .query_map(params![key.pk, first, row], |r| r.get::<_, String>(0))?
            {
                joined.push_str(&part?);
                joined.push('\n');
            }
            joined.push_str(&text);
            self.conn
                .prepare_cached(sql.delete)?
                .execute(params![key.pk, first, row])?;
            (row, text) = (first, joined);
        }
        self.conn
            .prepare_cached(sql.insert)?
            .execute_later(params![key.pk, row, text])?;
        Ok(())
    }

    /// Rewrites the title a session is searched by.
    pub(crate) fn index_title(&mut self, key: &SessionKey, title: &str) -> Result<()> {
        let sql = match self.conn.dialect() {
            Dialect::Sqlite => "UPDATE session_search SET title = ?2 WHERE rowid = ?1",
            Dialect::Postgres => "UPDATE session_search SET title = ?2 WHERE session_pk = ?1",
        };
        self.conn
            .prepare_cached(sql)?
            .execute(params![key.pk, title])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prompts of session `i` in the test database: one session in 13 has 40, the words
    /// only it holds in its first; one in 17 has a prompt with two words its title may lack; one
    /// in 19 a prompt with one of them (its title may hold the other).
    fn prompts(i: i64) -> Vec<String> {
        let mut out = Vec::new();
        if i % 13 == 0 {
            out.push(format!("needle {i} zebra"));
            out.extend((1..40).map(|k| format!("filler text {k}")));
        }
        if i % 17 == 0 {
            out.push("common deploy together".into());
        }
        if i % 19 == 0 {
            out.push("deploy alone".into());
        }
        out
    }

    /// A migrated in-memory database with `n` sessions over two workspaces and three agents, in
    /// an order unrelated to their keys, with equal timestamps, archived sessions, a default chat,
    /// every bucket, titles with a common word, a rare one and a shared prefix, and the prompts
    /// of [`prompts`] indexed one row each (as a database migrated to one row per prompt has
    /// them).
    fn db(n: i64) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        super::super::migrate::migrate(&conn).unwrap();
        conn.execute_batch(
            "INSERT INTO workspaces (id, slug, name, created_at) VALUES ('w1','w1','W',0), ('w2','w2','W',0);
             INSERT INTO agents (id, workspace_id, slug, name, created_at)
               VALUES ('a1','w1','a1','A',0), ('a2','w1','a2','B',0), ('b1','w2','b1','C',0);",
        )
        .unwrap();
        conn.execute(
            "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?1)
             INSERT INTO sessions (pk, id, workspace_id, agent_id, user_id, title, title_origin,
                 title_status, turn_status, bucket, created_at, updated_at, archived_at)
             SELECT i, printf('s%06d', (i * 7919) % 1000003),
                 CASE WHEN i % 7 = 0 THEN 'w2' ELSE 'w1' END,
                 CASE WHEN i % 7 = 0 THEN 'b1' WHEN i % 3 = 0 THEN 'a2' ELSE 'a1' END,
                 'u',
                 'title ' || i || CASE WHEN i % 3 = 0 THEN ' common' ELSE '' END
                     || CASE WHEN i % 97 = 5 THEN ' rare' ELSE '' END
                     || CASE i % 4 WHEN 1 THEN ' deploy' WHEN 2 THEN ' deployed' ELSE '' END,
                 'excerpt', 'complete', 'complete',
                 CASE i % 5 WHEN 0 THEN 'asking' WHEN 1 THEN 'running' WHEN 2 THEN 'scheduled' ELSE 'done' END,
                 ((i * 37) % ?1) / 2, 0,
                 CASE WHEN i % 11 = 0 THEN 1 END
             FROM c",
            [n],
        )
        .unwrap();
        conn.execute_batch(
            "INSERT INTO session_search (rowid, title) SELECT pk, title FROM sessions;
             INSERT INTO default_sessions (agent_id, session_id) SELECT 'a1', id FROM sessions WHERE pk = 4;",
        )
        .unwrap();
        let mut insert = conn
            .prepare("INSERT INTO session_search_prompts (rowid, prompts) VALUES (?1, ?2)")
            .unwrap();
        for i in 1..=n {
            for (k, prompt) in prompts(i).iter().enumerate() {
                let rowid = super::super::prompt_rows::prompt_search_key(i, k as u64 + 1).unwrap();
                insert.execute(rusqlite::params![rowid, prompt]).unwrap();
            }
        }
        drop(insert);
        conn
    }

    /// Whether `texts` (a session's title and prompts) hold every word between them, the last
    /// one as a prefix (what a search of [`fts`] means for a session).
    fn holds(texts: &[String], words: &str) -> bool {
        let t: Vec<&str> = texts.iter().flat_map(|t| t.split(' ')).collect();
        let mut w: Vec<&str> = words.split(' ').collect();
        let last = w.pop().unwrap();
        w.iter().all(|w| t.contains(w)) && t.iter().any(|t| t.starts_with(last))
    }

    /// Free text as the sessions module turns it into an FTS5 query: quoted words, the last
    /// one a prefix.
    fn fts(words: &str) -> String {
        let w: Vec<String> = words.split(' ').map(|w| format!("\"{w}\"")).collect();
        format!("{}*", w.join(" "))
    }

    fn ids(rows: &[SessionRow]) -> Vec<String> {
        rows.iter().map(|r| r.id.clone()).collect()
    }

    fn filters() -> Vec<ListFilter> {
        let base = ListFilter {
            limit: 20,
            ..Default::default()
        };
        vec![
            base.clone(),
            ListFilter {
                archived_only: true,
                ..base.clone()
            },
            ListFilter {
                include_archived: true,
                limit: 100,
                ..base.clone()
            },
            ListFilter {
                bucket: Some("asking".into()),
                ..base.clone()
            },
            ListFilter {
                agent_id: Some("a2".into()),
                exclude_default: true,
                ..base.clone()
            },
            ListFilter {
                exclude_default: true,
                limit: 1,
                ..base.clone()
            },
        ]
    }

    /// Both search plans give the same pages as the words' plain meaning (every word in the
    /// title or in any prompt, the last one as a prefix), page after page.
    #[test]
    fn both_search_plans_answer_alike_and_as_the_words_mean() {
        let conn = db(3_000);
        let conn = &Db::sqlite(&conn);
        for words in [
            "common",
            "rare",
            "deplo",
            "common deploy",
            "nothing",
            "needle",
            "zebr",
            "filler text 39",
            "deploy alone",
            // Words found only in different prompt rows, or in the title and a prompt.
            "zebra filler",
            "common alone",
            "rare needle",
        ] {
            let q = fts(words);
            for f in filters() {
                let mut f = ListFilter {
                    fts_query: Some(q.clone()),
                    ..f
                };
                let mut pages = 0;
                loop {
                    let a = list_sessions_with(conn, "w1", "u", &f, Some(SearchPlan::FromMatches))
                        .unwrap();
                    for plan in [SearchPlan::FromList, SearchPlan::InRanges] {
                        let b = list_sessions_with(conn, "w1", "u", &f, Some(plan)).unwrap();
                        assert_eq!(ids(&a.0), ids(&b.0), "{plan:?} {words:?} {f:?}");
                        assert_eq!(a.1, b.1, "{plan:?} {words:?} {f:?}");
                    }
                    let chosen = list_sessions(conn, "w1", "u", &f).unwrap();
                    assert_eq!(ids(&chosen.0), ids(&a.0));
                    // The same page without the full-text index: sessions whose title and
                    // prompts hold every word between them.
                    let plain = ListFilter {
                        fts_query: None,
                        limit: 10_000,
                        ..f.clone()
                    };
                    let want: Vec<String> = list_sessions(conn, "w1", "u", &plain)
                        .unwrap()
                        .0
                        .into_iter()
                        .filter(|r| {
                            let mut texts = prompts(r.pk);
                            texts.push(r.title.clone());
                            holds(&texts, words)
                        })
                        .take(f.limit as usize)
                        .map(|r| r.id)
                        .collect();
                    assert_eq!(ids(&a.0), want, "{words:?} {f:?}");
                    pages += 1;
                    match (a.1, a.0.last()) {
                        (true, Some(last)) if pages < 5 => {
                            f.after = Some((last.created_at, last.id.clone()));
                        }
                        _ => break,
                    }
                }
            }
        }
    }

    /// A walk in ranges stopped by its budget and resumed, chunk after chunk, finds the pages
    /// the matches give; a prefix of a length the prefix index lacks is not walked in ranges.
    #[test]
    fn a_walk_in_ranges_resumes_where_its_budget_stopped_it() {
        let conn = db(3_000);
        let conn = &Db::sqlite(&conn);
        let mut most_runs = 0;
        for words in ["common", "deplo", "common deploy", "zebra filler"] {
            for f in filters() {
                let f = ListFilter {
                    fts_query: Some(fts(words)),
                    ..f
                };
                let want =
                    list_sessions_with(conn, "w1", "u", &f, Some(SearchPlan::FromMatches)).unwrap();
                let mut walk = RangeWalk::new(conn, &f).unwrap();
                let mut runs = 0;
                while !walk.done {
                    walk.run(conn, "w1", &f, Some(1)).unwrap();
                    runs += 1;
                }
                most_runs = most_runs.max(runs);
                let got = walk.rows(conn, "u", f.limit).unwrap();
                assert_eq!(ids(&got.0), ids(&want.0), "{words:?} {f:?}");
                assert_eq!(got.1, want.1, "{words:?} {f:?}");
            }
        }
        assert!(most_runs > 1, "{most_runs}");
        assert!(ranges_seek(&search_terms(&fts("common deploy"))));
        assert!(ranges_seek(&search_terms("\"abcdefghijklmn\" \"x\"*")));
        assert!(!ranges_seek(&search_terms(&fts("abcdefghijklm"))));
    }

    /// A session deleted between a walk's reads and its page's rows (each statement of a read
    /// sees the database as it is then) is left out of the page; the list does not fail.
    #[test]
    fn a_session_deleted_during_a_walk_is_left_out_of_its_page() {
        let raw = db(3_000);
        let conn = &Db::sqlite(&raw);
        let f = ListFilter {
            fts_query: Some(fts("common")),
            limit: 20,
            ..ListFilter::default()
        };
        let mut walk = RangeWalk::new(conn, &f).unwrap();
        walk.run(conn, "w1", &f, None).unwrap();
        let gone = walk.found[3];
        let kept: Vec<i64> = walk
            .found
            .iter()
            .take(20)
            .copied()
            .filter(|pk| *pk != gone)
            .collect();
        raw.execute("DELETE FROM sessions WHERE pk = ?1", [gone])
            .unwrap();
        let (rows, more) = walk.rows(conn, "u", f.limit).unwrap();
        assert_eq!(rows.iter().map(|r| r.pk).collect::<Vec<_>>(), kept);
        assert!(more);
    }

    /// A chunk's keys are read as the ranges they cluster in: a key far from the others gets a
    /// range of its own rather than stretching one over every key between.
    #[test]
    fn a_chunks_keys_are_read_in_the_ranges_they_cluster_in() {
        assert_eq!(key_ranges(vec![]), []);
        assert_eq!(key_ranges(vec![7]), [(7, 7)]);
        assert_eq!(key_ranges(vec![10, 12, 11, 14]), [(10, 14)]);
        assert_eq!(
            key_ranges(vec![1, 100_000, 99_998, 99_999, 50_000]),
            [(1, 1), (50_000, 50_000), (99_998, 100_000)]
        );
        // At most eight ranges: the narrowest gaps stay inside a range.
        let spread: Vec<i64> = (0..20).map(|i| i * 1_000 + i).collect();
        let ranges = key_ranges(spread.clone());
        assert_eq!(ranges.len(), MAX_RANGES_PER_CHUNK);
        assert_eq!(ranges.first().map(|r| r.0), Some(0));
        assert_eq!(ranges.last().map(|r| r.1), spread.last().copied());
        for pk in spread {
            assert!(ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&pk)));
        }
    }

    #[test]
    fn a_rare_word_reads_its_matches_and_a_common_one_walks_the_list() {
        let conn = db(3_000);
        let conn = &Db::sqlite(&conn);
        let plan = |w: &str| search_plan(conn, &fts(w), 50).unwrap();
        assert_eq!(plan("rare"), SearchPlan::FromMatches);
        assert_eq!(plan("nothing"), SearchPlan::FromMatches);
        assert_eq!(plan("common"), SearchPlan::FromList);
        assert_eq!(plan("deplo"), SearchPlan::FromList);
        // 230 sessions hold "filler" in 39 prompts each: counted once each, they are few.
        assert_eq!(plan("filler"), SearchPlan::FromMatches);
        assert_eq!(plan("common deploy"), SearchPlan::FromList);
        // Both words in one row, counted by one query up to the bound; or words in different
        // rows of a session (its first prompt row and the others), counted in full.
        let count = |w: &str, bound| count_matches(conn, &fts(w), bound).unwrap();
        assert_eq!(count("common deploy", 100), 100);
        assert_eq!(count("zebra filler", 10_000), 230);
        assert_eq!(count("zebra filler", 100), 100);
    }

    /// A session whose only matching prompt row is the first of many is found, once, by both
    /// plans.
    #[test]
    fn the_first_of_many_prompts_finds_its_session() {
        let conn = db(3_000);
        let conn = &Db::sqlite(&conn);
        for plan in [
            SearchPlan::FromMatches,
            SearchPlan::FromList,
            SearchPlan::InRanges,
        ] {
            let f = ListFilter {
                fts_query: Some(fts("needle 2600")),
                include_archived: true,
                limit: 20,
                ..Default::default()
            };
            let (rows, more) = list_sessions_with(conn, "w1", "u", &f, Some(plan)).unwrap();
            assert_eq!(rows.iter().map(|r| r.pk).collect::<Vec<_>>(), [2600]);
            assert!(!more);
        }
    }

    fn query_plan<K: AsRef<str>>(conn: &Db, sql: &str, args: &[(K, SqlValue)]) -> String {
        let params = named(args);
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let rows = stmt
            .query_map(params.as_slice(), |r| r.get::<_, String>(3))
            .unwrap();
        rows.map(|r| r.unwrap()).collect::<Vec<_>>().join("\n")
    }

    /// The reads that must not grow with the number of sessions are index walks in the order
    /// they return (no sort of every candidate), checked with `EXPLAIN QUERY PLAN`.
    #[test]
    fn list_activity_and_history_read_in_index_order() {
        let conn = db(3_000);
        let conn = &Db::sqlite(&conn);
        let activity = query_plan(
            conn,
            &activity_sql(),
            &[
                (":agent", SqlValue::Text("a1".into())),
                (":user", SqlValue::Text("u".into())),
                (":limit", SqlValue::Integer(25)),
            ],
        );
        assert!(
            activity.contains("USING INDEX sessions_activity"),
            "{activity}"
        );
        assert!(!activity.contains("TEMP B-TREE"), "{activity}");

        let q = fts("common");
        for f in filters() {
            for search in [None, Some(q.clone())] {
                let f = ListFilter {
                    fts_query: search,
                    after: Some((100, "s000001".into())),
                    ..f.clone()
                };
                let (sql, args) = list_query(
                    Dialect::Sqlite,
                    "w1",
                    &f,
                    Some(SearchPlan::FromList),
                    ListColumns::Rows,
                );
                let mut args = args;
                args.push((":user".into(), SqlValue::Text("u".into())));
                let plan = query_plan(conn, &sql, &args);
                assert!(!plan.contains("TEMP B-TREE"), "{f:?}\n{plan}");
                assert!(
                    plan.contains("SEARCH s USING INDEX sessions_by_"),
                    "{f:?}\n{plan}"
                );
            }
            // A walk in ranges reads its chunks' keys from the index alone unless the agent
            // picks the index (whose rows lack the workspace).
            let chunk = ListFilter {
                include_archived: true,
                exclude_default: false,
                after: Some((100, "s000001".into())),
                ..f.clone()
            };
            let (sql, args) = list_query(Dialect::Sqlite, "w1", &chunk, None, ListColumns::Keys);
            let plan = query_plan(conn, &sql, &args);
            assert!(!plan.contains("TEMP B-TREE"), "{chunk:?}\n{plan}");
            let covering = if chunk.agent_id.is_some() {
                "SEARCH s USING INDEX sessions_by_"
            } else {
                "SEARCH s USING COVERING INDEX sessions_by_"
            };
            assert!(plan.contains(covering), "{chunk:?}\n{plan}");
        }
        // Few matches: read from the full-text index, then sorted (at most the plan's bound).
        let f = ListFilter {
            fts_query: Some(q),
            limit: 20,
            ..Default::default()
        };
        let (sql, args) = list_query(
            Dialect::Sqlite,
            "w1",
            &f,
            Some(SearchPlan::FromMatches),
            ListColumns::Keys,
        );
        let plan = query_plan(conn, &sql, &args);
        assert!(plan.contains("SCAN session_search VIRTUAL TABLE"), "{plan}");
        assert!(
            plan.contains("SCAN session_search_prompts VIRTUAL TABLE"),
            "{plan}"
        );
        assert!(
            plan.contains("SEARCH s USING INTEGER PRIMARY KEY"),
            "{plan}"
        );

        for sql in [
            "SELECT seq FROM events WHERE session_pk = 1 AND seq < 50 ORDER BY seq DESC LIMIT 100",
            "SELECT seq FROM events WHERE session_pk = 1 AND seq > 50 ORDER BY seq LIMIT 100",
        ] {
            let plan = query_plan::<&str>(conn, sql, &[]);
            assert!(plan.contains("USING PRIMARY KEY"), "{plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{plan}");
        }
    }
}
