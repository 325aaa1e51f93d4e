//! Flags of tritonserver's SageMaker and Vertex AI front-ends. tritonrs does not serve those
//! endpoints: the flags are accepted so existing command lines parse, and turning either front-end on
//! stops the start with a line that says so (rather than a server without the routes asked for).

use super::parse_bool;
use clap::{ArgAction, Args};

#[derive(Debug, Clone, Args)]
pub struct HostedArgs {
    /// Serve SageMaker's endpoints: tritonrs does not, and stops at start when this is true.
    #[arg(help_heading = "SageMaker and Vertex AI", long, env = "TRITONRS_ALLOW_SAGEMAKER", value_parser = parse_bool,
          num_args = 0..=1, default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub allow_sagemaker: bool,
    /// SageMaker port (no effect: see --allow-sagemaker).
    #[arg(help_heading = "SageMaker and Vertex AI", long, env = "TRITONRS_SAGEMAKER_PORT", default_value_t = 8080)]
    pub sagemaker_port: u16,
    /// Ports of the other endpoints under SageMaker, as <low>-<high> (no effect: see --allow-sagemaker).
    #[arg(help_heading = "SageMaker and Vertex AI", long, env = "TRITONRS_SAGEMAKER_SAFE_PORT_RANGE",
          value_name = "LOW-HIGH", value_parser = parse_port_range)]
    pub sagemaker_safe_port_range: Option<(u16, u16)>,
    /// SageMaker threads (no effect: see --allow-sagemaker).
    #[arg(
        help_heading = "SageMaker and Vertex AI",
        long,
        env = "TRITONRS_SAGEMAKER_THREAD_COUNT",
        default_value_t = 8
    )]
    pub sagemaker_thread_count: u32,
    /// Serve Vertex AI's endpoints: tritonrs does not, and stops at start when this is true
    /// (tritonserver's default follows AIP_MODE; tritonrs's is false).
    #[arg(help_heading = "SageMaker and Vertex AI", long, env = "TRITONRS_ALLOW_VERTEX_AI", value_parser = parse_bool,
          num_args = 0..=1, default_missing_value = "true", default_value = "false", action = ArgAction::Set)]
    pub allow_vertex_ai: bool,
    /// Vertex AI port (no effect: see --allow-vertex-ai).
    #[arg(help_heading = "SageMaker and Vertex AI", long, env = "TRITONRS_VERTEX_AI_PORT", default_value_t = 8080)]
    pub vertex_ai_port: u16,
    /// Vertex AI threads (no effect: see --allow-vertex-ai).
    #[arg(
        help_heading = "SageMaker and Vertex AI",
        long,
        env = "TRITONRS_VERTEX_AI_THREAD_COUNT",
        default_value_t = 8
    )]
    pub vertex_ai_thread_count: u32,
    /// Vertex AI's model for single-model requests (no effect: see --allow-vertex-ai).
    #[arg(help_heading = "SageMaker and Vertex AI", long, env = "TRITONRS_VERTEX_AI_DEFAULT_MODEL")]
    pub vertex_ai_default_model: Option<String>,
}

impl HostedArgs {
    /// The start-up error when a front-end tritonrs does not have is turned on.
    pub fn check(&self) -> crate::error::Result<()> {
        let refuse = |flag: &str, what: &str| {
            Err(crate::error::Error::invalid(format!(
                "{flag}=true asks for {what} endpoints, which tritonrs does not serve; use its HTTP/REST or gRPC \
                 endpoints, or set {flag}=false."
            )))
        };
        match (self.allow_sagemaker, self.allow_vertex_ai) {
            (true, _) => refuse("--allow-sagemaker", "SageMaker's"),
            (_, true) => refuse("--allow-vertex-ai", "Vertex AI's"),
            _ => Ok(()),
        }
    }
}

/// `<low>-<high>`, tritonserver's `--sagemaker-safe-port-range` syntax.
fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("'{s}' is not a port range <low>-<high> (e.g. 8000-8002)");
    let (low, high) = s.split_once('-').ok_or_else(bad)?;
    let (low, high): (u16, u16) = (low.trim().parse().map_err(|_| bad())?, high.trim().parse().map_err(|_| bad())?);
    if low > high {
        return Err(bad());
    }
    Ok((low, high))
}

#[cfg(test)]
mod tests {
    use super::parse_port_range;

    #[test]
    fn port_ranges() {
        assert_eq!(parse_port_range("8000-8002"), Ok((8000, 8002)));
        assert!(parse_port_range("8002-8000").is_err());
        assert!(parse_port_range("8000").is_err());
        assert!(parse_port_range("a-b").is_err());
    }
}
