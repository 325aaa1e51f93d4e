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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names() {
        assert!(parse_config_name("").is_err());
        assert!(parse_config_name("../x").is_err());
        assert_eq!(parse_config_name("with space").as_deref(), Ok("with space"));
    }
}
