//! `openib ompi`: where Open MPI's BTL component `oib` (`mca_btl_oib.so`, ompi/btl_oib/,
//! docs/OMPI.md) is, the one line that enables it, and whether `ompi_info` lists it with that
//! line in effect. `--build` builds it first (the source tree's `scripts/build-oib`),
//! `--install` copies it into `$HOME/.openmpi/components` (on Open MPI's default path, so no
//! variable is needed), `--uninstall` removes that copy.
//!
//! Contract (docs/CLI.md): exit 0 when the component was found and `ompi_info` lists it; 5 when
//! Open MPI's commands or libopenmpi-dev (needed to build it) are missing, 6 when it is not
//! built (nor installed), 7 when `ompi_info` does not list it, 1 for other failures (a failed
//! build, a copy that failed), 2 for bad usage. Every error names what is missing and the
//! command to run.

use super::exit;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

/// The component's file name, as Open MPI looks for it (`mca_<framework>_<name>.so`).
pub const COMPONENT_FILE: &str = "mca_btl_oib.so";
/// The variable that replaces Open MPI's component path (keep `SYS_DEFAULT` in it).
pub const PATH_VARIABLE: &str = "OMPI_MCA_mca_base_component_path";
/// The mpirun line that uses the component (vader on the node, oib between nodes).
pub const MPIRUN_LINE: &str = "mpirun --mca pml ob1 --mca btl self,vader,oib ./prog";

#[derive(clap::Args, Debug)]
pub struct OmpiArgs {
    /// Print JSON: {"component", "kind", "found": [{"path", "kind", "modified_unix"}],
    /// "installed_to", "enable", "mpirun", "ompi_info", "error"} (docs/CLI.md).
    #[arg(long)]
    pub json: bool,
    /// Use this mca_btl_oib.so (or the directory holding it) instead of looking for one.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["release", "debug", "build"])]
    pub component: Option<PathBuf>,
    /// The release build (target/oib/release); with --build, build it (build-oib --release).
    #[arg(long, conflicts_with = "debug")]
    pub release: bool,
    /// The debug build (target/oib/debug).
    #[arg(long)]
    pub debug: bool,
    /// Build the component first with the source tree's scripts/build-oib (a no-op when it is
    /// up to date; without libopenmpi-dev it says so and this command exits 5).
    #[arg(long)]
    pub build: bool,
    /// Copy the component into $HOME/.openmpi/components, on Open MPI's default component
    /// path: every Open MPI job of this user then opens it, with no variable set.
    #[arg(long, conflicts_with = "uninstall")]
    pub install: bool,
    /// Remove $HOME/.openmpi/components/mca_btl_oib.so (what --install wrote) and stop.
    #[arg(long, conflicts_with_all = ["build", "component", "release", "debug"])]
    pub uninstall: bool,
    /// The openib source tree whose target/oib/ holds the builds and whose scripts/build-oib
    /// --build runs (default: the tree this binary was built from, if it still exists, else
    /// the one its path is in: <tree>/target/<profile>/openib).
    #[arg(long, value_name = "DIR")]
    pub tree: Option<PathBuf>,
}

/// Why `openib ompi` could not say "the component is there and Open MPI lists it".
#[derive(Debug, thiserror::Error)]
pub enum OmpiError {
    /// Open MPI's commands (`ompi_info`) are not installed.
    #[error("Open MPI is not installed: {0}")]
    NoOmpi(String),
    /// The component is not built and cannot be: mpicc or Open MPI's internal headers missing.
    #[error("libopenmpi-dev is missing: {0}")]
    NoOmpiDev(String),
    /// No component was found where this command looks (or at `--component`).
    #[error("the component is not built: {0}")]
    NotBuilt(String),
    /// `ompi_info` ran with the enabling line in effect and did not list `btl oib`.
    #[error("ompi_info does not list the component: {0}")]
    NotListed(String),
    /// scripts/build-oib failed or cannot run.
    #[error("the build failed: {0}")]
    Build(String),
    /// A file operation (install, uninstall) failed.
    #[error("{0}")]
    Io(String),
    /// A flag's value cannot be used (e.g. `--component` not named mca_btl_oib.so).
    #[error("bad usage: {0}")]
    Usage(String),
}

