//! Man pages in `man/`, generated from the clap definitions in `args.rs`.
//!
//! One page per command: `tinyrun.8` and `tinyrun-<command>.8`. The test
//! below renders every page and fails if a committed page differs, so a
//! flag cannot change without its page. Regenerate with
//! `UPDATE_MAN=1 cargo test -p tinyrun-cli man`.
//!
//! Section 7 pages (`tinyrun-<topic>.7`: the engine recipes, the OCI and
//! sandbox references) are written by hand; the tests check that each is a
//! page and that the README, which stays short, points to it.

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use clap::CommandFactory;
    use clap_mangen::roff::{bold, roman, Roff};
    use clap_mangen::Man;

    use crate::args::Cli;
    use crate::man_text::Block;

    const SECTION: &str = "8";
    /// `sandbox serve`'s page: its flags are the server binary's, and so is
    /// the page (runtime/sandbox-api/src/man.rs makes and checks it).
    const SERVER_PAGE: &str = "tinyrun-sandbox-serve";

    fn man_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../man")
    }

    /// The global options, as `--name` strings, for the subcommand pages.
    fn global_flags(top: &clap::Command) -> Vec<String> {
        top.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
            .filter(|l| !matches!(*l, "help" | "version"))
            .map(|l| format!("--{l}"))
            .collect()
    }

    /// Runc-style booleans (`--flag`, `--flag=false`) would list
    /// "Possible values: true, false" under every flag; drop that noise.
    /// Also drops the generated `help` subcommands, which need no page.
    fn tidy(cmd: clap::Command) -> clap::Command {
        let cmd = cmd.disable_help_subcommand(true).mut_args(|a| {
            let takes_value = a.get_num_args().is_some_and(|n| n.takes_values());
            let values: Vec<String> = (a.get_value_parser().possible_values().into_iter().flatten())
                .map(|v| v.get_name().to_string())
                .collect();
            if takes_value && values == ["true", "false"] {
                a.hide_possible_values(true)
            } else {
                a
            }
        });
        let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
        names.iter().fold(cmd, |cmd, n| cmd.mut_subcommand(n, tidy))
    }

    fn render(cmd: clap::Command, extra: Roff) -> String {
        let mut buf = Vec::new();
        Man::new(cmd)
            .section(SECTION)
            .source(format!("tinyrun {}", env!("CARGO_PKG_VERSION")))
            .manual("System Manager's Manual")
            .render(&mut buf)
            .expect("render man page");
        let mut text = String::from_utf8(buf).expect("man page is UTF-8");
        text.push_str(&extra.to_roff());
        text
    }

    /// EXIT STATUS, FILES and EXAMPLES for the page of `name`.
    fn sections(extra: &mut Roff, name: &str) {
        let e = crate::man_text::extra(name);
        for (title, blocks) in crate::man_text::reference(name) {
            extra.control("SH", [*title]);
            for b in *blocks {
                match b {
                    Block::P(text) => {
                        extra.control("PP", []);
                        extra.text([roman(*text)]);
                    }
                    Block::Item(term, text) => {
                        extra.control("TP", []);
                        extra.text([bold(*term)]);
                        extra.text([roman(*text)]);
                    }
                    Block::Example(lines) => {
                        extra.control("PP", []);
                        extra.control("RS", []);
                        extra.control("nf", []);
                        for l in lines.lines() {
                            extra.text([roman(l)]);
                        }
                        extra.control("fi", []);
                        extra.control("RE", []);
                    }
                }
            }
        }
        // A reference page that has its own EXIT STATUS gets it once.
        if !crate::man_text::reference(name).iter().any(|(title, _)| *title == "EXIT STATUS") {
            extra.control("SH", ["EXIT STATUS"]);
            extra.text([roman(e.exit_status)]);
        }
        extra.control("SH", ["FILES"]);
        extra.text([roman(e.files)]);
        if !e.examples.is_empty() {
            extra.control("SH", ["EXAMPLES"]);
            for (cmd, what) in e.examples {
                extra.control("TP", []);
                extra.text([bold(*cmd)]);
                if !what.is_empty() {
                    extra.text([roman(*what)]);
                }
            }
        }
    }

    /// File name → contents of every page.
    fn pages() -> BTreeMap<String, String> {
        let mut top = tidy(Cli::command());
        top.build();
        let globals = global_flags(&top).join(", ");
        let mut out = BTreeMap::new();
        let subs = sub_pages(&top, &globals, &mut out);
        let mut extra = Roff::default();
        sections(&mut extra, "tinyrun");
        extra.control("SH", ["SEE ALSO"]);
        extra.text([roman(format!("{}, runc(8), crun(1)", subs.join(", ")))]);
        out.insert(format!("tinyrun.{SECTION}"), render(top, extra));
        out
    }

    /// Adds a page for every subcommand of `cmd`, recursively (`tinyrun-sandbox-run.8`);
    /// returns the direct ones' references, `tinyrun-create(8)`.
    fn sub_pages(cmd: &clap::Command, globals: &str, out: &mut BTreeMap<String, String>) -> Vec<String> {
        let parent = cmd.get_display_name().unwrap_or_else(|| cmd.get_name()).to_string();
        let mut refs = Vec::new();
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = sub.get_display_name().unwrap_or_else(|| sub.get_name()).to_string();
            refs.push(format!("{name}({SECTION})"));
            if name == SERVER_PAGE {
                continue;
            }
            let children = sub_pages(sub, globals, out);
            let mut extra = Roff::default();
            extra.control("SH", ["GLOBAL OPTIONS"]);
            extra.text([
                roman("The global options of "),
                bold("tinyrun"),
                roman(format!("({SECTION}) ({globals}) go right after tinyrun.")),
            ]);
            sections(&mut extra, &name);
            extra.control("SH", ["SEE ALSO"]);
            let see: Vec<String> = std::iter::once(format!("{parent}({SECTION})")).chain(children).collect();
            extra.text([roman(see.join(", "))]);
            out.insert(format!("{name}.{SECTION}"), render(sub.clone(), extra));
        }
        refs
    }

    fn is_server_page(file: &str) -> bool {
        file == format!("{SERVER_PAGE}.{SECTION}")
    }

    #[test]
    fn man_pages_match_the_cli() {
        let dir = man_dir();
        let pages = pages();
        if std::env::var_os("UPDATE_MAN").is_some_and(|v| v == "1") {
            std::fs::create_dir_all(&dir).expect("create man/");
            for entry in std::fs::read_dir(&dir).expect("read man/") {
                let path = entry.expect("read man/").path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
                if name.ends_with(&format!(".{SECTION}")) && !pages.contains_key(&name) && !is_server_page(&name) {
                    std::fs::remove_file(&path).expect("remove stale man page");
                }
            }
            for (name, text) in &pages {
                std::fs::write(dir.join(name), text).expect("write man page");
            }
            return;
        }
        let mut problems = Vec::new();
        for (name, text) in &pages {
            match std::fs::read_to_string(dir.join(name)) {
                Ok(old) if old == *text => {}
                Ok(_) => problems.push(format!("{name} is out of date")),
                Err(e) => problems.push(format!("{name}: {e}")),
            }
        }
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(&format!(".{SECTION}")) && !pages.contains_key(&name) && !is_server_page(&name) {
                problems.push(format!("{name} has no command"));
            }
        }
        assert!(
            problems.is_empty(),
            "man pages differ from cli/src/args.rs: {}\nregenerate with: UPDATE_MAN=1 cargo test -p tinyrun-cli man",
            problems.join("; ")
        );
    }

    #[test]
    fn every_page_has_exit_status_files_and_examples() {
        for (name, text) in pages() {
            for section in [".SH \"EXIT STATUS\"", ".SH FILES", ".SH EXAMPLES"] {
                assert_eq!(text.matches(section).count(), 1, "{name} has {section} other than once");
            }
        }
    }

    #[test]
    fn the_sandbox_page_is_a_reference() {
        let pages = pages();
        let page = &pages["tinyrun-sandbox.8"];
        for section in ["JSON RESULT", "EXIT STATUS", "PRESETS AND DEFAULTS", "THE BOX'S FILES", "REQUIREMENTS"] {
            let quoted = page.contains(&format!(".SH \"{section}\"\n"));
            assert!(quoted || page.contains(&format!(".SH {section}\n")), "tinyrun-sandbox.8 lacks {section}");
        }
        // Every field of the result is documented, and every outcome has an example.
        let fields = serde_json::to_value(tinyrun_sandbox::SandboxResult::default()).expect("result as JSON");
        for field in fields.as_object().expect("an object").keys().map(String::as_str).chain(["pool", "writes"]) {
            assert!(
                page.contains(&format!("\\fB{}\\fR", field.replace('_', "\\_")))
                    || page.contains(&format!("\\fB{field}\\fR")),
                "{field} is not documented"
            );
        }
        for outcome in ["exit", "signal", "timeout", "OOM", "setup error"] {
            assert!(page.contains(&format!("Example, {outcome}:")), "no example of {outcome}");
        }
        for code in ["124", "125", "126", "127"] {
            assert!(pages["tinyrun-sandbox-run.8"].contains(code), "sandbox run's page lacks {code}");
        }
    }

    #[test]
    fn every_command_has_a_page() {
        let pages = pages();
        for cmd in [
            "create", "start", "state", "kill", "delete", "run", "list", "spec", "exec", "ps", "events", "pause",
            "resume", "update", "features",
        ] {
            assert!(pages.contains_key(&format!("tinyrun-{cmd}.{SECTION}")), "no page for {cmd}");
        }
        assert!(pages.contains_key("tinyrun.8"));
    }

    #[test]
    fn section_seven_pages_are_pages_and_the_readme_points_to_them() {
        let readme = std::fs::read_to_string(man_dir().join("../README.md")).expect("README.md");
        let lines = readme.lines().count();
        assert!(lines < 300, "README.md has {lines} lines: details go to the man pages of section 7");
        let mut seen = 0;
        for entry in std::fs::read_dir(man_dir()).expect("read man/").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(topic) = name.strip_suffix(".7") else { continue };
            seen += 1;
            let text = std::fs::read_to_string(entry.path()).expect("read page");
            let th = format!(".TH \"{}\" \"7\"", topic.to_uppercase());
            assert!(text.contains(&th), "{name} lacks {th}");
            for section in [".SH NAME\n", ".SH DESCRIPTION\n", ".SH SEE ALSO\n"] {
                assert!(text.contains(section), "{name} lacks {section:?}");
            }
            assert!(readme.contains(&format!("](man/{name})")), "README.md does not link man/{name}");
        }
        for topic in ["podman", "containerd", "docker", "kubernetes", "rootless", "oci", "sandbox"] {
            assert!(man_dir().join(format!("tinyrun-{topic}.7")).exists(), "no tinyrun-{topic}.7");
        }
        assert!(seen >= 7);
    }
}
