//! `openib ompi` (src/cli/ompi.rs, docs/CLI.md) on the host: it finds the component that
//! scripts/build-oib built, prints the line that enables it and checks with `ompi_info` that
//! Open MPI lists it; `--install`/`--uninstall` use $HOME/.openmpi/components; each failure
//! (no Open MPI, no libopenmpi-dev, not built, not listed) has its exit code and names what to
//! run.
//!
//! Prerequisites: mpicc and libopenmpi-dev (to build the component), ompi_info (openmpi-bin).
//! Missing: a failure under CI, a loud skip elsewhere.

#[path = "common/ompi.rs"]
mod ompi;
#[path = "common/prereq.rs"]
mod prereq;

use ompi::{component, runs, text};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch directory of its own under cargo's test tmpdir (removed first).
fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("ompi_cli")
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `openib ompi ARGS` with HOME set to `home` and no inherited component path.
fn openib_ompi(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_openib"))
        .arg("ompi")
        .args(args)
        .env("HOME", home)
        .env_remove("OMPI_MCA_mca_base_component_path")
        .output()
        .expect("openib ompi runs")
}

fn json_of(o: &Output) -> Value {
    let (out, err) = text(o);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}\n{err}"))
}

fn have_ompi_info() -> bool {
    prereq::have(
        runs("ompi_info", "--version"),
        "ompi_info is not installed (openmpi-bin)",
    )
}

