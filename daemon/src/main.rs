//! `worldd`: see the `worldd` library crate for everything; this binary only reports exits.

fn main() {
    std::process::exit(worldd::cli::main());
}