impl OmpiError {
    /// The `error.kind` of `--json`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NoOmpi(_) => "no_ompi",
            Self::NoOmpiDev(_) => "no_ompi_dev",
            Self::NotBuilt(_) => "not_built",
            Self::NotListed(_) => "not_listed",
            Self::Build(_) => "build_failed",
            Self::Io(_) => "io",
            Self::Usage(_) => "usage",
        }
    }

    /// The exit code (docs/CLI.md, "Exit codes").
    pub fn code(&self) -> i32 {
        match self {
            Self::NoOmpi(_) | Self::NoOmpiDev(_) => exit::NO_OMPI,
            Self::NotBuilt(_) => exit::NOT_BUILT,
            Self::NotListed(_) => exit::NOT_LISTED,
            Self::Build(_) | Self::Io(_) => exit::ERROR,
            Self::Usage(_) => exit::USAGE,
        }
    }
}

/// One `mca_btl_oib.so` found.
#[derive(Debug, Clone)]
struct Found {
    path: PathBuf,
    /// "debug", "release" (builds of the tree), "installed" ($HOME/.openmpi/components),
    /// "system" (Open MPI's pkglibdir) or "given" (--component).
    kind: &'static str,
    modified: Option<SystemTime>,
}

impl Found {
    fn at(path: PathBuf, kind: &'static str) -> Option<Found> {
        let meta = std::fs::metadata(&path).ok().filter(|m| m.is_file())?;
        Some(Found {
            path,
            kind,
            modified: meta.modified().ok(),
        })
    }

    fn json(&self) -> Value {
        let secs = self
            .modified
            .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_secs());
        json!({"path": self.path, "kind": self.kind, "modified_unix": secs})
    }
}

/// What `ompi_info` said.
#[derive(Debug, Default)]
struct Listing {
    command: String,
    listed: bool,
    /// The component's `MCA v.. API v..` version line fields, e.g. "mca 2.1.0, api 3.1.0".
    version: Option<String>,
    parameters: Vec<String>,
}

/// Everything the command found out, printed as text or JSON.
#[derive(Debug, Default)]
struct Report {
    found: Vec<Found>,
    chosen: Option<Found>,
    installed_to: Option<PathBuf>,
    removed: Option<PathBuf>,
    /// `None`: on Open MPI's default path, nothing to set.
    enable_dir: Option<PathBuf>,
    listing: Option<Listing>,
    /// Notes for the user (an inherited OMPI_MCA_mca_base_component_path, a second copy).
    notes: Vec<String>,
}

/// Runs `openib ompi`; returns the exit code.
pub fn run(a: &OmpiArgs) -> i32 {
    let mut report = Report::default();
    let result = inspect(a, &mut report);
    if a.json {
        println!("{}", report_json(&report, result.as_ref().err()));
    } else {
        print_text(&report);
        if let Err(e) = &result {
            eprintln!("openib ompi: error: {e}");
        }
    }
    match result {
        Ok(()) => exit::OK,
        Err(e) => e.code(),
    }
}

fn home_components() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".openmpi/components"))
}

