//! The `sessiond` binary: everything lives in the library; this only hands over the command line.

fn main() -> std::process::ExitCode {
    sessiond::cli::main()
}
