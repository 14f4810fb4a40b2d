//! `man/tinyrun-sandbox-serve.8`, generated from this binary's clap
//! definitions (module `args`), as tinyrun's own section 8 pages are from
//! its: the test fails when the committed page differs. Regenerate with
//! `UPDATE_MAN=1 cargo test -p tinyrun-sandbox-api man`.

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::CommandFactory;
    use clap_mangen::roff::{bold, roman, Roff};

    const PAGE: &str = "tinyrun-sandbox-serve.8";

    fn render() -> String {
        let mut buf = Vec::new();
        clap_mangen::Man::new(crate::args::Args::command())
            .section("8")
            .source(format!("tinyrun {}", env!("CARGO_PKG_VERSION")))
            .manual("System Manager's Manual")
            .render(&mut buf)
            .expect("render the man page");
        let mut text = String::from_utf8(buf).expect("UTF-8");
        let mut r = Roff::default();
        let item = |r: &mut Roff, term: &str, text: &str| {
            r.control("TP", []);
            r.text([bold(term)]);
            r.text([roman(text)]);
        };
        r.control("SH", ["ROUTES"]);
        r.text([roman(
            "runtime/sandbox-api/openapi.yaml is the reference. Errors are {\"error\": SENTENCE, \"code\": CODE, \
             \"field\": FIELD}; a request looser than the policy gets 403 with the field it asked for.",
        )]);
        for (route, what) in [
            ("GET /v1/health, GET /metrics", "up; Prometheus text (boxes live, commands, start latency, pool hits)"),
            (
                "POST /v1/run",
                "a command in a fresh box (or a pool's, \"pool\": true), removed after: sandbox run --json",
            ),
            ("POST, GET /v1/boxes; GET, DELETE /v1/boxes/ID", "launch, list, one box, terminate (answered at once)"),
            (
                "POST /v1/boxes/ID/commands",
                "sandbox exec --json; streamed with Accept: application/x-ndjson or text/event-stream",
            ),
            ("PUT, GET /v1/boxes/ID/files?path=P; GET .../files/list?path=P", "a file's bytes; a directory's entries"),
            ("PUT, GET /v1/boxes/ID/archive?path=P", "a directory as tar, in or out, as sandbox cp copies"),
            ("POST /v1/boxes/ID/lifetime", "sandbox extend"),
            ("GET, POST, DELETE /v1/pools", "pool list, fill, drain (root only)"),
        ] {
            item(&mut r, route, what);
        }
        r.control("SH", ["EXIT STATUS"]);
        r.text([roman("0 after SIGTERM or SIGINT, once requests in flight are done and the clients' boxes terminated; 1 if the server could not start.")]);
        r.control("SH", ["FILES"]);
        item(&mut r, "<root>/sandbox.sock", "the socket, mode 0660, group --group");
        item(&mut r, "<root>/sandbox-api/owners/ID", "who made box ID (uid:N or token:HASH)");
        item(&mut r, "<root>/sandbox-api/tmp", "uploads and downloads on their way (mode 0700)");
        r.control("SH", ["EXAMPLES"]);
        item(&mut r, "tinyrun sandbox serve --group sandbox", "serve the group sandbox on /run/tinyrun/sandbox.sock");
        item(
            &mut r,
            "curl --unix-socket /run/tinyrun/sandbox.sock -d '{\"command\":[\"python3\",\"-c\",\"print(2+2)\"]}' http://x/v1/run",
            "one run, its JSON result",
        );
        r.control("SH", ["SEE ALSO"]);
        r.text([roman("tinyrun-sandbox(8), tinyrun-sandbox(7)")]);
        text.push_str(&r.to_roff());
        text
    }

    #[test]
    fn the_man_page_matches_the_flags() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../man").join(PAGE);
        let text = render();
        if std::env::var_os("UPDATE_MAN").is_some_and(|v| v == "1") {
            std::fs::write(&path, &text).expect("write the man page");
            return;
        }
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(old == text, "{PAGE} is out of date: UPDATE_MAN=1 cargo test -p tinyrun-sandbox-api man");
    }
}
