//! tritonserver 2.51 flags of the model repository and the front-ends that tritonrs had no room for
//! before issue 35: `--model-config-name`, and the header forwarding patterns of HTTP and gRPC.
//! They keep tritonserver's names and value syntax so an existing command line starts unchanged.

use clap::Args;

/// `--model-config-name`: which configuration file of each model is read. Shared by the server,
/// `validate` and `tune`, as the configuration of a model must be the same for all three.
#[derive(Debug, Clone, Args)]
pub struct ConfigNameArgs {
    /// Read each model's configs/<NAME>.pbtxt in place of its config.pbtxt; a model without that file
    /// keeps config.pbtxt (as tritonserver 2.51 does).
    #[arg(long, env = "TRITONRS_MODEL_CONFIG_NAME", value_name = "NAME", help_heading = "Repository",
          value_parser = parse_config_name)]
    pub model_config_name: Option<String>,
}

/// A configuration name is a file name in the model's `configs` folder: not empty (tritonserver stops
/// at start on an empty one too) and without a path separator, so it cannot name a file elsewhere.
fn parse_config_name(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("empty argument for --model-config-name".into());
    }
    if s.contains('/') || s.contains('\0') {
        return Err(format!("'{s}' is not a file name: a configuration name may not contain '/'"));
    }
    Ok(s.to_string())
}

/// The server's flags of this module: `--http-header-forward-pattern` and `--grpc-header-forward-pattern`.
#[derive(Debug, Clone, Args)]
pub struct ServeCompatArgs {
    /// HTTP headers whose names match this regular expression (anywhere in the name, ignoring case,
    /// as tritonserver matches) are given to the model as request parameters of string value, taking
    /// the place of a request parameter of the same name.
    #[arg(long, env = "TRITONRS_HTTP_HEADER_FORWARD_PATTERN", value_name = "REGEX", help_heading = "HTTP",
          value_parser = parse_header_pattern)]
    pub http_header_forward_pattern: Option<regex::Regex>,
    /// gRPC metadata entries whose keys match this regular expression (anywhere in the key, ignoring
    /// case) are given to the model as request parameters of string value, as for HTTP.
    #[arg(long, env = "TRITONRS_GRPC_HEADER_FORWARD_PATTERN", value_name = "REGEX", help_heading = "gRPC",
          value_parser = parse_header_pattern)]
    pub grpc_header_forward_pattern: Option<regex::Regex>,
}

/// Compiles a forwarding pattern. tritonserver 2.51 starts with an invalid one and forwards nothing;
/// tritonrs refuses it at start, so a typo is not a silent loss of every header.
fn parse_header_pattern(s: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(s)
        .case_insensitive(true)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| format!("invalid regular expression: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names() {
        assert!(parse_config_name("").is_err());
        assert!(parse_config_name("../x").is_err());
        assert_eq!(parse_config_name("with space").as_deref(), Ok("with space"));
    }

    #[test]
    fn header_patterns_match_anywhere_ignoring_case() {
        let re = parse_header_pattern("^x-|foo").unwrap();
        assert!(re.is_match("X-Trace") && re.is_match("my-FOO-h") && !re.is_match("other"));
        assert!(parse_header_pattern("(").is_err());
    }
}
