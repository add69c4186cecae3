fn main() {
    std::process::exit(workbench::cli::main());
}
