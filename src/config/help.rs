//! How the command line presents itself: `-h` is a short summary (the flags a first run needs, one
//! per group), `--help` every flag in its group; both wrap at the terminal's width (80 columns when
//! there is no terminal and no `COLUMNS`), with short value names so a long flag does not push its
//! description off the screen. An unknown flag is answered with the flags close to it, and a flag of
//! tritonserver 2.51 that a command does not take is called one by name.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, Command};
use std::ffi::OsString;
use std::io::IsTerminal;

/// The flags `tritonrs -h` shows; `--help` shows them all.
const SUMMARY: &[&str] = &[
    "config",
    "model-repository",
    "model-control-mode",
    "load-model",
    "log-verbose",
    "http-port",
    "grpc-port",
    "metrics-port",
    "backend-config",
    "mqtt-broker",
];

/// Every flag of tritonserver 2.51's `--help` (tritonrs accepts them all; `tests/python/
/// test_tritonserver_flags.py` starts it with each).
pub const TRITONSERVER_FLAGS: &[&str] = &[
    "allow-cpu-metrics",
    "allow-gpu-metrics",
    "allow-grpc",
    "allow-http",
    "allow-metrics",
    "allow-sagemaker",
    "allow-vertex-ai",
    "backend-config",
    "backend-directory",
    "buffer-manager-thread-count",
    "cache-config",
    "cache-directory",
    "cuda-memory-pool-byte-size",
    "cuda-virtual-address-size",
    "disable-auto-complete-config",
    "enable-peer-access",
    "exit-on-error",
    "exit-timeout-secs",
    "grpc-address",
    "grpc-header-forward-pattern",
    "grpc-http2-max-ping-strikes",
    "grpc-http2-max-pings-without-data",
    "grpc-http2-min-recv-ping-interval-without-data",
    "grpc-infer-allocation-pool-size",
    "grpc-infer-response-compression-level",
    "grpc-keepalive-permit-without-calls",
    "grpc-keepalive-time",
    "grpc-keepalive-timeout",
    "grpc-max-connection-age",
    "grpc-max-connection-age-grace",
    "grpc-port",
    "grpc-restricted-protocol",
    "grpc-root-cert",
    "grpc-server-cert",
    "grpc-server-key",
    "grpc-use-ssl",
    "grpc-use-ssl-mutual",
    "host-policy",
    "http-address",
    "http-header-forward-pattern",
    "http-port",
    "http-restricted-api",
    "http-thread-count",
    "id",
    "load-model",
    "log-error",
    "log-file",
    "log-format",
    "log-info",
    "log-verbose",
    "log-warning",
    "metrics-address",
    "metrics-config",
    "metrics-interval-ms",
    "metrics-port",
    "min-supported-compute-capability",
    "model-config-name",
    "model-control-mode",
    "model-load-gpu-limit",
    "model-load-retry-count",
    "model-load-thread-count",
    "model-namespacing",
    "model-repository",
    "model-store",
    "pinned-memory-pool-byte-size",
    "rate-limit",
    "rate-limit-resource",
    "repoagent-directory",
    "repository-poll-secs",
    "response-cache-byte-size",
    "reuse-grpc-port",
    "reuse-http-port",
    "sagemaker-port",
    "sagemaker-safe-port-range",
    "sagemaker-thread-count",
    "strict-model-config",
    "strict-readiness",
    "trace-config",
    "trace-count",
    "trace-file",
    "trace-level",
    "trace-log-frequency",
    "trace-rate",
    "vertex-ai-default-model",
    "vertex-ai-port",
    "vertex-ai-thread-count",
];

/// The command as it is shown: the summary for `-h`, short value names everywhere, and a width of 80
/// columns where neither a terminal nor `COLUMNS` gives one.
pub fn layout(cmd: Command) -> Command {
    let total = cmd.get_arguments().filter(|a| a.get_long().is_some()).count();
    let mut cmd = cmd
        .mut_args(|a| {
            let shown = a.get_long().is_some_and(|l| SUMMARY.contains(&l) || l == "help" || l == "version");
            // Each description under its flag, so the longest flag shown sets no column (clap shows
            // every flag with next_line_help in -h, so only the summary's get it).
            short_value_name(a.hide_short_help(!shown).next_line_help(shown))
        })
        .after_help(format!(
            "This is a summary: `tritonrs --help` lists all {total} flags in their groups. Every flag is also a \
             TRITONRS_<FLAG> variable and a key of the configuration file (/etc/tritonrs/tritonrs.toml)."
        ))
        .after_long_help(
            "Every flag is also a TRITONRS_<FLAG> variable (the flag's name in capitals, `-` as `_`) and a key \
             of the configuration file, which the variables and the command line override.",
        );
    let names: Vec<String> = cmd.get_subcommands().map(|s| s.get_name().to_string()).collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, |s| s.mut_args(short_value_name));
    }
    if no_width_given() {
        cmd = cmd.term_width(80);
    }
    cmd
}

