//! Header forwarding (`--http-header-forward-pattern`, `--grpc-header-forward-pattern`): request
//! headers (gRPC metadata) whose names match the pattern become string parameters of the inference
//! request, as tritonserver 2.51 forwards them: matched anywhere in the name, ignoring case (the
//! pattern is compiled so), and taking the place of a request parameter of the same name.

use crate::tensor::{ParamValue, Parameters};

/// Adds every `(name, value)` whose name `pattern` matches to `params`, replacing what the request
/// body gave under that name. Values that are not text (a gRPC `-bin` entry, a header that is not
/// UTF-8) are left out: a parameter here is a string.
pub fn forward<'a>(
    pattern: Option<&regex::Regex>,
    headers: impl IntoIterator<Item = (&'a str, Option<&'a str>)>,
    params: &mut Parameters,
) {
    let Some(pattern) = pattern else { return };
    for (name, value) in headers {
        if let Some(value) = value.filter(|_| pattern.is_match(name)) {
            params.insert(name.to_string(), ParamValue::String(value.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matched_headers_replace_parameters() {
        let re = regex::RegexBuilder::new("^x-").case_insensitive(true).build().unwrap();
        let mut params = Parameters::new();
        params.insert("x-a".into(), ParamValue::Int(1));
        params.insert("p".into(), ParamValue::Int(2));
        forward(Some(&re), [("x-a", Some("h")), ("X-B", Some("b")), ("y", Some("n")), ("x-c", None)], &mut params);
        assert_eq!(params.get("x-a"), Some(&ParamValue::String("h".into())));
        assert_eq!(params.get("X-B"), Some(&ParamValue::String("b".into())));
        assert_eq!(params.get("p"), Some(&ParamValue::Int(2)));
        assert!(!params.contains_key("y") && !params.contains_key("x-c"));
        let before = params.clone();
        forward(None, [("x-d", Some("d"))], &mut params);
        assert_eq!(params, before);
    }
}