/// The source tree: --tree, else the one this binary was built from, else the one holding it.
fn source_tree(a: &OmpiArgs) -> Option<PathBuf> {
    if let Some(t) = &a.tree {
        return Some(t.clone());
    }
    let built_from = Path::new(env!("CARGO_MANIFEST_DIR"));
    if built_from.join("scripts/build-oib").is_file() {
        return Some(built_from.to_path_buf());
    }
    let exe = std::env::current_exe().ok()?;
    // <tree>/target/<profile>/openib
    let tree = exe.parent()?.parent()?.parent()?;
    tree.join("scripts/build-oib")
        .is_file()
        .then(|| tree.to_path_buf())
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `ompi_info` runs at all (Open MPI's commands are installed).
fn check_ompi_info() -> Result<(), OmpiError> {
    match Command::new("ompi_info").arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(OmpiError::NoOmpi(format!(
            "`ompi_info --version` failed ({}): {} (reinstall openmpi-bin)",
            o.status,
            tail(&String::from_utf8_lossy(&o.stderr), 3)
        ))),
        Err(e) => Err(OmpiError::NoOmpi(format!(
            "`ompi_info` cannot run ({e}); install openmpi-bin and libopenmpi-dev (scripts/setup \
             does), then run `openib ompi --build`"
        ))),
    }
}

/// mpicc and Open MPI's internal header opal/mca/btl/btl.h, as scripts/build-oib needs them.
fn check_ompi_dev() -> Result<(), OmpiError> {
    let hint = "install libopenmpi-dev (scripts/setup does), then run `openib ompi --build` \
                (or scripts/build-oib)";
    let o = Command::new("mpicc")
        .arg("--showme:incdirs")
        .output()
        .map_err(|e| OmpiError::NoOmpiDev(format!("`mpicc` cannot run ({e}); {hint}")))?;
    if !o.status.success() {
        return Err(OmpiError::NoOmpiDev(format!(
            "`mpicc --showme:incdirs` failed ({}); {hint}",
            o.status
        )));
    }
    let dirs = String::from_utf8_lossy(&o.stdout).trim().to_string();
    if !dirs
        .split_whitespace()
        .any(|d| Path::new(d).join("opal/mca/btl/btl.h").is_file())
    {
        return Err(OmpiError::NoOmpiDev(format!(
            "Open MPI's internal header opal/mca/btl/btl.h is not in `mpicc --showme:incdirs` \
             ({dirs}); {hint}"
        )));
    }
    Ok(())
}

/// Open MPI's own component directory (`ompi_info --parsable --path pkglibdir`).
fn pkglibdir() -> Option<PathBuf> {
    let o = Command::new("ompi_info")
        .args(["--parsable", "--path", "pkglibdir"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("path:pkglibdir:"))
        .map(|d| PathBuf::from(d.trim()))
}

/// Runs the tree's scripts/build-oib; returns the path it printed.
fn build(tree: &Path, release: bool, quiet: bool) -> Result<PathBuf, OmpiError> {
    let script = tree.join("scripts/build-oib");
    if !script.is_file() {
        return Err(OmpiError::Build(format!(
            "{} does not exist (give the openib source tree with --tree DIR)",
            script.display()
        )));
    }
    let mut c = Command::new(&script);
    if release {
        c.arg("--release");
    }
    if quiet {
        c.arg("--quiet");
    }
    // Its progress and cargo's go to our stderr as they come; stdout is the path.
    let o = c
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| OmpiError::Build(format!("{} cannot run: {e}", script.display())))?;
    let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
    if !o.status.success() {
        return Err(OmpiError::Build(format!(
            "{} exited with {} (its messages are above)",
            script.display(),
            o.status
        )));
    }
    if out.is_empty() {
        // build-oib's skip: it printed why (mpicc or the headers are missing) on stderr.
        check_ompi_dev()?;
        return Err(OmpiError::NoOmpiDev(format!(
            "{} skipped the build (its line above says why); install libopenmpi-dev",
            script.display()
        )));
    }
    Ok(PathBuf::from(out))
}

fn inspect(a: &OmpiArgs, r: &mut Report) -> Result<(), OmpiError> {
    check_ompi_info()?;
    let tree = source_tree(a);
    let home = home_components();
    if a.uninstall {
        let Some(home) = &home else {
            return Err(OmpiError::Io(
                "HOME is not set: no $HOME/.openmpi/components".into(),
            ));
        };
        let f = home.join(COMPONENT_FILE);
        match std::fs::remove_file(&f) {
            Ok(()) => r.removed = Some(f.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(OmpiError::Io(format!("cannot remove {}: {e}", f.display()))),
        }
        if r.removed.is_none() {
            r.notes.push(format!("{} was not there", f.display()));
        }
        return Ok(());
    }
    let built = if a.build {
        let Some(tree) = &tree else {
            return Err(OmpiError::Build(
                "no openib source tree found (give it with --tree DIR)".into(),
            ));
        };
        Some(build(tree, a.release, a.json)?)
    } else {
        None
    };

    // Every copy there is.
    let mut found = Vec::new();
    if let Some(tree) = &tree {
        for kind in ["debug", "release"] {
            found.extend(Found::at(
                tree.join("target/oib").join(kind).join(COMPONENT_FILE),
                kind,
            ));
        }
    }
    if let Some(home) = &home {
        found.extend(Found::at(home.join(COMPONENT_FILE), "installed"));
    }
    let sys = pkglibdir();
    if let Some(d) = &sys {
        found.extend(Found::at(d.join(COMPONENT_FILE), "system"));
    }
    r.found = found.clone();

    let chosen = if let Some(p) = &a.component {
        let p = if p.is_dir() {
            p.join(COMPONENT_FILE)
        } else {
            p.clone()
        };
        if p.file_name().and_then(|n| n.to_str()) != Some(COMPONENT_FILE) {
            return Err(OmpiError::Usage(format!(
                "--component {}: Open MPI opens the component only under the name {COMPONENT_FILE}",
                p.display()
            )));
        }
        Some(Found::at(p.clone(), "given").ok_or_else(|| {
            OmpiError::NotBuilt(format!(
                "--component {}: no such file; build it with `openib ompi --build` (or \
                 scripts/build-oib)",
                p.display()
            ))
        })?)
    } else if let Some(b) = &built {
        let kind = if a.release { "release" } else { "debug" };
        Some(Found::at(b.clone(), kind).ok_or_else(|| {
            OmpiError::Build(format!(
                "scripts/build-oib printed {} but it is not there",
                b.display()
            ))
        })?)
    } else if a.release || a.debug {
        let kind = if a.release { "release" } else { "debug" };
        found.iter().find(|f| f.kind == kind).cloned()
    } else {
        // The newest build of the tree, else the installed copy, else one in Open MPI's own dir.
        let newest = found
            .iter()
            .filter(|f| f.kind == "debug" || f.kind == "release")
            .max_by_key(|f| f.modified)
            .cloned();
        newest.or_else(|| {
            found
                .iter()
                .find(|f| f.kind == "installed" || f.kind == "system")
                .cloned()
        })
    };
    let Some(mut chosen) = chosen else {
        check_ompi_dev()?;
        let (what, flag) = if a.release {
            ("no release build", " --release")
        } else if a.debug {
            ("no debug build", "")
        } else {
            ("no build, no installed copy", "")
        };
        let looked: Vec<String> = tree
            .iter()
            .map(|t| t.join("target/oib/{debug,release}").display().to_string())
            .chain(home.iter().map(|h| h.display().to_string()))
            .chain(sys.iter().map(|d| d.display().to_string()))
            .collect();
        return Err(OmpiError::NotBuilt(format!(
            "{what} of {COMPONENT_FILE} in {}; run `openib ompi --build{flag}` (or \
             scripts/build-oib{flag})",
            looked.join(", ")
        )));
    };

    if a.install {
        let Some(home) = &home else {
            return Err(OmpiError::Io(
                "HOME is not set: no $HOME/.openmpi/components".into(),
            ));
        };
        let dest = home.join(COMPONENT_FILE);
        if chosen.path != dest {
            copy_atomically(&chosen.path, &dest)?;
        }
        r.installed_to = Some(dest.clone());
        chosen = Found::at(dest, "installed")
            .ok_or_else(|| OmpiError::Io("the installed copy vanished".into()))?;
    }

    // The line that enables it: none on Open MPI's default path ($HOME/.openmpi/components and
    // its own pkglibdir), else the variable, which replaces the default path.
    let dir = chosen
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let on_default =
        home.as_deref() == Some(dir.as_path()) || sys.as_deref() == Some(dir.as_path());
    r.enable_dir = (!on_default).then(|| dir.clone());
    if let Ok(v) = std::env::var(PATH_VARIABLE) {
        r.notes.push(format!(
            "your environment sets {PATH_VARIABLE}={v}; the check below replaces it with the \
             line shown"
        ));
    }
    if !on_default && found.iter().any(|f| f.kind == "installed") {
        r.notes.push(format!(
            "an installed copy is in {} too; with {PATH_VARIABLE} set as shown Open MPI does not \
             look there (`openib ompi --uninstall` removes it)",
            home.as_deref().unwrap_or(Path::new("")).display()
        ));
    }
    r.chosen = Some(chosen);

    let listing = ompi_info_lists(r.enable_dir.as_deref());
    let listed = listing.listed;
    let command = listing.command.clone();
    r.listing = Some(listing);
    if !listed {
        return Err(OmpiError::NotListed(format!(
            "`{command}` printed no `mca:btl:oib:` line (its messages are in the output); the \
             component may be stale or built against another Open MPI: rebuild with `openib \
             ompi --build` (or scripts/build-oib) and see `ompi_info --param btl oib --level 9` \
             with the line above"
        )));
    }
    Ok(())
}

/// Copies `from` to `to` through a temporary file in `to`'s directory (created), so a job
/// starting meanwhile never opens half a file.
fn copy_atomically(from: &Path, to: &Path) -> Result<(), OmpiError> {
    let io = |what: &str, p: &Path, e: std::io::Error| {
        OmpiError::Io(format!("cannot {what} {}: {e}", p.display()))
    };
    let dir = to.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io("create", dir, e))?;
    let tmp = dir.join(format!(".{COMPONENT_FILE}.{}", std::process::id()));
    std::fs::copy(from, &tmp).map_err(|e| io("copy to", &tmp, e))?;
    std::fs::rename(&tmp, to).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("rename onto", to, e)
    })
}

