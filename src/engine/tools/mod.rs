//! Built-in tools that model engines offer, written as plain synchronous functions so that every
//! engine shares one tested implementation and only translates calls and results.
//!
//! `files`: `read_file`, `write_file`, `list_dir` and `search_files`, confined to the session's
//! working directory inside its workspace drive.

pub mod files;
