//! The `tritonrs tune` command: builds the in-process server (or the `--via` client), runs the search
//! with a progress bar, writes the report, the export and `--apply`, and picks the exit status.

use super::{export, report, run, Context, Outcome};
use crate::config::tune::TuneArgs;
use crate::core::repository;
use crate::error::{Error, Result};
use crate::tune::results::TuneReport;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Exit status when Ctrl-C ended the run (after writing what was measured), as shells report SIGINT.
const INTERRUPTED: u8 = 130;

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::FAILURE
}

pub fn main(args: TuneArgs) -> ExitCode {
    if args.repository.model_repository.is_empty() && args.via.is_none() {
        return fail(
            "no model repository: give --model-repository, TRITONRS_MODEL_REPOSITORY or model-repository in the \
             configuration file",
        );
    }
    if args.repository.model_repository.iter().any(|r| crate::storage::is_cloud(&r.to_string_lossy())) {
        return fail("tune reads local repositories only; sync the cloud repository to a folder first");
    }
    if args.apply && args.via.is_some() {
        return fail("--apply writes into a local repository; it cannot be used with --via");
    }
    if let Err(e) = crate::assemble::min_compute_capability(args.min_supported_compute_capability) {
        return fail(e);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("tritonrs-io").build() {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    runtime.block_on(tune(args))
}

async fn tune(args: TuneArgs) -> ExitCode {
    let model_dirs = match model_dirs(&args) {
        Ok(dirs) => dirs,
        Err(e) => return fail(e),
    };
    let target = match target(&args).await {
        Ok(t) => t,
        Err(code) => return code,
    };
    let (cancel_tx, cancel) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\nInterrupted: writing what was measured so far (Ctrl-C again to quit at once).");
            let _ = cancel_tx.send(true);
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(i32::from(INTERRUPTED));
            }
        }
    });
    let (bar, progress) = progress(args.quiet);
    let ctx = Context {
        target,
        model_dirs: model_dirs.clone(),
        gpu: !crate::platform::cuda::usable_gpus().is_empty(),
        cancel,
        progress,
    };
    let result = run(&args, &ctx).await;
    bar.finish_and_clear();
    let (report, outcome) = match result {
        Ok(r) => r,
        Err(e) => return fail(e.message),
    };
    if let super::target::Target::InProcess(server) = &ctx.target {
        server.unload_all().await;
    }
    if let Err(e) = write_results(&args, &report, outcome, &model_dirs) {
        return fail(e);
    }
    match outcome {
        Outcome::Done => ExitCode::SUCCESS,
        Outcome::NothingMeets => {
            match super::all_failed(&report) {
                Some(why) => eprintln!("error: {why}"),
                None => eprintln!(
                    "error: no variant of some model meets the constraints (the report lists what was measured)"
                ),
            }
            ExitCode::FAILURE
        }
        Outcome::Interrupted => ExitCode::from(INTERRUPTED),
    }
}

/// Each model's folder in the repository; an unknown model or an ensemble is refused before anything
/// loads (an ensemble's steps are tuned one by one).
fn model_dirs(args: &TuneArgs) -> Result<Vec<(String, PathBuf)>> {
    let (models, _errors) = repository::scan(&args.repository.model_repository);
    let mut model_dirs = Vec::new();
    for m in &args.models {
        match models.get(m) {
            Some(Ok(dir)) => model_dirs.push((m.clone(), dir.clone())),
            Some(Err(e)) => return Err(Error::invalid(format!("model '{m}': {}", e.message))),
            None if args.via.is_some() => {}
            None => {
                let hint = crate::model_config::pbtxt::closest(m, models.keys().map(String::as_str))
                    .map(|n| format!("; did you mean '{n}'?"))
                    .unwrap_or_default();
                return Err(Error::invalid(format!("unknown model '{m}': it is not in the model repository{hint}")));
            }
        }
    }
    for (m, dir) in &model_dirs {
        let text = std::fs::read_to_string(dir.join("config.pbtxt")).unwrap_or_default();
        if let Ok(cfg) = crate::model_config::pbtxt::parse_config(&text, "config.pbtxt") {
            if let Some(why) = super::space::untunable(&cfg) {
                return Err(Error::invalid(format!("cannot tune model '{m}': {why}")));
            }
        }
    }
    Ok(model_dirs)
}