/// `ompi_info --parsable --param btl oib --level 9` with the enabling line in effect (the
/// variable set to `<dir>:SYS_DEFAULT`, or unset when the component is on the default path).
fn ompi_info_lists(dir: Option<&Path>) -> Listing {
    let mut c = Command::new("ompi_info");
    c.args(["--parsable", "--param", "btl", "oib", "--level", "9"]);
    c.env_remove(PATH_VARIABLE);
    let mut command = String::new();
    if let Some(d) = dir {
        let v = format!("{}:SYS_DEFAULT", d.display());
        command = format!("{PATH_VARIABLE}={v} ");
        c.env(PATH_VARIABLE, v);
    }
    command.push_str("ompi_info --parsable --param btl oib --level 9");
    let mut l = Listing {
        command,
        ..Listing::default()
    };
    let o = match c.output() {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!("ompi_info cannot run: {e}");
            return l;
        }
    };
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    let mut mca = None;
    let mut api = None;
    for line in out.lines() {
        let Some(rest) = line.strip_prefix("mca:btl:oib:") else {
            continue;
        };
        l.listed = true;
        // `version:"mca:2.1.0"` (Open MPI 4.1 quotes the value)
        let version = rest.strip_prefix("version:").map(|v| v.trim_matches('"'));
        if let Some(v) = version.and_then(|v| v.strip_prefix("mca:")) {
            mca = Some(v.to_string());
        } else if let Some(v) = version.and_then(|v| v.strip_prefix("api:")) {
            api = Some(v.to_string());
        } else if let Some(p) = rest.strip_prefix("param:") {
            let name = p.split(':').next().unwrap_or_default().to_string();
            if !name.is_empty() && !l.parameters.contains(&name) {
                l.parameters.push(name);
            }
        }
    }
    if let (Some(m), Some(a)) = (mca, api) {
        l.version = Some(format!("MCA {m}, API {a}"));
    }
    if !l.listed {
        tracing::info!(
            "ompi_info stdout:\n{}\nstderr:\n{}",
            tail(&out, 20),
            tail(&err, 20)
        );
        let msg = tail(&err, 12);
        if !msg.is_empty() {
            eprintln!("openib ompi: ompi_info said:\n{msg}");
        }
    }
    l
}