/// Neither a terminal (on stdout, stderr or stdin, where clap asks for the width) nor `COLUMNS`.
fn no_width_given() -> bool {
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.trim().parse::<usize>().ok());
    columns.is_none()
        && !std::io::stdout().is_terminal()
        && !std::io::stderr().is_terminal()
        && !std::io::stdin().is_terminal()
}

/// A value name shorter than clap's default (the flag's whole name in capitals, which made
/// `--grpc-http2-min-recv-ping-interval-without-data <GRPC_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA>`):
/// `BOOL` for a boolean, else the flag's last word (`--exit-timeout-secs <SECS>`). Names given by hand
/// are kept.
fn short_value_name(a: Arg) -> Arg {
    let (Some(long), Some([name])) = (a.get_long(), a.get_value_names()) else { return a };
    if name.as_str() != a.get_id().as_str().to_uppercase() || name.as_str().len() <= 8 {
        return a;
    }
    let short = if a.get_value_parser().type_id() == std::any::TypeId::of::<bool>() {
        "BOOL".to_string()
    } else {
        match long {
            "grpc-http2-min-recv-ping-interval-without-data" => "MS".to_string(),
            "grpc-http2-max-pings-without-data" => "N".to_string(),
            "log-verbose" => "LEVEL".to_string(),
            _ => match long.rsplit('-').next().unwrap_or(long) {
                "count" => "N".to_string(),
                last => last.to_uppercase(),
            },
        }
    };
    a.value_name(short)
}

/// clap's answer to an unknown flag, made more useful: a flag of tritonserver 2.51 that the command
/// does not take is called one by name, and only flags close to the one given are suggested (clap's
/// own suggestion can be far off: `--memory` got `--cuda-memory-pool-byte-size`). `None`: keep clap's.
pub fn unknown_flag(err: &clap::Error, cmd: &mut Command, args: &[OsString]) -> Option<clap::Error> {
    if err.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(given)) = err.get(ContextKind::InvalidArg) else { return None };
    let name = given.strip_prefix("--")?.split('=').next()?.to_string();
    // The subcommand the flag was given to, if any: the first argument before it that names one.
    let sub = args
        .iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .take_while(|a| a != given)
        .find(|a| cmd.find_subcommand(a).is_some())
        .map(str::to_string);
    let bin = cmd.get_name().to_string();
    let (target, whose) = match &sub {
        Some(s) => (cmd.find_subcommand_mut(s)?, format!("`{bin} {s}`")),
        None => (cmd, bin),
    };
    let message = if TRITONSERVER_FLAGS.contains(&name.as_str()) {
        let server = if sub.is_some() { ": it is a flag of the server (`tritonrs` without a command)" } else { "" };
        format!("tritonserver's --{name} is not supported by {whose}{server}")
    } else {
        let longs = target.get_arguments().flat_map(|a| {
            let mut names: Vec<&str> = a.get_long().into_iter().collect();
            names.extend(a.get_visible_aliases().unwrap_or_default());
            names
        });
        match close_flags(&name, longs).as_slice() {
            [] => format!("unexpected argument '{given}' found"),
            [one] => format!("unexpected argument '{given}' found\n\n  tip: a similar argument exists: '--{one}'"),
            many => {
                let list: Vec<String> = many.iter().map(|f| format!("'--{f}'")).collect();
                format!("unexpected argument '{given}' found\n\n  tip: similar arguments exist: {}", list.join(", "))
            }
        }
    };
    Some(target.error(ErrorKind::UnknownArgument, message))
}

/// The flags close to `name` (without the `--`), closest first, at most three: a typo or two
/// (Damerau-Levenshtein similarity of 0.8 or more), a shortened flag (`model-repo`), or a flag with a
/// word added (`grpc-port-range` for `grpc-port`).
pub fn close_flags<'a>(name: &str, longs: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let name = name.replace('_', "-");
    let mut close: Vec<(f64, &str)> = longs
        .filter_map(|long| {
            let score = strsim::normalized_damerau_levenshtein(&name, long);
            let shortened = name.len() >= 5 && long.starts_with(&name);
            let extended = name.strip_prefix(long).is_some_and(|rest| rest.starts_with('-'));
            (score >= 0.8 || shortened || extended).then_some((score, long))
        })
        .collect();
    close.sort_by(|a, b| b.0.total_cmp(&a.0));
    close.dedup_by(|a, b| a.1 == b.1);
    close.into_iter().take(3).map(|(_, l)| l).collect()
}

#[cfg(test)]
mod tests;