/// What is measured: the running server of `--via` (after a warning and, without `--yes`, 5 seconds
/// to change one's mind), or the in-process server. `Err`: the exit status, said already.
async fn target(args: &TuneArgs) -> std::result::Result<super::target::Target, ExitCode> {
    let Some(url) = &args.via else {
        return crate::assemble::tune_server(args).await.map(super::target::Target::InProcess).map_err(fail);
    };
    let t = super::target::Target::via(url).map_err(|e| fail(e.message))?;
    t.check_control_mode().await.map_err(|e| fail(e.message))?;
    eprintln!(
        "warning: tune --via loads variants of {} into the server at {url} and drives it at up to {} requests in \
         flight; its clients will see the load and the changed configuration until tuning ends.",
        args.models.join(", "),
        if args.concurrency.is_empty() { args.max_concurrency } else { *args.concurrency.iter().max().unwrap_or(&1) }
    );
    if !args.yes {
        eprintln!("Starting in 5 seconds; press Ctrl-C to stop (--yes skips this wait).");
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {}
            _ = tokio::signal::ctrl_c() => return Err(ExitCode::from(INTERRUPTED)),
        }
    }
    Ok(t)
}

/// Where progress lines go ([`Context::progress`]).
type ProgressLines = Box<dyn Fn(&str) + Send + Sync>;

/// The progress bar (hidden with `--quiet` or when stderr is not a terminal) and where progress lines
/// go: into the bar, or, without one, each measurement's line to stderr unless `--quiet`.
fn progress(quiet: bool) -> (indicatif::ProgressBar, ProgressLines) {
    let bar = if quiet || !std::io::stderr().is_terminal() {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new_spinner();
        if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}") {
            b.set_style(style);
        }
        b.enable_steady_tick(Duration::from_millis(200));
        b
    };
    let progress_bar = bar.clone();
    let lines = Box::new(move |line: &str| {
        if progress_bar.is_hidden() {
            if !quiet && line.contains("infer/s") {
                eprintln!("{line}");
            }
        } else {
            progress_bar.set_message(line.to_string());
        }
    });
    (bar, lines)
}

/// The summary, the report files, `--export` and `--apply`.
fn write_results(
    args: &TuneArgs,
    report: &TuneReport,
    outcome: Outcome,
    model_dirs: &[(String, PathBuf)],
) -> std::result::Result<(), String> {
    println!("{}", report::summary_table(report));
    let written = report::write_all(report, &args.output_dir)
        .map_err(|e| format!("cannot write the report into '{}': {e}", args.output_dir.display()))?;
    println!("Results: {} and {}", written.csv.display(), written.html.display());
    for line in super::best_lines(report) {
        println!("{line}");
    }
    if let Some(dir) = &args.export {
        let files = export::export(report, dir, model_dirs)
            .map_err(|e| format!("cannot export into '{}': {e}", dir.display()))?;
        println!("Exported {} configurations into {}", files.len(), dir.display());
    }
    if args.apply && outcome == Outcome::Done {
        apply_best(report, model_dirs)?;
    } else if args.apply {
        println!("--apply: nothing written, since the run did not finish with a best configuration for every model.");
    }
    Ok(())
}

/// `--apply`: each model's best configuration into its folder (after a backup copy).
fn apply_best(report: &TuneReport, model_dirs: &[(String, PathBuf)]) -> std::result::Result<(), String> {
    for (model, best) in &report.best {
        let (Some(v), Some((_, dir))) =
            (best.and_then(|i| report.variants.get(i)), model_dirs.iter().find(|(n, _)| n == model))
        else {
            continue;
        };
        if v.name.ends_with("_config_default") {
            println!("{model}: its current configuration is the best; config.pbtxt is left as it is.");
            continue;
        }
        match export::apply(dir, &v.config_pbtxt) {
            Ok(Some(backup)) => {
                println!("{model}: wrote {} into {} (the old one is {})", v.name, dir.display(), backup.display())
            }
            Ok(None) => println!("{model}: wrote {} into {}", v.name, dir.display()),
            Err(e) => return Err(format!("cannot write the configuration of '{model}': {e}")),
        }
    }
    Ok(())
}
