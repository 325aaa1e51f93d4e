//! The bridge's topic names: where requests arrive, where results, availability, state and stats go.

use crate::error::{Error, Result};

/// Topic names of one device (`P` = prefix, `D` = device id).
#[derive(Debug, Clone)]
pub struct Topics {
    pub prefix: String,
    pub device: String,
    pub group: String,
    /// Fleet requests go through a shared subscription (`$share/<group>/...`).
    pub shared: bool,
}

/// Where a request came in: the model and the optional source (camera) after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTopic {
    pub model: String,
    pub source: Option<String>,
    /// Came in on a `generate` topic: a prompt whose responses are published as they stream.
    pub generate: bool,
}

/// The verbs of request topics: `infer` (one result) and `generate` (streamed results).
pub const VERBS: [&str; 2] = ["infer", "generate"];

/// Checks a name used as one topic level: not empty, no `/`, no wildcards, no NUL.
pub fn check_level(what: &str, v: &str) -> Result<()> {
    if v.is_empty() || v.contains(['/', '+', '#', '\0']) {
        return Err(Error::invalid(format!(
            "{what} '{v}' cannot be used in MQTT topics: it must be non-empty without '/', '+', '#'"
        )));
    }
    Ok(())
}

impl Topics {
    /// Checks the names; the prefix may have several levels but no wildcards.
    pub fn new(prefix: &str, device: &str, group: &str, shared: bool) -> Result<Topics> {
        for level in prefix.split('/') {
            check_level("--mqtt-prefix", level)?;
        }
        if prefix.starts_with('$') {
            return Err(Error::invalid(format!(
                "--mqtt-prefix '{prefix}' cannot start with '$' (reserved by brokers)"
            )));
        }
        check_level("--mqtt-device-id", device)?;
        check_level("--mqtt-group", group)?;
        Ok(Topics { prefix: prefix.into(), device: device.into(), group: group.into(), shared })
    }

    /// The fleet's subscriptions that bring requests for `model` (shared), one per verb: made while
    /// the model is READY here, so the broker routes work only to devices that can serve it.
    pub fn fleet_filters(&self, model: &str) -> [String; 2] {
        VERBS.map(|verb| {
            let fleet = format!("{}/{verb}/{model}/#", self.prefix);
            if self.shared {
                format!("$share/{}/{fleet}", self.group)
            } else {
                fleet
            }
        })
    }

    /// This device's subscriptions, one per verb, for every model (an unknown one gets an error result).
    pub fn device_filters(&self) -> [String; 2] {
        VERBS.map(|verb| format!("{}/{}/{verb}/#", self.prefix, self.device))
    }

    /// Parses a request topic: `P/<verb>/<model>[/<source>]` or `P/D/<verb>/<model>[/<source>]`, where
    /// the verb is `infer` or `generate`. A source may have several levels (`cams/front`).
    pub fn parse_request(&self, topic: &str) -> Option<RequestTopic> {
        let rest = topic.strip_prefix(self.prefix.as_str())?.strip_prefix('/')?;
        let (verb, rest) = rest.split_once('/')?;
        let (verb, rest) = match VERBS.contains(&verb) {
            true => (verb, rest),
            false if verb == self.device => rest.split_once('/').filter(|(v, _)| VERBS.contains(v))?,
            false => return None,
        };
        let (model, source) = match rest.split_once('/') {
            Some((m, s)) => (m, Some(s).filter(|s| !s.is_empty()).map(str::to_string)),
            None => (rest, None),
        };
        (!model.is_empty()).then(|| RequestTopic { model: model.to_string(), source, generate: verb == "generate" })
    }

    /// The result topic of requests without a response topic: `P/result/<model>[/<source>]`.
    pub fn result(&self, req: &RequestTopic) -> String {
        match &req.source {
            Some(s) => format!("{}/result/{}/{s}", self.prefix, req.model),
            None => format!("{}/result/{}", self.prefix, req.model),
        }
    }

    /// `P/D/available`: `online` (retained) while connected, `offline` otherwise (the will).
    pub fn available(&self) -> String {
        format!("{}/{}/available", self.prefix, self.device)
    }

    /// `P/D/state`: models, versions and states, retained.
    pub fn state(&self) -> String {
        format!("{}/{}/state", self.prefix, self.device)
    }

    /// `P/D/stats`: the counters of /metrics as JSON.
    pub fn stats(&self) -> String {
        format!("{}/{}/stats", self.prefix, self.device)
    }
}

#[cfg(test)]
mod tests;
