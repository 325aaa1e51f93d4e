//! Unit tests of `backend/capi/mod.rs`.

/// `exports.list` (what the linker exports) names exactly the functions the files of exported functions define.
#[test]
fn the_linker_exports_every_api_function_and_nothing_else() {
    let code = [
        include_str!("exports.rs"),
        include_str!("requests.rs"),
        include_str!("responses.rs"),
        include_str!("inprocess.rs"),
        include_str!("infer_requests.rs"),
        include_str!("infer_responses.rs"),
        include_str!("metrics.rs"),
        include_str!("resources.rs"),
        include_str!("agent_api.rs"),
        include_str!("cache_api.rs"),
    ]
    .concat();
    let mut defined: Vec<&str> = code
        .split("#[no_mangle]")
        .skip(1)
        .filter_map(|s| s.split("fn ").nth(1))
        .filter_map(|s| s.split('(').next())
        .map(str::trim)
        .collect();
    let list = include_str!("exports.list");
    let body = list.split('{').nth(1).unwrap_or_default();
    let mut listed: Vec<&str> = body.split(';').map(str::trim).filter(|s| s.starts_with("TRITON")).collect();
    defined.sort_unstable();
    listed.sort_unstable();
    assert_eq!(defined, listed);
    assert!(defined.len() > 170);
}
