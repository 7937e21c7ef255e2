//! The prompt search index's rows (`session_search_prompts`, migration 0010): their keys (a
//! session's rows are one range of rowids) and their size classes (which rows a new prompt joins).
//! The writes that fill the index and the reads that search it both follow these rules, so they
//! live in a module of their own that names neither.

/// Seqs per session in the prompt index's key space (`session_search_prompts`, migration 0010).
pub(crate) const PROMPT_SEQS: i64 = 1 << 32;

/// Bytes of consecutive prompts one search row holds at most: large enough that a search for a
/// word of most prompts gathers a few rows per session, not one per prompt.
pub(crate) const PROMPT_ROW_BYTES: usize = 2048;

/// How many search rows of one size class are joined into one at most (see
/// `Tx::write_prompt_index`).
pub(crate) const PROMPT_ROWS_JOINED: usize = 8;

/// Where the search rows' size classes end: a row is of the first class whose end it is under,
/// and a row of the last end or more is sealed (never joined again). A run of rows no larger
/// than its newest row's class is joined as soon as it reaches that class's end, so the row it
/// makes is of a higher class; and as each of the two rows that cross an end is under it, such
/// a join makes at most twice the last end (with the run's newlines), which fits in
/// [`PROMPT_ROW_BYTES`].
pub(crate) const PROMPT_CLASS_ENDS: [usize; 3] = [64, 512, 1020];

const _: () = assert!(
    2 * (PROMPT_CLASS_ENDS[2] - 1) + PROMPT_ROWS_JOINED - 1 <= PROMPT_ROW_BYTES,
    "a join of the last class fits in a row"
);

/// A search row's size class (an index of [`PROMPT_CLASS_ENDS`], or its length for a sealed
/// row). A row only joins rows of its class or smaller ones, so a prompt is re-indexed about
/// once per class it climbs, never once per prompt after it.
pub(crate) fn prompt_row_class(bytes: usize) -> usize {
    PROMPT_CLASS_ENDS
        .iter()
        .position(|&end| bytes < end)
        .unwrap_or(PROMPT_CLASS_ENDS.len())
}

/// Which of a session's newest search rows (`newest`: key and bytes, newest first) the row being
/// written (`bytes` long) joins: the key of the oldest row joined and the
/// joined row's bytes, or `None` when it stays a row of its own.
///
/// The run walks back over rows of its class or a smaller one (never a larger one: re-indexing
/// it would cost more than the row being written) and is joined as soon as it reaches the
/// class's end, or numbers [`PROMPT_ROWS_JOINED`] rows all of its class. Once joined, it also
/// takes the smaller rows just before it while they fit, so that a short prompt left between
/// longer ones joins the next run instead of staying a row of its own.
pub(crate) fn prompt_run(newest: &[(i64, i64)], bytes: usize) -> Option<(i64, usize)> {
    let class = prompt_row_class(bytes);
    let end = *PROMPT_CLASS_ENDS.get(class)?;
    let len = |row: &(i64, i64)| usize::try_from(row.1).unwrap_or(usize::MAX);
    let (mut bytes, mut same, mut joined) = (bytes, true, None);
    for (i, row) in newest.iter().enumerate() {
        let (row_class, rows) = (prompt_row_class(len(row)), i + 2);
        match joined {
            None if row_class <= class => {
                bytes = bytes.saturating_add(len(row) + 1);
                same &= row_class == class;
                if bytes >= end || (same && rows == PROMPT_ROWS_JOINED) {
                    joined = Some(row.0);
                }
            }
            Some(_)
                if row_class < class
                    && rows <= PROMPT_ROWS_JOINED
                    && bytes.saturating_add(len(row) + 1) <= PROMPT_ROW_BYTES =>
            {
                bytes += len(row) + 1;
                joined = Some(row.0);
            }
            _ => break,
        }
    }
    Some((joined?, bytes)).filter(|(_, bytes)| *bytes <= PROMPT_ROW_BYTES)
}

/// The search row that starts with the prompt at `seq` in session `pk`: `pk · 2^32 + seq`, so
/// that a match names its session (`rowid >> 32`) and a session's rows are one range of rowids.
/// `None` when the pair does not fit in the key.
pub(crate) fn prompt_search_key(pk: i64, seq: u64) -> Option<i64> {
    let seq = i64::try_from(seq).ok().filter(|s| *s < PROMPT_SEQS)?;
    (0..i64::MAX / PROMPT_SEQS)
        .contains(&pk)
        .then(|| pk * PROMPT_SEQS + seq)
}

#[cfg(test)]
mod tests {
    use super::prompt_run;

    /// The run a row of `bytes` joins among `newest` (lengths, newest first; keyed 1, 2, …).
    fn run(bytes: usize, newest: &[i64]) -> Option<(i64, usize)> {
        let rows: Vec<(i64, i64)> = newest
            .iter()
            .enumerate()
            .map(|(i, &len)| (i as i64 + 1, len))
            .collect();
        prompt_run(&rows, bytes)
    }

    #[test]
    fn a_run_is_joined_when_it_reaches_its_class_end() {
        // Two prompts of 300 bytes make a row of the next class; two of those a sealed one.
        assert_eq!(run(300, &[300]), Some((1, 601)));
        assert_eq!(run(601, &[601]), Some((1, 1203)));
        assert_eq!(run(300, &[]), None);
        // Under the end and fewer than eight: each stays a row of its own.
        assert_eq!(run(100, &[100, 100, 100]), None);
        // Eight rows of one class are joined even under its end.
        assert_eq!(run(3, &[3; 7]), Some((7, 31)));
        assert_eq!(run(3, &[3; 6]), None);
        // A sealed row joins nothing.
        assert_eq!(run(1100, &[300]), None);
    }

    #[test]
    fn a_run_takes_smaller_rows_but_never_a_larger_one() {
        // A short prompt never re-indexes the longer row before it.
        assert_eq!(run(20, &[300]), None);
        assert_eq!(run(300, &[700]), None);
        // Smaller rows count towards the end...
        assert_eq!(run(300, &[20, 300]), Some((2, 622)));
        // ...and once the run is joined, the smaller rows just before it go with it.
        assert_eq!(run(601, &[20, 700, 30, 40]), Some((4, 1395)));
        // Eight mixed rows under the end stay apart (eight is for rows of one class).
        assert_eq!(run(100, &[3; 7]), None);
        // Not past the row's bound.
        assert_eq!(run(1000, &[1000, 40, 40, 40]), Some((2, 2042)));
        assert_eq!(run(1000, &[1000, 60]), Some((1, 2001)));
    }
}
