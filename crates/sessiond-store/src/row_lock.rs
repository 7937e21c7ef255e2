//! The rows a unit of work holds until it ends: on PostgreSQL, where units of work of several
//! processes run at once; a no-op on SQLite, whose one writer thread runs each alone.

use super::Tx;
use super::sql::Dialect;
use crate::error::Result;

/// A row a unit of work holds until it ends (see [`Tx::lock`]).
#[derive(Debug, Clone, Copy)]
pub enum RowLock<'a> {
    /// A session's row, by pk.
    Session(i64),
    /// An agent's row: its default session, its schedules.
    Agent(&'a str),
    Schedule(&'a str),
}

impl Tx<'_> {
    /// Holds a row for the rest of the transaction, so that what the unit of work reads next is
    /// what its write replaces, with other units of work waiting. A no-op on SQLite, whose one
    /// writer thread runs each unit of work alone; `SELECT … FOR NO KEY UPDATE` on PostgreSQL,
    /// where units of work of several processes run at once (the weaker lock does not wait for
    /// rows that merely refer to this one, such as a new session of the agent, so foreign-key
    /// checks cannot deadlock with it).
    pub(crate) fn lock(&self, row: RowLock<'_>) -> Result<()> {
        if self.conn.dialect() == Dialect::Sqlite {
            return Ok(());
        }
        match row {
            // Locked by reading the counters, which the unit of work that locks a session
            // usually needs next (one statement instead of two).
            RowLock::Session(pk) => {
                if !self.holds_session_lock(pk) {
                    self.counters(pk)?;
                }
            }
            RowLock::Agent(id) => {
                self.conn
                    .prepare_cached("SELECT 1 FROM agents WHERE id = ?1 FOR NO KEY UPDATE")?
                    .exists([id])?;
            }
            RowLock::Schedule(id) => {
                self.conn
                    .prepare_cached("SELECT 1 FROM schedules WHERE id = ?1 FOR NO KEY UPDATE")?
                    .exists([id])?;
            }
        }
        Ok(())
    }
}
