use super::*;
use crate::config::Cli;
use clap::CommandFactory;

fn longs(cmd: &Command) -> Vec<String> {
    cmd.get_arguments()
        .flat_map(|a| {
            let mut names: Vec<String> = a.get_long().map(String::from).into_iter().collect();
            names.extend(a.get_visible_aliases().unwrap_or_default().into_iter().map(String::from));
            names
        })
        .collect()
}

#[test]
fn the_server_takes_every_tritonserver_flag() {
    let have = longs(&Cli::command());
    let missing: Vec<&&str> = TRITONSERVER_FLAGS.iter().filter(|f| !have.iter().any(|h| h == *f)).collect();
    assert!(missing.is_empty(), "tritonserver 2.51 flags tritonrs does not take: {missing:?}");
}

#[test]
fn only_close_flags_are_suggested() {
    let have = longs(&Cli::command());
    let close = |name: &str| close_flags(name, have.iter().map(String::as_str));
    assert_eq!(close("http-thread-cnt"), ["http-thread-count"]);
    assert_eq!(close("model_repository"), ["model-repository"]);
    assert_eq!(close("model-repo"), ["model-repository"]);
    assert_eq!(close("model-control"), ["model-control-mode"]);
    assert_eq!(close("grpc-port-range")[0], "grpc-port");
    assert!(close("allow-gpu-metric").contains(&"allow-gpu-metrics"));
    // Nothing near: nothing suggested (clap offered --cuda-memory-pool-byte-size for --memory).
    assert!(close("memory").is_empty(), "{:?}", close("memory"));
    assert!(close("foo").is_empty());
    assert!(close("http").is_empty(), "{:?}", close("http"));
}

fn error_for(args: &[&str]) -> String {
    let mut cmd = layout(Cli::command());
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let err = cmd.try_get_matches_from_mut(args.clone()).expect_err("an unknown flag");
    unknown_flag(&err, &mut cmd, &args).unwrap_or(err).to_string()
}

#[test]
fn an_unknown_flag_gets_close_flags_or_none_and_a_tritonserver_flag_is_named() {
    let e = error_for(&["tritonrs", "--memory", "1"]);
    assert!(e.starts_with("error: unexpected argument '--memory' found\n") && !e.contains("tip:"), "{e}");
    let e = error_for(&["tritonrs", "--http-thread-cnt=2"]);
    assert!(e.contains("tip: a similar argument exists: '--http-thread-count'"), "{e}");
    // A server flag given to a subcommand that does not take it.
    let e = error_for(&["tritonrs", "validate", "--model-repository", "/m", "--http-port=8000"]);
    assert!(e.starts_with("error: tritonserver's --http-port is not supported by `tritonrs validate`"), "{e}");
}

#[test]
fn value_names_are_short() {
    let cmd = layout(Cli::command());
    let name = |long: &str| {
        let a = cmd.get_arguments().find(|a| a.get_long() == Some(long)).unwrap();
        a.get_value_names().unwrap()[0].to_string()
    };
    assert_eq!(name("grpc-http2-min-recv-ping-interval-without-data"), "MS");
    assert_eq!(name("exit-timeout-secs"), "SECS");
    assert_eq!(name("strict-readiness"), "BOOL");
    assert_eq!(name("model-load-thread-count"), "N");
    // Given by hand: kept.
    assert_eq!(name("cuda-memory-pool-byte-size"), "GPU:BYTES");
    let longest = cmd
        .get_arguments()
        .filter_map(|a| Some(a.get_long()?.len() + a.get_value_names().map_or(0, |v| v[0].len() + 3)))
        .max()
        .unwrap();
    assert!(longest <= 60, "a flag with its value name takes {longest} columns");
}
