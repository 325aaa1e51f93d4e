use super::*;
use crate::config::Cli;
use clap::{CommandFactory, FromArgMatches};

fn args(a: &[&str]) -> Vec<OsString> {
    a.iter().map(OsString::from).collect()
}

fn parse(text: &str) -> Result<ConfigFile, String> {
    ConfigFile::parse(text, Path::new("t.toml"))
}

/// The server's settings from a file and a command line (no environment involved).
fn settings(text: &str, cli: &[&str]) -> Result<crate::config::ServeArgs, String> {
    let f = parse(text)?;
    let cmd = Cli::command();
    let validate = cmd.find_subcommand("validate").cloned().unwrap();
    let cmd = f.apply(cmd, &[&validate])?;
    let m = cmd.try_get_matches_from(args(cli)).map_err(|e| e.to_string())?;
    Ok(Cli::from_arg_matches(&m).map_err(|e| e.to_string())?.serve)
}

#[test]
fn the_file_is_named_by_the_flag_then_the_environment() {
    let named = locate(&args(&["tritonrs", "--http-port=1", "--config", "/a.toml"]), Some("/env.toml".into()));
    assert_eq!(named, Some((PathBuf::from("/a.toml"), true)));
    let named = locate(&args(&["tritonrs", "validate", "--config=/b.toml"]), None);
    assert_eq!(named, Some((PathBuf::from("/b.toml"), true)));
    assert_eq!(locate(&args(&["tritonrs"]), Some("/env.toml".into())), Some((PathBuf::from("/env.toml"), true)));
    // After `--` nothing is a flag.
    let named = locate(&args(&["tritonrs", "--", "--config", "/c.toml"]), Some("/env.toml".into()));
    assert_eq!(named, Some((PathBuf::from("/env.toml"), true)));
}

#[test]
fn values_become_command_line_text_with_their_lines() {
    let f = parse("# comment\nmodel-repository = [\"/a\", \"/b\"]\n\nhttp-port = 8000\nstrict-readiness = false\n")
        .unwrap();
    assert_eq!(
        f.entries,
        vec![
            Entry { key: "model-repository".into(), values: vec!["/a".into(), "/b".into()], line: 2 },
            Entry { key: "http-port".into(), values: vec!["8000".into()], line: 4 },
            Entry { key: "strict-readiness".into(), values: vec!["false".into()], line: 5 },
        ]
    );
}

#[test]
fn the_file_sets_defaults_and_the_command_line_wins() {
    let text = "model-repository = [\"/m\"]\nhttp-port = 8100\ngrpc-port = 8101\nstrict-readiness = false\n\
                disable-auto-complete-config = true\nload-model = [\"a\", \"b\"]\n";
    let s = settings(text, &["tritonrs", "--grpc-port=9"]).unwrap();
    assert_eq!(s.repository.model_repository, vec![PathBuf::from("/m")]);
    assert_eq!((s.http_port, s.grpc_port), (8100, 9));
    assert!(!s.strict_readiness);
    assert!(s.model_config.disable_auto_complete_config);
    assert_eq!(s.load_model, vec!["a", "b"]);
    // Untouched flags keep their own defaults.
    assert_eq!(s.metrics_port, 8002);
    let s = settings(text, &["tritonrs", "--model-repository=/x", "--strict-readiness"]).unwrap();
    assert_eq!(s.repository.model_repository, vec![PathBuf::from("/x")]);
    assert!(s.strict_readiness);
}

#[test]
fn validate_reads_the_same_file() {
    let f = parse("model-repository = [\"/m\"]\nhttp-port = 1\n").unwrap();
    let cmd = Cli::command();
    let top = cmd.clone();
    let validate = f.apply(cmd.find_subcommand("validate").cloned().unwrap(), &[&top]).unwrap();
    let cmd = f.apply(cmd, &[&validate]).unwrap().mut_subcommand("validate", |_| validate);
    let m = cmd.try_get_matches_from(args(&["tritonrs", "validate"])).unwrap();
    match Cli::from_arg_matches(&m).unwrap().command {
        Some(crate::config::Command::Validate(v)) => {
            assert_eq!(v.repository.model_repository, vec![PathBuf::from("/m")])
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_mistake_names_the_file_line_and_key() {
    let err = |text: &str| settings(text, &["tritonrs"]).unwrap_err();
    assert_eq!(err("\nhtp-port = 1\n"), "t.toml:2: unknown setting 'htp-port'; did you mean 'http-port'?");
    assert!(err("zzzzzz = 1").starts_with("t.toml:1: unknown setting 'zzzzzz' (settings are"), "{}", err("zzzzzz = 1"));
    assert!(
        err("http-port = \"x\"").starts_with("t.toml:1: 'http-port': invalid value 'x'"),
        "{}",
        err("http-port = \"x\"")
    );
    assert!(err("http-port = 70000").contains("'http-port': invalid value '70000'"), "{}", err("http-port = 70000"));
    assert_eq!(err("id = \"x\"\nhttp-port = [1, 2]"), "t.toml:2: 'http-port' takes one value, not a list");
    assert!(err("strict-readiness = \"maybe\"").contains("is not a boolean"));
    assert_eq!(
        err("disable-auto-complete-config = 1"),
        "t.toml:1: 'disable-auto-complete-config': '1' is not a boolean (use true or false)"
    );
    assert!(err("model-control-mode = \"sometimes\"").contains("'model-control-mode': invalid value 'sometimes'"));
    assert_eq!(err("[mqtt]\nbroker = 1"), "t.toml:1: unknown section '[mqtt]'");
    assert_eq!(err("config = \"/x\""), "t.toml:1: 'config' cannot be set in a configuration file");
    assert_eq!(err("load-model = [[\"a\"]]"), "t.toml:1: 'load-model': a list may not hold lists");
    assert_eq!(err("http-port = 1979-05-27"), "t.toml:1: 'http-port': a date is not a valid value");
    assert!(err("id = \"x\"\nhttp-port = ").starts_with("t.toml:2: "), "{}", err("id = \"x\"\nhttp-port = "));
    assert!(err("http-port = 1\nhttp-port = 2").starts_with("t.toml:2: "), "{}", err("http-port = 1\nhttp-port = 2"));
}

#[test]
fn a_reload_names_the_keys_that_changed() {
    let a = parse("http-port = 1\nlog-verbose = 0\nid = \"x\"\n").unwrap();
    let b = parse("http-port = 2\nlog-verbose = 0\ngrpc-port = 3\n").unwrap();
    assert_eq!(ConfigFile::changed_keys(Some(&a), Some(&b)), vec!["grpc-port", "http-port", "id"]);
    assert_eq!(ConfigFile::changed_keys(None, Some(&a)), vec!["http-port", "id", "log-verbose"]);
    assert!(ConfigFile::changed_keys(Some(&a), Some(&a)).is_empty());
}