fn enable_line(dir: &Path) -> String {
    format!("export {PATH_VARIABLE}={}:SYS_DEFAULT", dir.display())
}

fn print_text(r: &Report) {
    if let Some(p) = &r.removed {
        println!("removed:    {}", p.display());
    }
    if let Some(c) = &r.chosen {
        println!("component:  {} ({})", c.path.display(), c.kind);
    }
    for f in &r.found {
        if r.chosen.as_ref().is_none_or(|c| c.path != f.path) {
            println!("also:       {} ({})", f.path.display(), f.kind);
        }
    }
    if let Some(p) = &r.installed_to {
        println!("installed:  {}", p.display());
    }
    if r.chosen.is_some() {
        match &r.enable_dir {
            Some(d) => println!("enable:     {}", enable_line(d)),
            None => println!("enable:     nothing to set (on Open MPI's default component path)"),
        }
        println!("run:        {MPIRUN_LINE}");
    }
    if let Some(l) = &r.listing {
        if l.listed {
            println!(
                "ompi_info:  lists btl oib ({}), {} parameters",
                l.version.as_deref().unwrap_or("version not shown"),
                l.parameters.len()
            );
        } else {
            println!("ompi_info:  does NOT list btl oib ({})", l.command);
        }
    }
    for n in &r.notes {
        println!("note:       {n}");
    }
}

fn report_json(r: &Report, err: Option<&OmpiError>) -> Value {
    json!({
        "component": r.chosen.as_ref().map(|c| &c.path),
        "kind": r.chosen.as_ref().map(|c| c.kind),
        "found": r.found.iter().map(Found::json).collect::<Vec<_>>(),
        "installed_to": r.installed_to,
        "removed": r.removed,
        "enable": r.chosen.as_ref().map(|_| match &r.enable_dir {
            Some(d) => json!({
                "variable": PATH_VARIABLE,
                "value": format!("{}:SYS_DEFAULT", d.display()),
                "line": enable_line(d),
            }),
            None => json!({"variable": null, "value": null, "line": null}),
        }),
        "mpirun": MPIRUN_LINE,
        "ompi_info": r.listing.as_ref().map(|l| json!({
            "command": l.command,
            "listed": l.listed,
            "version": l.version,
            "parameters": l.parameters,
        })),
        "notes": r.notes,
        "error": err.map(|e| json!({"kind": e.kind(), "message": e.to_string()})),
    })
}
