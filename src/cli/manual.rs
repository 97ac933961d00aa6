//! `openib completions SHELL` and `openib man`: shell completions and manual pages generated
//! from the command's clap definition (clap_complete, clap_mangen), so they list exactly the
//! subcommands and flags the binary parses.

use super::exit;
use clap_complete::Shell;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: Shell,
}

#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// The subcommand whose page to print (e.g. `bench`, or `modex size`); none: openib(1).
    #[arg(value_name = "SUBCOMMAND")]
    pub path: Vec<String>,
    /// Write every page (openib.1, openib-bench.1, openib-modex-size.1, ...) into this
    /// directory instead of printing one.
    #[arg(long, value_name = "DIR", conflicts_with = "path")]
    pub dir: Option<PathBuf>,
}

/// Writes the completion script for `a.shell` of `cmd` (the whole `openib` command) to stdout.
pub fn completions(mut cmd: clap::Command, a: &CompletionsArgs) -> i32 {
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, name, &mut out);
    write_stdout("completions", &out)
}

/// Prints the roff page of `cmd` or of the subcommand `a.path` names, or with `--dir` writes
/// every page. An unknown subcommand is a usage error naming it.
pub fn man(cmd: clap::Command, a: &ManArgs) -> i32 {
    // No `help` pseudo-subcommand pages; display names ("openib-bench") are set by build().
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    if let Some(dir) = &a.dir {
        return match write_pages(cmd, dir) {
            Ok(n) => {
                eprintln!("openib man: wrote {n} pages to {}", dir.display());
                exit::OK
            }
            Err(e) => {
                eprintln!("openib man: {}: {e}", dir.display());
                exit::ERROR
            }
        };
    }
    let mut page = &cmd;
    for (i, name) in a.path.iter().enumerate() {
        match page.find_subcommand(name) {
            Some(sub) => page = sub,
            None => {
                let known: Vec<&str> = page.get_subcommands().map(|s| s.get_name()).collect();
                eprintln!(
                    "openib man: no subcommand {:?} under `{}` (known: {})",
                    name,
                    std::iter::once(cmd.get_name())
                        .chain(a.path[..i].iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(" "),
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                );
                return exit::USAGE;
            }
        }
    }
    let mut out = Vec::new();
    if let Err(e) = page_of(page).render(&mut out) {
        eprintln!("openib man: {e}");
        return exit::ERROR;
    }
    write_stdout("man", &out)
}

/// Every page of `cmd` and its subcommands into `dir` (created); returns how many.
fn write_pages(cmd: clap::Command, dir: &Path) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    fn walk(cmd: &clap::Command, dir: &Path, n: &mut usize) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, dir, n)?;
        }
        page_of(cmd).generate_to(dir)?;
        *n += 1;
        Ok(())
    }
    let mut n = 0;
    walk(&cmd, dir, &mut n)?;
    Ok(n)
}

/// The page of one (built) command: its source line names openib and its version on every
/// page (clap_mangen would use the subcommand's own name and no version).
fn page_of(cmd: &clap::Command) -> clap_mangen::Man {
    clap_mangen::Man::new(cmd.clone()).source(format!("openib {}", env!("CARGO_PKG_VERSION")))
}

/// Writes `bytes` to stdout; a closed pipe (`openib man | head`) is not an error.
fn write_stdout(what: &str, bytes: &[u8]) -> i32 {
    let mut so = std::io::stdout().lock();
    match so.write_all(bytes).and_then(|()| so.flush()) {
        Ok(()) => exit::OK,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::OK,
        Err(e) => {
            eprintln!("openib {what}: {e}");
            exit::ERROR
        }
    }
}
