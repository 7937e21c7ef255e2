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