#[test]
fn finds_the_built_component_prints_the_enable_line_and_ompi_info_lists_it() {
    let Some(so) = prereq::require(component()) else {
        return;
    };
    if !have_ompi_info() {
        return;
    }
    let home = scratch("found");
    let dir = so.parent().unwrap().display().to_string();
    let o = openib_ompi(&home, &["--json", "--component", &so.display().to_string()]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let j = json_of(&o);
    assert_eq!(j["component"], so.display().to_string());
    assert_eq!(j["kind"], "given");
    assert_eq!(j["error"], Value::Null);
    assert_eq!(j["enable"]["variable"], "OMPI_MCA_mca_base_component_path");
    assert_eq!(j["enable"]["value"], format!("{dir}:SYS_DEFAULT"));
    assert_eq!(
        j["enable"]["line"],
        format!("export OMPI_MCA_mca_base_component_path={dir}:SYS_DEFAULT")
    );
    assert_eq!(
        j["mpirun"],
        "mpirun --mca pml ob1 --mca btl self,vader,oib ./prog"
    );
    assert_eq!(j["ompi_info"]["listed"], true, "{j}");
    assert_eq!(j["ompi_info"]["version"], "MCA 2.1.0, API 3.1.0", "{j}");
    let params: Vec<&str> = j["ompi_info"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for p in [
        "btl_oib_if_include",
        "btl_oib_eager_limit",
        "btl_oib_connect_at_init",
    ] {
        assert!(params.contains(&p), "{p} not in {params:?}");
    }
    // The build scripts/build-oib made (debug) is found without --component, by kind.
    let o = openib_ompi(&home, &["--json", "--debug"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    let j = json_of(&o);
    assert_eq!(j["component"], so.display().to_string());
    assert_eq!(j["kind"], "debug");
    assert!(
        j["found"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == so.display().to_string() && f["kind"] == "debug"),
        "{j}"
    );
    // The text form names the same things.
    let o = openib_ompi(&home, &["--debug"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        out.contains(&format!("component:  {}", so.display())),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "enable:     export OMPI_MCA_mca_base_component_path={dir}:SYS_DEFAULT"
        )),
        "{out}"
    );
    assert!(
        out.contains("ompi_info:  lists btl oib (MCA 2.1.0, API 3.1.0)"),
        "{out}"
    );
}

#[test]
fn install_copies_to_the_default_path_and_uninstall_removes_it() {
    let Some(so) = prereq::require(component()) else {
        return;
    };
    if !have_ompi_info() {
        return;
    }
    let home = scratch("install");
    let o = openib_ompi(
        &home,
        &[
            "--json",
            "--install",
            "--component",
            &so.display().to_string(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    let j = json_of(&o);
    let dest = home.join(".openmpi/components/mca_btl_oib.so");
    assert_eq!(j["installed_to"], dest.display().to_string());
    assert_eq!(j["kind"], "installed");
    assert_eq!(
        std::fs::read(&dest).unwrap(),
        std::fs::read(&so).unwrap(),
        "the copy differs"
    );
    // On Open MPI's default path: nothing to set, and ompi_info (no variable) lists it.
    assert_eq!(j["enable"]["line"], Value::Null, "{j}");
    assert_eq!(j["ompi_info"]["listed"], true, "{j}");
    assert!(
        !j["ompi_info"]["command"]
            .as_str()
            .unwrap()
            .contains("OMPI_MCA_mca_base_component_path"),
        "{j}"
    );
    let o = openib_ompi(&home, &["--json", "--uninstall"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    assert_eq!(json_of(&o)["removed"], dest.display().to_string());
    assert!(!dest.exists());
}

#[test]
fn a_component_ompi_info_does_not_list_is_exit_7() {
    if !have_ompi_info() {
        return;
    }
    let home = scratch("not_listed");
    let fake = home.join("mca_btl_oib.so");
    std::fs::write(&fake, b"not an ELF object").unwrap();
    let o = openib_ompi(
        &home,
        &["--json", "--component", &fake.display().to_string()],
    );
    assert_eq!(o.status.code(), Some(7), "{}", text(&o).1);
    let j = json_of(&o);
    assert_eq!(j["error"]["kind"], "not_listed");
    assert_eq!(j["ompi_info"]["listed"], false);
    let msg = j["error"]["message"].as_str().unwrap();
    assert!(msg.contains("openib ompi --build"), "{msg}");
}

#[test]
fn nothing_built_is_exit_6_and_names_the_build_command() {
    if !have_ompi_info() {
        return;
    }
    if let Err(prereq::Unmet::Missing(why)) = ompi::have_ompi_dev() {
        prereq::missing(&why);
        return;
    }
    let home = scratch("not_built");
    let tree = home.join("tree"); // no target/oib/ in it
    std::fs::create_dir_all(&tree).unwrap();
    let o = openib_ompi(&home, &["--tree", &tree.display().to_string(), "--release"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(6), "{out}{err}");
    assert!(err.contains("not built"), "{err}");
    assert!(err.contains("openib ompi --build --release"), "{err}");
    assert!(
        err.contains(&tree.join("target/oib").display().to_string()),
        "{err}"
    );
    let o = openib_ompi(
        &home,
        &["--json", "--component", "/nonexistent/mca_btl_oib.so"],
    );
    assert_eq!(o.status.code(), Some(6));
    assert_eq!(json_of(&o)["error"]["kind"], "not_built");
    // A file Open MPI would not open under its name is bad usage.
    let o = openib_ompi(&home, &["--component", "/nonexistent/libfoo.so"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
}

#[test]
fn no_open_mpi_or_no_libopenmpi_dev_is_exit_5_and_names_the_package() {
    if !have_ompi_info() {
        return;
    }
    let home = scratch("no_ompi");
    let tree = home.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    let tree = tree.display().to_string();
    // No ompi_info at all.
    let path = path_of(&home.join("empty"), &[]);
    let o = Command::new(env!("CARGO_BIN_EXE_openib"))
        .args(["ompi", "--json", "--tree", &tree])
        .env("HOME", &home)
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(5), "{}", text(&o).1);
    let j = json_of(&o);
    assert_eq!(j["error"]["kind"], "no_ompi");
    assert!(
        j["error"]["message"]
            .as_str()
            .unwrap()
            .contains("openmpi-bin"),
        "{j}"
    );
    // ompi_info but no mpicc, nothing built: the build needs libopenmpi-dev.
    let path = path_of(&home.join("only_info"), &["ompi_info"]);
    let o = Command::new(env!("CARGO_BIN_EXE_openib"))
        .args(["ompi", "--tree", &tree])
        .env("HOME", &home)
        .env("PATH", &path)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(5), "{out}{err}");
    assert!(err.contains("libopenmpi-dev is missing"), "{err}");
    assert!(err.contains("mpicc"), "{err}");
    assert!(err.contains("openib ompi --build"), "{err}");
}

/// A PATH holding only links to these commands (bash and dirname run scripts/build-oib).
fn path_of(dir: &Path, commands: &[&str]) -> String {
    std::fs::create_dir_all(dir).unwrap();
    for c in commands {
        let o = Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
            .unwrap();
        let real = String::from_utf8(o.stdout).unwrap();
        assert!(!real.trim().is_empty(), "{c} is not on this machine's PATH");
        std::os::unix::fs::symlink(real.trim(), dir.join(c)).unwrap();
    }
    dir.display().to_string()
}

/// Without libopenmpi-dev (no mpicc), scripts/build-oib, which scripts/test runs, says so in
/// ONE line and succeeds; under CI it fails, naming the package.
#[test]
fn build_oib_without_libopenmpi_dev_skips_with_one_line_or_fails_under_ci() {
    let home = scratch("skip");
    let path = path_of(&home.join("bin"), &["bash", "dirname"]);
    let run = |ci: Option<&str>| {
        let mut c = Command::new(ompi::root().join("scripts/build-oib"));
        c.env("PATH", &path).env_remove("CI");
        if let Some(v) = ci {
            c.env("CI", v);
        }
        c.output().expect("scripts/build-oib runs")
    };
    let o = run(None);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert_eq!(out, "", "printed a component path without building one");
    assert_eq!(
        err, "build-oib: skipped: mpicc not found (install libopenmpi-dev)\n",
        "not one clear line"
    );
    let o = run(Some("1"));
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("mpicc not found") && err.contains("libopenmpi-dev"),
        "{err}"
    );
}

/// The project's normal build (scripts/test, what CI runs; docs/OMPI.md "Build") builds the
/// component right after the workspace, before the tests.
#[test]
fn scripts_test_builds_the_component_after_the_workspace() {
    let script = std::fs::read_to_string(ompi::root().join("scripts/test")).unwrap();
    let commands: Vec<&str> = script
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    let at = |cmd: &str| {
        commands
            .iter()
            .position(|l| *l == cmd)
            .unwrap_or_else(|| panic!("scripts/test does not run `{cmd}`"))
    };
    let workspace = at("cargo build --workspace --all-targets");
    let component = at("scripts/build-oib");
    let tests = at("cargo test --workspace --no-fail-fast");
    assert!(workspace < component && component < tests, "{commands:?}");
}

/// README's three lines (build, enable, run) are the ones `openib ompi` prints.
#[test]
fn the_readme_says_it_in_three_lines_that_match_the_command() {
    let readme = std::fs::read_to_string(ompi::root().join("README.md")).unwrap();
    let lines: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("## MPI programs over openib"))
        .skip_while(|l| !l.starts_with("```sh"))
        .skip(1)
        .take_while(|l| !l.starts_with("```"))
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].starts_with("cargo run -- ompi --build --release"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with(
            "export OMPI_MCA_mca_base_component_path=$PWD/target/oib/release:SYS_DEFAULT"
        ),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].starts_with("mpirun --mca pml ob1 --mca btl self,vader,oib ./"),
        "{}",
        lines[2]
    );
    // The command prints that export line (here for the debug build, which the tests build;
    // the README's is the release build's, in the sibling directory).
    let Some(_) = prereq::require(component()) else {
        return;
    };
    if !have_ompi_info() {
        return;
    }
    let home = scratch("readme");
    let o = openib_ompi(&home, &["--json", "--debug"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    let j = json_of(&o);
    let want = lines[1]
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
        .replace("$PWD", &ompi::root().display().to_string())
        .replace("/target/oib/release:", "/target/oib/debug:");
    assert_eq!(j["enable"]["line"], want, "{j}");
}
